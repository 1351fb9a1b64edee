"""hrx_models: models on HRX -- a GPT-2 decoder with host and cuda kernels.

    import hrx_core as hrx
    from hrx_models.gpt2 import Gpt2Decoder
    dec = Gpt2Decoder.load("ckpt/", hrx.device())
    print(dec.generate([464, 2068], max_new_tokens=16).tokens)
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
