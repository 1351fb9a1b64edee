"""Where the GPU time of GPT-2 prefill and decode goes, HRX against PyTorch, on cuda.

    python bench/tools/profile_model.py [--shape gpt2|1b] [--prompt 1024] [--steps 32] [--attention streamed] [--logits]

Records CUDA kernel activity with torch.profiler (CUPTI sees every kernel of the
process, HRX's graph nodes included) over three prefills of a ``--prompt``-token
prompt to the first token and ``--steps`` decode steps (without the logits and the
greedy choice unless ``--logits``), by HRX and by the PyTorch
reference (the prompt as a matrix, causal SDPA), and prints the GPU time per kernel
name per run. A diagnostic, not a benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint

import hrx_core as hrx


def table(prof, runs: int, title: str) -> None:
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        t = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time  # (torch renamed it)
        if ev.device_type.name == "CUDA" and t:
            total[ev.name[:70]] += t
            count[ev.name[:70]] += 1
    whole = sum(total.values())
    print(f"\n== {title}: {whole / runs / 1e3:.3f} ms of kernels per run")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {t / runs / 1e3:8.3f} ms {100 * t / whole:5.1f}%  x{count[name] / runs:6.0f}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="gpt2", choices=sorted(SHAPES))
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--logits", action="store_true",
                    help="profile the decode step with its logits and greedy choice (the step generate() runs); "
                         "default: the step without them (as prefill runs it one token at a time)")
    ap.add_argument("--attention", choices=["streamed", "earlier"], default="streamed",
                    help="the decode attention kernel (streamed: the decoder's, hrx_models.gpt2.attention_streamed; "
                         "earlier: kernels.ATTENTION)")
    args = ap.parse_args()
    import torch
    from hrx_models.gpt2.torch_reference import TorchGpt2
    from torch.profiler import ProfilerActivity, profile

    config = SHAPES[args.shape]
    n = min(args.prompt, config.n_positions - args.steps - 1)
    ids = [(i * 7919 + 13) % config.vocab_size for i in range(n)]
    dev = hrx.device("cuda")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_random_checkpoint(Path(tmp) / args.shape, config, seed=0, dtype="bf16")
        dec = Gpt2Decoder.load(ckpt, dev, context=n + args.steps + 1, max_slots=1)
        if args.attention == "earlier":
            import attrs
            from hrx_models.gpt2 import kernels as K

            dec.kernels = attrs.evolve(dec.kernels, attention=K.ATTENTION)
        peer = TorchGpt2(ckpt, dtype=torch.bfloat16, context=n + args.steps + 1)
    with dec.slot() as slot:
        def hrx_prefill():
            slot.start(ids)
            slot.prefill()
            slot.step()
            slot.stream.synchronize()

        def hrx_decode():
            for _ in range(args.steps):
                slot.step(logits=args.logits)
            slot.stream.synchronize()

        def torch_prefill():
            peer.prefill(ids)
            torch.cuda.synchronize()

        for fn in (hrx_prefill, torch_prefill, hrx_prefill, torch_prefill):
            fn()
        for label, fn in (("HRX prefill", hrx_prefill), ("torch SDPA prefill", torch_prefill)):
            t = time.perf_counter()
            for _ in range(3):
                fn()
            print(f"{label} {n} tokens: {(time.perf_counter() - t) / 3 * 1e3:.2f} ms wall per prompt")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    fn()
            table(prof, 3, f"{label} of {n} tokens ({args.shape})")
        hrx_prefill()
        hrx_decode()
        hrx_prefill()
        t = time.perf_counter()
        hrx_decode()
        print(f"HRX decode: {(time.perf_counter() - t) / args.steps * 1e6:.1f} us wall per step")
        hrx_prefill()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            hrx_decode()
        table(prof, args.steps, f"HRX decode step {'with' if args.logits else 'without'} logits after {n} positions, "
                                f"{args.steps} steps ({args.shape})")
    dec.close()


if __name__ == "__main__":
    main()
