"""HRX for Python: run inference pipelines across GPUs and NPUs.

    import hrx_core as hrx
    dev = hrx.device()            # the best engine installed (HRX_ENGINE forces one)
    s = dev.stream()
    buf = s.allocate_from(np.arange(16, dtype=np.float32))
    print(s.download(buf).view(np.float32))
"""

from __future__ import annotations

__version__ = "0.1.0"

from .budget import Charge, MemoryBudget, Reservation
from .buffer import Binding, Buffer, View
from .completion import Completion, Event
from .device import Device, QueueSlot
from .engine import Access, CacheOp
from .errors import (
    AccessConflict,
    ArtifactError,
    BudgetExceeded,
    CallbackError,
    CompileError,
    DeviceError,
    EngineNotFound,
    HRXError,
    InvalidArgument,
    MissingDependency,
    OutOfBounds,
    Overlap,
    PluginError,
    Quarantined,
    QueueFull,
    Timeout,
    Unsupported,
)
from .graph import Graph, Node
from .kernel import Kernel
from .plugins import compile, device, devices, engine_status, engines, open_device, reload
from .pool import BufferPool, PooledBuffer
from .stream import PreparedLaunch, Stream

__all__ = [
    "__version__",
    "Access",
    "AccessConflict",
    "ArtifactError",
    "Binding",
    "Buffer",
    "BufferPool",
    "BudgetExceeded",
    "CacheOp",
    "CallbackError",
    "Charge",
    "CompileError",
    "Completion",
    "Device",
    "DeviceError",
    "EngineNotFound",
    "Event",
    "Graph",
    "HRXError",
    "InvalidArgument",
    "MissingDependency",
    "Kernel",
    "MemoryBudget",
    "Node",
    "OutOfBounds",
    "Overlap",
    "PluginError",
    "PooledBuffer",
    "PreparedLaunch",
    "Quarantined",
    "QueueFull",
    "QueueSlot",
    "Reservation",
    "Stream",
    "Timeout",
    "Unsupported",
    "View",
    "compile",
    "device",
    "devices",
    "engine_status",
    "engines",
    "open_device",
    "reload",
]

# The model layer (sessions, frozen definitions, prepared slots, fragments) loads on
# first use: it pulls in the execution runtime, which plain stream users never need.
_MODEL_NAMES = ("DeviceTensor", "InferenceGraph", "ModelContext", "ModelDefinition", "ModelSession", "PreparedModel")
__all__ += ["model", *_MODEL_NAMES]


def __getattr__(name: str) -> object:
    if name == "model" or name in _MODEL_NAMES:
        import importlib

        model = importlib.import_module(".model", __name__)
        return model if name == "model" else getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
