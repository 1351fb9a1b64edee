"""hrx_image against its peers, in one process: resize, affine, normalize, patchify and
the whole ViT preprocessing pipeline.

    python bench/image.py [--reps 7] [--engine cuda|host] [--batch N]

On cuda (ids image.cuda.*, bench/results/h200.json): batches of 1080p RGB uint8
frames, each op against torchvision.transforms.v2.functional on CUDA tensors
(uint8 [N,3,H,W], its native layout; HRX uses [N,H,W,3]); where torchvision is not
installed the peer is torch.nn.functional (interpolate, affine_grid + grid_sample,
arithmetic) and the entry's ``peer`` says so. Patchify's peer is torch
reshape/permute/contiguous. The pipeline (resize to 224 or 448, affine warp,
normalize to float32, 16x16 patches) runs as one recorded HRX graph (resize and
affine fragments, normalize writing patches directly) against torchvision op by op,
and HRX op by op against the same. Figures are frames per second (rates: goal >=).

On the host (ids image.host.*, bench/results/host-2core.json): one 1080p frame per
call, against OpenCV (cv2) and PIL where installed (missing peers are skipped) and
numpy for normalize/patchify. Every figure alternates HRX and peer rounds; values
are medians; GPU work is timed with host clocks around a loop closed by a
synchronization (compilation and first touch excluded by warm-up).

``image.*.patchify.host_us.*`` is the host CPU time of one eager patchify call (the
issuing thread's CPU time over batches of calls, synchronizations between batches
not counted; bench/tensor.py's ``host_cost``), on cuda against torch's
reshape/permute/contiguous.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hrx_image import ImageOps  # noqa: E402
from results_file import entry, machine_file, report, write  # noqa: E402
from results_file import rounds  # noqa: E402
from tensor import _machine, host_cost  # noqa: E402 - bench/tensor.py's helpers

import hrx_core as hrx  # noqa: E402

CMD = "python bench/image.py"
H, W = 1080, 1920
SIZES = (224, 448)
PATCH = 16
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: the warp of the pipeline: rotate 10 degrees, scale 1.1, translate (5, 3) about the centre
ANGLE, SCALE, TRANSLATE = 10.0, 1.1, (5.0, 3.0)


def inverse_matrix(size: int) -> np.ndarray:
    """Inverse 2x3 matrix (output pixel -> source) of the pipeline's warp on a size x size image."""
    c = (size - 1) / 2
    t = np.deg2rad(ANGLE)
    fwd = SCALE * np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    inv = np.linalg.inv(fwd)
    centre = np.array([c, c])
    offset = centre - inv @ (centre + np.array(TRANSLATE))
    return np.hstack([inv, offset[:, None]])


def describe(batch: int, size: int) -> dict[str, str]:
    """What each figure measures."""
    return {
        "resize": f"resize {batch}x1080p -> {size} bilinear (antialias off), uint8",
        "resize_aa": f"resize {batch}x1080p -> {size} bilinear antialias, uint8",
        "affine": f"affine warp {batch}x{size}x{size} uint8, bilinear, zero border",
        "normalize": f"normalize {batch}x{size}x{size} uint8 -> float32 CHW (ImageNet mean/std)",
        "patchify": f"patchify {batch}x3x{size}x{size} float32, p={PATCH}",
        "pipeline": f"pipeline {batch}x1080p -> resize {size} -> affine -> normalize -> patches, op by op",
    }


def setup(engine: str, batch: int):
    """ImageOps on ``engine``, a batch of random 1080p frames, and its device copy."""
    ops = ImageOps(hrx.device(engine))
    frames = np.random.default_rng(0).integers(0, 256, (batch, H, W, 3), dtype=np.uint8)
    return ops, frames, ops.upload(frames)


def rate(fn: Callable[[], None], frames: int, iters: int, sync: Callable[[], None]) -> Callable[[], float]:
    """A round: ``iters`` calls of ``fn`` then ``sync``; frames per second."""

    def one() -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        return frames * iters / (time.perf_counter() - t0)

    return one


# -- the HRX side, shared by both engines ----------------------------------------------


