"""Test-session defaults for the whole repository.

The AMD engines run on the simulated Strix Halo in tests unless ``HRX_AMDF_PROVIDER``
says otherwise (a Strix Halo owner runs the suites with ``HRX_AMDF_PROVIDER=libamdf``;
see scripts/test-amd-hardware.sh).
"""

import os

os.environ.setdefault("HRX_AMDF_PROVIDER", "fake")
