"""A resident GPU stage and NPU stage exchanging payloads without host round trips.

    python examples/resident_exchange.py [--payloads 64] [--m 1] [--slots 8]

The code, with its full description, is hrx_npu/examples/resident_exchange.py in the
hrx-npu package (``pip install -e plugins/hrx_npu``; ``hrx demo`` runs it too); this
script is its command line (``--help``).
"""

import sys

from hrx_npu.examples.resident_exchange import main

if __name__ == "__main__":
    sys.exit(main())