def hrx_ops(ops: ImageOps, src, size: int) -> dict[str, Callable[[], None]]:
    """HRX calls over a batch ``src`` ([N, H, W, 3] uint8); each closes its result."""
    m = inverse_matrix(size)
    small = ops.resize(src, size)
    chw = ops.normalize(small, MEAN, STD)
    small.numpy(), chw.numpy()  # materialize the inputs of the later stages

    def pipeline():
        r = ops.resize(src, size)
        a = ops.affine(r, m)
        r.close()
        ops.normalize(a, MEAN, STD, patch_size=PATCH).close()
        a.close()

    return {
        "resize": lambda: ops.resize(src, size).close(),
        "resize_aa": lambda: ops.resize(src, size, antialias=True).close(),
        "affine": lambda: ops.affine(small, m).close(),
        "normalize": lambda: ops.normalize(small, MEAN, STD).close(),
        "patchify": lambda: ops.patchify(chw, PATCH).close(),
        "pipeline": pipeline,
        "_keep": (small, chw),  # type: ignore[dict-item]
    }


def hrx_graph(ops: ImageOps, src, size: int):
    """The pipeline recorded once as an access graph; returns (graph, outputs to keep)."""
    g = ops.stream.access_graph()
    g.input("frames", src.buffer)
    r = ops.resize_fragment(g, src, size)
    a, _params = ops.affine_fragment(g, r, inverse_matrix(size))
    p = ops.normalize_fragment(g, a, MEAN, STD, patch_size=PATCH)
    g.launch().wait()
    return g, (r, a, p)


# -- cuda ------------------------------------------------------------------------------


def torch_peer():
    """(name, ops) of torchvision.transforms.v2.functional, or torch.nn.functional."""
    import torch

    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)

    def patchify(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 1, 3, 5).reshape(
            n, (h // PATCH) * (w // PATCH), c * PATCH * PATCH).contiguous()

    try:
        import torchvision.transforms.v2.functional as TF
        from torchvision.transforms import InterpolationMode

        def resize(x, size, aa):
            return TF.resize(x, [size, size], interpolation=InterpolationMode.BILINEAR, antialias=aa)

        def affine(x):
            return TF.affine(x, angle=ANGLE, translate=list(TRANSLATE), scale=SCALE, shear=[0.0, 0.0],
                             interpolation=InterpolationMode.BILINEAR)

        def normalize(x):
            return TF.normalize(TF.to_dtype(x, torch.float32, scale=True), MEAN, STD)

        return "torchvision.transforms.v2.functional", resize, affine, normalize, patchify
    except Exception:  # noqa: BLE001 - missing, or built for another torch (RuntimeError at import)
        import torch.nn.functional as F

        def resize(x, size, aa):
            y = F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=aa)
            return y.round_().clamp_(0, 255).to(torch.uint8)

        grids = {}

        def affine(x):
            n, c, h, w = x.shape
            key = (n, h, w)
            if key not in grids:
                t = np.deg2rad(ANGLE)
                inv = np.linalg.inv(SCALE * np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]))
                theta = torch.tensor(np.hstack([inv, [[-2 * TRANSLATE[0] / w], [-2 * TRANSLATE[1] / h]]]),
                                     dtype=torch.float32, device="cuda").expand(n, 2, 3)
                grids[key] = F.affine_grid(theta, [n, c, h, w], align_corners=False)
            y = F.grid_sample(x.float(), grids[key], mode="bilinear", padding_mode="zeros", align_corners=False)
            return y.round_().clamp_(0, 255).to(torch.uint8)

        def normalize(x):
            return (x.float() / 255 - mean) / std

        return "torch.nn.functional (torchvision missing)", resize, affine, normalize, patchify


def torch_ops(size, tsrc, tsmall, tchw, t_resize, t_affine, t_normalize, t_patchify) -> dict[str, Callable[[], object]]:
    """The peer's calls for one output size (same names as :func:`hrx_ops`)."""
    return {
        "resize": lambda: t_resize(tsrc, size, False),
        "resize_aa": lambda: t_resize(tsrc, size, True),
        "affine": lambda: t_affine(tsmall),
        "normalize": lambda: t_normalize(tsmall),
        "patchify": lambda: t_patchify(tchw),
        "pipeline": lambda: t_patchify(t_normalize(t_affine(t_resize(tsrc, size, False)))),
    }


