"""Artifacts: opening a mapped safetensors file costs O(header), not O(file).

    python bench/artifacts.py [--reps 21] [--tmp DIR]

Writes ids artifacts.* into bench/results/host-2core.json: the median time of
FileView.open(mode="mapped") + close on a 64 MiB and a 2 GiB file with the same
header size (the files are written once, sparse-free, into --tmp), and their ratio
against the 64 MiB figure (goal: within 2x, i.e. independent of file size).

    python bench/artifacts.py --gpu [--reps 5] [--tmp DIR]

On a machine with the cuda engine and torch (ids artifacts.cuda.*, written into
bench/results/h200.json): a 2 GiB BF16 checkpoint of 32 tensors, read once so it is
in the page cache, loaded to the GPU by ``FileView.open(mapped).load(stream)`` +
synchronize, against ``safetensors.safe_open(framework="pt")`` + ``.cuda()`` of every
tensor + synchronize, and against the pinned host-to-device copy bandwidth of the
same byte count (raw ``cuMemcpyHtoDAsync`` out of a pinned buffer), alternating
rounds, medians. Allocation of the device buffers is inside every timing (HRX
allocates per tensor, as torch does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hrx_core.artifacts.safetensors import FileView  # noqa: E402
from results_file import RESULTS, entry, host_file, host_machine, machine_file, report, write  # noqa: E402

CMD = "python bench/artifacts.py"


def write_file(path: Path, total: int, tensors: int = 64, dtype: str = "U8", row: int = 0) -> None:
    """A valid safetensors file of about ``total`` data bytes in ``tensors`` tensors of
    ``dtype`` (U8 vectors, or BF16 matrices of ``row`` columns), random bytes."""
    itemsize = {"U8": 1, "BF16": 2}[dtype]
    header, offset = {}, 0
    if row:
        rows = total // tensors // (row * itemsize)
        shape, each = [rows, row], rows * row * itemsize
    else:
        each = total // tensors
        shape = [each]
    for i in range(tensors):
        name = f"layers.{i}.weight" if row else f"t{i:03d}"
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + each]}
        offset += each
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        left = offset
        while left:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n


def time_open(path: Path, reps: int) -> float:
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        view = FileView.open(path, mode="mapped")
        view.close()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def gpu_bench(reps: int, tmp: str | None) -> list[dict]:
    import numpy as np
    import torch
    from safetensors import safe_open

    import hrx_core as hrx

    dev = hrx.device("cuda")
    s = dev.stream()
    total = 2 << 30
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        path = Path(d) / "ckpt.safetensors"
        write_file(path, total, tensors=32, dtype="BF16", row=4096)
        nbytes = path.stat().st_size
        with open(path, "rb") as f:  # into the page cache
            while f.read(64 << 20):
                pass
        with FileView.open(path, mode="mapped") as v:
            data_bytes = sum(v.info(n).nbytes for n in v.names())

        def hrx_load() -> float:
            t = time.perf_counter()
            with FileView.open(path, mode="mapped") as view:
                bufs = view.load(s)
                s.synchronize()
            dt = time.perf_counter() - t
            for b in bufs.values():
                b.close()
            return data_bytes / dt / 1e9

        def torch_load() -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = []
            with safe_open(str(path), framework="pt") as f:
                for k in f.keys():
                    out.append(f.get_tensor(k).cuda())
            torch.cuda.synchronize()
            dt = time.perf_counter() - t
            del out
            return data_bytes / dt / 1e9

        pinned = dev.allocate_shared(data_bytes)
        target = dev.allocate(data_bytes)

        def pinned_h2d() -> float:
            t = time.perf_counter()
            s.copyto(target, pinned)
            s.synchronize()
            return data_bytes / (time.perf_counter() - t) / 1e9

        hrx_load(), torch_load(), pinned_h2d()
        samples: list[list[float]] = [[], [], []]
        for _ in range(reps):
            for i, fn in enumerate((hrx_load, torch_load, pinned_h2d)):
                samples[i].append(fn())
                torch.cuda.empty_cache()
        h, t_, p = (statistics.median(x) for x in samples)
        pinned.close(), target.close()
        # the loaded bytes are the file's bytes (checked once, outside the timings)
        with FileView.open(path, mode="mapped") as view:
            name = view.names()[7]
            buf = view.load(s, [name])[name]
            assert np.array_equal(s.download(buf), view.numpy(name).view(np.uint8).reshape(-1)), "loaded bytes differ"
            buf.close()
    cmd = CMD + " --gpu"
    what = f"file-backed load of a {nbytes / 2**30:.2f} GiB safetensors checkpoint (32 BF16 tensors, page cache) to the GPU, incl. allocation"
    return [
        entry("artifacts.cuda.load_2gib_vs_torch", what, "GB/s", h, peer="safetensors.safe_open(pt) + .cuda() per tensor",
              peer_value=t_, goal=">= 1.0", command=cmd),
        entry("artifacts.cuda.load_2gib_vs_pinned", what + ", against pinned H2D", "GB/s", h,
              peer="pinned host-to-device copy of the same bytes (stream.copy from allocate_shared)", peer_value=p,
              goal=">= 0.6", command=cmd),
    ]


def gpu_machine() -> str:
    import hrx_core as hrx

    info = hrx.device("cuda").info
    return f"{info.name}, {os.cpu_count()} cores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default=None, help="results file (default: named for this machine: host-<cores>core.json, or the GPU's with --gpu)")
    ap.add_argument("--gpu", action="store_true", help="the cuda figures (file-backed loading) into the GPU's file (h200.json)")
    args = ap.parse_args()
    if args.gpu:
        results = gpu_bench(min(args.reps, 7), args.tmp)
        report(results)
        import hrx_core as hrx

        out = args.out or machine_file(hrx.device("cuda"))
        path = RESULTS / out
        machine = json.loads(path.read_text())["machine"] if path.exists() else gpu_machine()
        print(f"wrote {write(out, machine, results)}")
        return 0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        small, large = Path(tmp) / "64m.safetensors", Path(tmp) / "2g.safetensors"
        write_file(small, 64 << 20)
        write_file(large, 2 << 30)
        time_open(small, 3), time_open(large, 3)
        a, b = [], []
        for _ in range(5):  # alternate the two sizes
            a.append(time_open(small, args.reps))
            b.append(time_open(large, args.reps))
        t_small, t_large = statistics.median(a), statistics.median(b)
    print(f"mapped open+close: 64 MiB {t_small:.1f} us, 2 GiB {t_large:.1f} us")
    results = [
        entry("artifacts.open.mapped_64mib", "FileView.open(mapped) + close of a 64 MiB safetensors file (64 tensors)", "us", t_small, command=CMD),
        entry("artifacts.open.mapped_2gib", "FileView.open(mapped) + close of a 2 GiB safetensors file (64 tensors), against the 64 MiB file",
              "us", t_large, peer="the same open of the 64 MiB file", peer_value=t_small, goal="<= 2.0", command=CMD),
    ]
    report(results)
    print(f"wrote {write(args.out or host_file(), host_machine(), results)}")
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/artifacts.py", main))
