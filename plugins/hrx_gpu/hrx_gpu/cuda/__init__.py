"""hrx_gpu.cuda: the ``cuda`` engine -- NVIDIA GPUs through the CUDA driver API (cffi)
and NVRTC. Importing it loads nothing native: the driver and NVRTC are opened on first
use, so it imports cleanly on machines without a GPU."""
