"""hrx_image: image preprocessing for HRX (normalize, patchify, resize, affine,
composite) with host and cuda kernels that agree byte for byte on uint8 outputs.

    import hrx_core as hrx
    from hrx_image import ImageOps
    ops = ImageOps(hrx.device())
    img = ops.upload(frame_u8)                      # [H, W, 3] or [N, H, W, 3]
    x = ops.normalize(ops.resize(img, 224), "imagenet", patch_size=16)
    x.numpy()                                       # [196, 768] float32
"""

from __future__ import annotations

from hrx_tensor import DeviceTensor

from .ops import AffineParams, ImageOps
from .tables import PRESETS

__version__ = "0.1.0"
__all__ = ["PRESETS", "AffineParams", "DeviceTensor", "ImageOps", "__version__"]
