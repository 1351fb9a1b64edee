"""Two independent branches in one graph: a GPU integer-vector transform over N

    python examples/gpu_npu_parallel.py [N M SAMPLES [trace.json]]   # 16777216 1024 21

The code, with its full description, is hrx_npu/examples/gpu_npu_parallel.py in the hrx-npu
package (``pip install -e plugins/hrx_npu``; ``hrx demo`` runs the main examples);
this script is its command line (``--help``).
"""

import sys

from hrx_npu.examples.gpu_npu_parallel import main

if __name__ == "__main__":
    sys.exit(main())
