"""Artifacts: opening a mapped safetensors file costs O(header), not O(file).

    python bench/artifacts.py [--reps 21] [--tmp DIR]

Writes ids artifacts.* into bench/results/host-2core.json: the median time of
FileView.open(mode="mapped") + close on a 64 MiB and a 2 GiB file with the same
header size (the files are written once, sparse-free, into --tmp), and their ratio
against the 64 MiB figure (goal: within 2x, i.e. independent of file size). The
GPU figure of the issue (file-backed loading vs safetensors + torch) needs the cuda
engine and runs in bench/gpu-side scripts on a GPU machine.
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
from results_file import entry, host_machine, report, write  # noqa: E402

CMD = "python bench/artifacts.py"


def write_file(path: Path, total: int, tensors: int = 64) -> None:
    """A valid safetensors file of ``total`` data bytes in ``tensors`` U8 tensors."""
    each = total // tensors
    header, offset = {}, 0
    for i in range(tensors):
        header[f"t{i:03d}"] = {"dtype": "U8", "shape": [each], "data_offsets": [offset, offset + each]}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default="host-2core.json")
    args = ap.parse_args()
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
    print(f"wrote {write(args.out, host_machine(), results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