def cuda_bench(reps: int, batch: int) -> list[dict]:
    import torch

    ops, frames, src = setup("cuda", batch)
    s = ops.stream
    out: list[dict] = []
    tsrc = torch.from_numpy(frames).cuda().permute(0, 3, 1, 2).contiguous()  # [N, 3, H, W]
    peer, t_resize, t_affine, t_normalize, t_patchify = torch_peer()

    def sync():
        s.synchronize()
        torch.cuda.synchronize()

    for size in SIZES:
        calls = hrx_ops(ops, src, size)
        tsmall = t_resize(tsrc, size, False)
        tchw = t_normalize(tsmall)
        torch_calls = torch_ops(size, tsrc, tsmall, tchw, t_resize, t_affine, t_normalize, t_patchify)
        what = describe(batch, size)
        per = {"resize": 20, "resize_aa": 10, "affine": 50, "normalize": 50, "patchify": 50, "pipeline": 20}
        for name, fn in calls.items():
            if name.startswith("_"):
                continue
            try:
                h_fn = rate(fn, batch, per[name], sync)
                t_fn = rate(torch_calls[name], batch, per[name], sync)
                h_fn(), t_fn()
                h, t = rounds([h_fn, t_fn], reps)
                p = "torch reshape/permute/contiguous" if name == "patchify" else peer
                out.append(entry(f"image.cuda.{name}.{size}", what[name] + ", frames/s", "frames/s", h, peer=p,
                                 peer_value=t, goal=">= 1.0", command=CMD))
            except Exception:  # noqa: BLE001 - report and keep the other figures
                traceback.print_exc()
        try:
            h = statistics.median(host_cost(calls["patchify"], sync, calls=500) for _ in range(reps))
            t = statistics.median(host_cost(lambda x=tchw: t_patchify(x), sync, calls=500) for _ in range(reps))
            out.append(entry(f"image.cuda.patchify.host_us.{size}", f"eager patchify {batch}x3x{size}x{size} float32, p={PATCH}: host CPU time per call",
                             "us", h, peer="torch reshape/permute/contiguous", peer_value=t, command=CMD))
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        try:
            g, keep = hrx_graph(ops, src, size)
            g_fn = rate(g.launch, batch, 20, sync)
            t_fn = rate(torch_calls["pipeline"], batch, 20, sync)
            g_fn(), t_fn()
            h, t = rounds([g_fn, t_fn], reps)
            out.append(entry(f"image.cuda.pipeline_graph.{size}",
                             f"pipeline {batch}x1080p -> {size} -> affine -> normalize+patchify as one HRX graph, frames/s",
                             "frames/s", h, peer=f"{peer}, op by op", peer_value=t, goal=">= 1.5", command=CMD))
            g.close()
            for k in keep:
                k.close()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        for k in calls["_keep"]:
            k.close()
        torch.cuda.empty_cache()
    return out


# -- host ------------------------------------------------------------------------------


