"""GPU preprocessing, NPU 8x8 BF16 matmul, GPU epilogue -- with concurrent requests.

    python examples/gemm_pipeline.py [--m 1024] [--requests 4] [--rounds 5]

The code, with its full description, is hrx_npu/examples/gemm_pipeline.py in the hrx-npu
package (``pip install -e plugins/hrx_npu``; ``hrx demo`` runs the main examples);
this script is its command line (``--help``).
"""

import sys

from hrx_npu.examples.gemm_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
