"""HRX's pytest plugin (entry point ``pytest11: hrx``), loaded by every pytest session
in an environment where hrx-core is installed.

It makes test sessions run the AMD engines on the simulated Strix Halo unless
``HRX_AMDF_PROVIDER`` says otherwise: CI has no AMD hardware, and a Strix Halo owner
runs the suites with ``HRX_AMDF_PROVIDER=libamdf`` (scripts/test-amd-hardware.sh).
"""

from __future__ import annotations

import os
from typing import Any


def pytest_configure(config: Any) -> None:
    os.environ.setdefault("HRX_AMDF_PROVIDER", "fake")
