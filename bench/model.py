"""GPT-2 greedy decode at batch 1: HRX against its peers, in one process.

    python bench/model.py [--reps 5] [--engine cuda|host] [--shapes gpt2,1b] [--tokens 128]

On cuda (ids model.cuda.*, bench/results/h200.json): decode tokens/s of
``hrx_models.gpt2.Gpt2Decoder`` (one recorded step graph per slot, replayed per
token with position and token on the device) against the same GPT-2 written in
plain PyTorch (``hrx_models.gpt2.torch_reference``: BF16 weights, activations and
static KV cache) run eagerly and replayed as a captured CUDA graph, on the same
BF16 weights (a checkpoint of seeded random weights written by
``write_random_checkpoint``), for the GPT-2-small shape (12 layers, 768 wide) and
a ~1.3B shape (24 layers, 2048 wide); plus time per token against the
weight-bandwidth limit (bytes of weights a token reads / D2D copy bandwidth
measured in the same run), the host cost of one step-graph launch, and the same
decode through the hrx_core.model layer (one runtime submission per token), the
fused decode step (the default) against the step of separate kernels, and
batched prefill: prompt tokens/s and time to first token for 128- and 1024-token
prompts (``--prompts``) against the same model's PyTorch prefill (the prompt as a
matrix, causal ``scaled_dot_product_attention``; ``TorchGpt2.prefill``), timed from
the prompt's upload to the first token on the device (a synchronize). Every
figure alternates HRX and peer rounds; values are medians; each round decodes
``--tokens`` tokens after an 8-token prompt, timed with host clocks from the
first decode launch to the tokens on the host (torch: to a synchronize).

On the host (ids model.host.*, bench/results/host-2core.json): the host engine's
decoder against the numpy reference implementation (float32, KV cache) on the
same weights, at the test shape (2 layers, 128 wide) and the GPT-2-small shape.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hrx_models.gpt2 import SHAPES, Gpt2Config, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2.kernels import ATTENTION_MIN_ROWS
from results_file import d2d_bandwidth, entry, host_file, host_machine, machine_file, report, write
from results_file import rounds
from tensor import _machine

import hrx_core as hrx

CMD = "python bench/model.py"
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]
#: goals: issue 8 (GPT-2 small against PyTorch) and issue 18 (decode time a token at most
#: 2.5x the weight-bandwidth floor for GPT-2 small, 1.3x for the 1.3B shape)
GOALS = {"gpt2": {"graphs": ">= 1.0", "eager": ">= 2.0", "floor": "<= 2.5"}, "1b": {"floor": "<= 1.3"}}
#: prompt lengths of the prefill figures (issue 18: 128 and 1024)
PREFILL_PROMPTS = (128, 1024)
#: decode at long context: this many tokens after a prompt filling the rest of 1024 positions
LONG_TOKENS = 64


def weight_bytes(config: Gpt2Config) -> int:
    """BF16 bytes one decode step reads: every parameter except the unused rows of wpe
    (the embedding gathers one row of wte, which the tied logits read whole anyway)."""
    return 2 * (config.parameters - config.n_positions * config.n_embd + config.n_embd)


def prompt_for(config: Gpt2Config) -> list[int]:
    return [t % config.vocab_size for t in PROMPT]


def model_layer_setup(dev, ckpt: Path, prompt: list[int], context: int):
    """The same checkpoint on the hrx_core.model layer: context, definition, one slot, head input."""
    from hrx_models.gpt2.model_layer import Gpt2Definition

    from hrx_core.execution import RuntimeOptions
    from hrx_core.model import ModelContext

    ctx = ModelContext(dev, RuntimeOptions(max_submissions=4 * context))
    gpt2 = Gpt2Definition.load(ckpt, ctx)
    model = gpt2.prepare(slots=1, context=context)
    return ctx, gpt2, model, gpt2.head(context, np.asarray(prompt, np.int32))


def model_layer_rate(slot, head, prompt: list[int], tokens: int) -> float:
    """Decode tokens/s through ModelSlot.submit (prefill awaited first, untimed)."""
    done = slot.submit({"head": head}, entry="prefill")
    for _ in range(len(prompt) - 2):
        done = slot.submit(None, entry="prefill")
    done.wait()
    t = time.perf_counter()
    for _ in range(tokens - 1):
        slot.submit(None, entry="step")
    slot.run(None, entry="step", read=["seq"])
    return tokens / (time.perf_counter() - t)


# -- cuda ---------------------------------------------------------------------------


def copy_bandwidth(dev, reps) -> float:
    return d2d_bandwidth(dev, reps)


def long_prompt(config: Gpt2Config, n: int) -> list[int]:
    return [(i * 7919 + 13) % config.vocab_size for i in range(n)]


def cuda_prefill(dev, name: str, config: Gpt2Config, ckpt: Path, reps: int, lengths: list[int]) -> list[dict]:
    """Time to first token and prompt tokens/s of batched prefill, HRX vs torch SDPA prefill
    (HRX alone, without a peer, where torch is not installed)."""
    try:
        import torch
    except ImportError:
        torch = None
    lengths = [n for n in lengths if n <= config.n_positions]
    if not lengths:
        return []
    context = max(lengths)
    dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
    peer = None
    if torch is not None:
        from hrx_models.gpt2.torch_reference import TorchGpt2

        peer = TorchGpt2(ckpt, dtype=torch.bfloat16, context=context)
    peer_name = "PyTorch BF16 prefill (the prompt as a matrix, causal SDPA)" if peer is not None else None
    out: list[dict] = []
    shape = f"{config.n_layer}x{config.n_embd}"
    with dec.slot() as slot:
        for n in lengths:
            ids = long_prompt(config, n)

            def hrx_ttft(ids=ids):
                slot.stream.synchronize()
                t = time.perf_counter()
                slot.start(ids)
                slot.prefill()
                slot.step()
                slot.stream.synchronize()
                return time.perf_counter() - t

            def torch_ttft(ids=ids):
                torch.cuda.synchronize()
                t = time.perf_counter()
                peer.prefill(ids)
                torch.cuda.synchronize()
                return time.perf_counter() - t

            fns = [hrx_ttft] if peer is None else [hrx_ttft, torch_ttft]
            for fn in fns:
                fn()  # warm-up: compilation, graph instantiation, first touch
            h, *rest = rounds(fns, reps)
            p = rest[0] if rest else None
            torch_first = "-" if peer is None else int(peer.tok.item())
            print(f"{name} prefill {n}: first token hrx {int(np.argmax(slot.logits()))}, torch BF16 SDPA {torch_first}; "
                  f"{slot.chunk}-row chunks", flush=True)
            what = f"GPT-2 {shape} batched prefill of a {n}-token prompt to the first token, BF16"
            out.append(entry(f"model.cuda.{name}.prefill{n}_vs_torch_sdpa", what + ": prompt tokens/s", "tokens/s",
                             n / h, peer=peer_name, peer_value=None if p is None else n / p,
                             goal=None if p is None else ">= 1.0", command=CMD))
            out.append(entry(f"model.cuda.{name}.ttft{n}_vs_torch_sdpa", what + ": time to first token", "ms",
                             h * 1e3, peer=peer_name, peer_value=None if p is None else p * 1e3, command=CMD))
    dec.close()
    return out


def cuda_shape(dev, name: str, tokens: int, reps: int, copy_bw: float, workdir: Path,
               prompts: list[int]) -> list[dict]:
    import torch
    from hrx_models.gpt2.torch_reference import TorchGpt2

    config = SHAPES[name]
    prompt = prompt_for(config)
    context = len(prompt) + tokens
    t0 = time.perf_counter()
    ckpt = write_random_checkpoint(workdir / name, config, seed=0, dtype="bf16")
    print(f"{name}: wrote {config.parameters / 1e6:.0f} M parameters in {time.perf_counter() - t0:.1f} s", flush=True)
    dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
    separate = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1, fused=False)
    separate_slot = separate.acquire()
    short = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1, short_steps=True)
    short_slot = short.acquire()
    ml_ctx, ml_gpt2, ml_model, ml_head = model_layer_setup(dev, ckpt, prompt, context)
    peer = TorchGpt2(ckpt, dtype=torch.bfloat16, context=context)
    graph = peer.cuda_graph()
    out: list[dict] = []
    with dec.slot() as slot:
        last: dict[str, list[int]] = {}

        def hrx_decode():
            r = slot.generate(prompt, tokens)
            last["hrx"] = list(r.tokens)
            return r.tokens_per_s

        def torch_run(g, key):
            peer.start(prompt)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(tokens):
                if g is None:
                    peer.forward()
                else:
                    g.replay()
            torch.cuda.synchronize()
            rate = tokens / (time.perf_counter() - t)
            last[key] = peer.seq[len(prompt): len(prompt) + tokens].tolist()
            return rate

        def torch_eager():
            return torch_run(None, "eager")

        def torch_graphs():
            return torch_run(graph, "graphs")

        def hrx_launch_us():
            slot.start(prompt)
            slot.prefill()
            slot.stream.synchronize()
            t = time.perf_counter()
            for _ in range(tokens):
                done = slot.step()
            launch = (time.perf_counter() - t) / tokens * 1e6
            done.wait()
            return launch

        def model_layer_decode():
            return model_layer_rate(ml_model.slot(0), ml_head, prompt, tokens)

        def separate_decode():
            r = separate_slot.generate(prompt, tokens)
            last["separate"] = list(r.tokens)
            return r.tokens_per_s

        def short_decode():
            r = short_slot.generate(prompt, tokens)
            last["short"] = list(r.tokens)
            return r.tokens_per_s

        fns = [hrx_decode, torch_eager, torch_graphs, hrx_launch_us, model_layer_decode, separate_decode, short_decode]
        for fn in fns:
            fn()  # warm-up: compilation, graph instantiation, first touch
        h, e, g, launch, ml, sep, sh = rounds(fns, reps)
    agree = sum(a == b for a, b in zip(last["hrx"], last["graphs"]))
    print(f"{name}: fused and separate-kernel steps agree at "
          f"{sum(a == b for a, b in zip(last['hrx'], last['separate']))}/{tokens} steps", flush=True)
    print(f"{name}: short and full steps agree at {sum(a == b for a, b in zip(last['short'], last['hrx']))}/{tokens} "
          f"steps", flush=True)
    print(f"{name}: greedy tokens agree with torch BF16 (graphs) at {agree}/{tokens} steps; "
          f"torch eager vs graphs {sum(a == b for a, b in zip(last['eager'], last['graphs']))}/{tokens}", flush=True)
    shape = f"{config.n_layer}x{config.n_embd}"
    goals = GOALS.get(name, {})
    out.append(entry(f"model.cuda.{name}.decode_vs_torch_graphs",
                     f"GPT-2 {shape} greedy decode at batch 1, {tokens} tokens after {len(prompt)}, BF16", "tokens/s", h,
                     peer="PyTorch BF16 static-cache decode replayed as a CUDA graph", peer_value=g,
                     goal=goals.get("graphs"), command=CMD))
    out.append(entry(f"model.cuda.{name}.decode_vs_torch_eager",
                     f"GPT-2 {shape} greedy decode at batch 1, {tokens} tokens after {len(prompt)}, BF16", "tokens/s", h,
                     peer="PyTorch BF16 static-cache decode, eager", peer_value=e, goal=goals.get("eager"), command=CMD))
    wb = weight_bytes(config)
    bound_us = wb / (copy_bw * 1e12) * 1e6
    out.append(entry(f"model.cuda.{name}.time_per_token",
                     f"GPT-2 {shape} time per decoded token vs the weight-bandwidth limit ({wb / 1e6:.0f} MB of BF16 "
                     f"weights / D2D copy bandwidth of this run)", "us", 1e6 / h,
                     peer="weight bytes / copy bandwidth", peer_value=bound_us, goal=goals.get("floor"), command=CMD))
    out.append(entry(f"model.cuda.{name}.launch", f"GPT-2 {shape} host time to launch one recorded decode step", "us",
                     launch, command=CMD))
    out.append(entry(f"model.cuda.{name}.model_layer", f"GPT-2 {shape} decode through hrx_core.model (one runtime "
                     f"submission per token) vs the DecoderSlot's graph replay", "tokens/s", ml,
                     peer="hrx_models DecoderSlot (stream graph replay)", peer_value=h, command=CMD))
    out.append(entry(f"model.cuda.{name}.fused_vs_separate",
                     f"GPT-2 {shape} decode: the fused step (5 kernels a layer) vs separate kernels (8 a layer)",
                     "tokens/s", h, peer="hrx_models decoder, Gpt2Decoder(fused=False)", peer_value=sep, command=CMD))
    out.append(entry(f"model.cuda.{name}.short_vs_full",
                     f"GPT-2 {shape} decode: Gpt2Decoder(short_steps=True), the attention in the QKV kernel below "
                     f"{ATTENTION_MIN_ROWS} positions (4 kernels a layer there), vs the default 5-kernel step",
                     "tokens/s", sh, peer="hrx_models decoder (default: the full fused step)", peer_value=h,
                     command=CMD))
    ml_model.close(), ml_gpt2.close(), ml_ctx.close()
    short.release(short_slot)
    short.close()
    separate.release(separate_slot)
    separate.close()
    dec.close()
    return out + cuda_long_decode(dev, name, config, ckpt, reps) + cuda_prefill(dev, name, config, ckpt, reps, prompts)


def cuda_long_decode(dev, name: str, config: Gpt2Config, ckpt: Path, reps: int) -> list[dict]:
    """Decode tokens/s at long context: LONG_TOKENS tokens after a prompt that fills the
    rest of 1024 positions (batched prefill, untimed), HRX against the PyTorch peer's
    static-cache decode replayed as a CUDA graph (its attention covers the whole cache,
    masked, at every position)."""
    import torch
    from hrx_models.gpt2.torch_reference import TorchGpt2

    context = min(1024, config.n_positions)
    n = context - LONG_TOKENS
    ids = long_prompt(config, n)
    dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
    peer = TorchGpt2(ckpt, dtype=torch.bfloat16, context=context)
    graph = peer.cuda_graph()
    last: dict[str, list[int]] = {}
    with dec.slot() as slot:
        def hrx_decode():
            r = slot.generate(ids, LONG_TOKENS - 1)
            last["hrx"] = list(r.tokens)
            return r.tokens_per_s

        def torch_graphs():
            peer.prefill(ids)  # the first token too, as HRX's generate counts it untimed
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(LONG_TOKENS - 2):
                graph.replay()
            torch.cuda.synchronize()
            rate = (LONG_TOKENS - 2) / (time.perf_counter() - t)
            last["graphs"] = peer.seq[n: n + LONG_TOKENS - 1].tolist()
            return rate

        fns = [hrx_decode, torch_graphs]
        for fn in fns:
            fn()
        h, g = rounds(fns, reps)
    agree = sum(a == b for a, b in zip(last["hrx"], last["graphs"]))
    print(f"{name}: decode after {n} positions: greedy tokens agree with torch BF16 (graphs) at {agree}/"
          f"{LONG_TOKENS - 1} steps", flush=True)
    dec.close()
    shape = f"{config.n_layer}x{config.n_embd}"
    return [entry(f"model.cuda.{name}.decode_long_vs_torch_graphs",
                  f"GPT-2 {shape} greedy decode at batch 1, {LONG_TOKENS - 1} tokens after a {n}-token prompt "
                  f"(context {context}), BF16", "tokens/s", h,
                  peer="PyTorch BF16 static-cache decode replayed as a CUDA graph", peer_value=g, command=CMD)]


def cuda_bench(reps: int, shapes: list[str], tokens: int, prompts: list[int]) -> list[dict]:
    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: the decode comparisons are skipped, prefill is measured without its peer",
              flush=True)
    dev = hrx.device("cuda")
    bw = copy_bandwidth(dev, reps)
    out = [entry("model.cuda.d2d_copy", "D2D copy of 1 GiB in this run (read+write bytes)", "TB/s", bw, command=CMD)]
    with tempfile.TemporaryDirectory(prefix="hrx-bench-model-") as tmp:
        for name in shapes:
            if torch is None:
                ckpt = write_random_checkpoint(Path(tmp) / name, SHAPES[name], seed=0, dtype="bf16")
                out += cuda_prefill(dev, name, SHAPES[name], ckpt, reps, prompts)
                continue
            out += cuda_shape(dev, name, tokens, reps, bw, Path(tmp), prompts)
            torch.cuda.empty_cache()  # the previous shape's peer is gone
    return out


# -- host ---------------------------------------------------------------------------


def host_shape(dev, name: str, tokens: int, reps: int, workdir: Path) -> list[dict]:
    from hrx_models.gpt2.reference import NumpyGpt2

    config = SHAPES[name]
    prompt = prompt_for(config)
    n = tokens if name == "tiny" else max(4, tokens // 8)
    n = min(n, config.n_positions - len(prompt))  # the context must fit the positions
    ckpt = write_random_checkpoint(workdir / name, config, seed=0, dtype="bf16")
    dec = Gpt2Decoder.load(ckpt, dev, context=len(prompt) + n, max_slots=1)
    ref = NumpyGpt2(ckpt, dtype=np.float32, mirror=False)
    ml_ctx, ml_gpt2, ml_model, ml_head = model_layer_setup(dev, ckpt, prompt, len(prompt) + n)
    with dec.slot() as slot:

        def hrx_decode():
            return slot.generate(prompt, n).tokens_per_s

        def model_layer_decode():
            return model_layer_rate(ml_model.slot(0), ml_head, prompt, n)

        def numpy_decode():
            ref.reset()
            for t in prompt[:-1]:
                ref.step(t)
            t0 = time.perf_counter()
            tok = prompt[-1]
            for _ in range(n):
                tok = int(np.argmax(ref.step(tok)))
            return n / (time.perf_counter() - t0)

        fns = [hrx_decode, numpy_decode, model_layer_decode]
        for fn in fns:
            fn()
        h, p, ml = rounds(fns, reps)
    ml_model.close(), ml_gpt2.close(), ml_ctx.close()
    dec.close()
    shape = f"{config.n_layer}x{config.n_embd}"
    return [entry(f"model.host.{name}.decode", f"host GPT-2 {shape} greedy decode, {n} tokens after {len(prompt)}",
                  "tokens/s", h, peer="numpy float32 implementation with KV cache", peer_value=p, command=CMD),
            entry(f"model.host.{name}.model_layer", f"host GPT-2 {shape} decode through hrx_core.model (one runtime "
                  f"submission per token) vs the DecoderSlot's graph replay", "tokens/s", ml,
                  peer="hrx_models DecoderSlot (stream graph replay)", peer_value=h, command=CMD)]


def host_bench(reps: int, shapes: list[str], tokens: int, prompts: list[int]) -> list[dict]:
    dev = hrx.device("host")
    with tempfile.TemporaryDirectory(prefix="hrx-bench-model-") as tmp:
        return [e for name in shapes for e in host_shape(dev, name, tokens, reps, Path(tmp))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--engine", choices=["cuda", "host"], default=None)
    p.add_argument("--shapes", default=None, help="comma-separated (cuda default: gpt2,1b; host: tiny,gpt2)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--prompts", default=",".join(map(str, PREFILL_PROMPTS)),
                   help="comma-separated prompt lengths of the cuda prefill figures ('' for none)")
    args = p.parse_args()
    prompts = [int(n) for n in args.prompts.split(",") if n]
    cuda = args.engine == "cuda" or (args.engine is None and "cuda" in hrx.engines() and hrx.engine_status()["cuda"].available)
    run, file, default_shapes = (cuda_bench, machine_file(hrx.device("cuda")), "gpt2,1b") if cuda else (host_bench, host_file(), "tiny,gpt2")
    entries = run(args.reps, (args.shapes or default_shapes).split(","), args.tokens, prompts)
    machine = hrx.device("cuda").info.name if cuda else host_machine()
    path = write(file, _machine(file, machine), entries)
    report(entries)
    print(f"wrote {path}")


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/model.py", main))
