"""Bandwidth and latency of GPU/NPU exchange through shared memory, by size.

    python examples/shared_bench.py [--max-bytes 67108864] [--reps 9]

The code, with its full description, is hrx_npu/examples/shared_bench.py in the hrx-npu
package (``pip install -e plugins/hrx_npu``; ``hrx demo`` runs the main examples);
this script is its command line (``--help``).
"""

import sys

from hrx_npu.examples.shared_bench import main

if __name__ == "__main__":
    sys.exit(main())