def host_bench(reps: int, batch: int) -> list[dict]:
    ops, frames, src = setup("host", batch)
    s = ops.stream
    out: list[dict] = []
    try:
        import cv2
    except ImportError:
        cv2 = None
    try:
        from PIL import Image
    except ImportError:
        Image = None
    mean, std = np.array(MEAN, np.float32), np.array(STD, np.float32)
    size = 224
    calls = hrx_ops(ops, src, size)
    small = calls["_keep"][0].numpy()
    chw = calls["_keep"][1].numpy()
    m = inverse_matrix(size)

    def np_normalize(x):
        return ((x.astype(np.float32) / np.float32(255) - mean) / std).transpose(0, 3, 1, 2).copy()

    def np_patchify(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // PATCH, PATCH, w // PATCH, PATCH).transpose(0, 2, 4, 1, 3, 5).reshape(n, -1, c * PATCH * PATCH).copy()

    peers: dict[str, list[tuple[str, str, Callable[[], object], str | None]]] = {
        "normalize": [("numpy", "numpy (x/255 - mean)/std, CHW", lambda: np_normalize(small), None)],
        "patchify": [("numpy", "numpy reshape/transpose/copy", lambda: np_patchify(chw), None)],
        "resize": [], "resize_aa": [], "affine": [], "pipeline": [],
    }
    if cv2 is not None:
        peers["resize"].append(("opencv", "OpenCV cv2.resize INTER_LINEAR", lambda: [cv2.resize(f, (size, size), interpolation=cv2.INTER_LINEAR) for f in frames], ">= 0.2"))
        peers["resize_aa"].append(("opencv", "OpenCV cv2.resize INTER_AREA", lambda: [cv2.resize(f, (size, size), interpolation=cv2.INTER_AREA) for f in frames], ">= 0.2"))
        peers["affine"].append(("opencv", "OpenCV cv2.warpAffine WARP_INVERSE_MAP", lambda: [cv2.warpAffine(f, m, (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP) for f in small], ">= 0.2"))
        peers["pipeline"].append(("opencv", "OpenCV resize + warpAffine, numpy normalize + patchify", lambda: np_patchify(np_normalize(np.stack([
            cv2.warpAffine(cv2.resize(f, (size, size), interpolation=cv2.INTER_LINEAR), m, (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
            for f in frames]))), ">= 0.2"))
    if Image is not None:
        pil_frames = [Image.fromarray(f) for f in frames]
        pil_small = [Image.fromarray(f) for f in small]
        pm = (m[0, 0], m[0, 1], m[0, 2] + 0.5 - 0.5 * (m[0, 0] + m[0, 1]), m[1, 0], m[1, 1], m[1, 2] + 0.5 - 0.5 * (m[1, 0] + m[1, 1]))
        peers["resize_aa"].append(("pil", "PIL Image.resize BILINEAR (antialiased)", lambda: [f.resize((size, size), Image.Resampling.BILINEAR) for f in pil_frames], None))
        peers["affine"].append(("pil", "PIL Image.transform AFFINE BILINEAR", lambda: [f.transform((size, size), Image.Transform.AFFINE, pm, resample=Image.Resampling.BILINEAR) for f in pil_small], None))
    what = describe(batch, size)

    def sync():
        s.synchronize()

    for name, plist in peers.items():
        h_fn = rate(calls[name], batch, 3, sync)
        for tag, pname, pfn, goal in plist:
            p_fn = rate(pfn, batch, 3, lambda: None)
            h_fn(), p_fn()
            h, p = rounds([h_fn, p_fn], reps)
            out.append(entry(f"image.host.{name}.{size}.{tag}", what[name] + ", frames/s", "frames/s", h, peer=pname,
                             peer_value=p, goal=goal, command=CMD + " --engine host"))
    h = statistics.median(host_cost(calls["patchify"], sync, calls=500) for _ in range(reps))
    out.append(entry(f"image.host.patchify.host_us.{size}", f"eager patchify {batch}x3x{size}x{size} float32, p={PATCH}: host CPU time per call",
                     "us", h, command=CMD + " --engine host"))
    g, _outputs = hrx_graph(ops, src, size)  # the outputs hold the slots the graph writes
    g_fn = rate(g.launch, batch, 3, sync)
    g_fn()
    out.append(entry(f"image.host.pipeline_graph.{size}", f"pipeline {batch}x1080p -> {size} as one HRX graph, frames/s",
                     "frames/s", rounds([g_fn], reps)[0], command=CMD + " --engine host"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--engine", choices=["cuda", "host"], default=None)
    p.add_argument("--batch", type=int, default=None, help="frames per batch (default 32 on cuda, 1 on the host)")
    args = p.parse_args()
    engine = args.engine
    if engine is None:
        engine = "cuda" if "cuda" in hrx.engines() and hrx.engine_status()["cuda"].available else "host"
    if engine == "cuda":
        entries = cuda_bench(args.reps, args.batch or 32)
        out = machine_file(hrx.device("cuda"))
        path = write(out, _machine(out, hrx.device("cuda").info.name), entries)
    else:
        entries = host_bench(args.reps, args.batch or 1)
        from results_file import host_file, host_machine

        path = write(host_file(), _machine(host_file(), host_machine()), entries)
    report(entries)
    print(f"wrote {path}")


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/image.py", main))
