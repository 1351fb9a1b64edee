"""GPU/NPU exchange through shared memory, checked on every round.

    python examples/shared_roundtrip.py [--bytes 1048576] [--rounds 3]

The code, with its full description, is hrx_npu/examples/shared_roundtrip.py in the hrx-npu
package (``pip install -e plugins/hrx_npu``; ``hrx demo`` runs the main examples);
this script is its command line (``--help``).
"""

import sys

from hrx_npu.examples.shared_roundtrip import main

if __name__ == "__main__":
    sys.exit(main())
