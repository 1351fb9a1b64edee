"""TensorOps built with one or the other gather path, for the tests (a module of its own:
test modules import it by name, which a ``conftest`` of another plugin could shadow)."""

from __future__ import annotations

from typing import Any


def make_ops(dev: Any, *, param_gather: bool, **kwargs: Any) -> Any:
    """A TensorOps whose gather_rows passes indices in the launch's parameters where
    the device allows (``param_gather``) or always through host-visible memory."""
    from hrx_tensor import TensorOps

    class Ops(TensorOps):
        use_param_gather = param_gather

    return Ops(dev, **kwargs)
