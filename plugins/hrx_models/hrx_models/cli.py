"""``hrx model init`` and ``hrx generate`` (added through the hrx_cli_commands hook)."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Any

from hrx_core import progress
from hrx_core.cli import CliCommand
from hrx_core.cli.args import check_host_memory, count, number, output_dir, output_file
from hrx_core.errors import InvalidArgument, Unsupported


def _configure_model(parser: argparse.ArgumentParser) -> None:
    from .gpt2.config import SHAPES

    sub = parser.add_subparsers(dest="model_command", metavar="{init}", required=True)
    init = sub.add_parser("init", help="write a GPT-2 checkpoint (HF layout) with seeded random weights")
    init.add_argument("directory", type=output_dir("directory"), help="output directory (config.json + model.safetensors)")
    init.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                      help="named shape (tiny: 2x128, gpt2: 12x768, gpt2-medium: 24x1024, 1b: 24x2048); "
                           "the options below override its fields")
    for name in ("n-embd", "n-layer", "n-head", "n-positions", "vocab-size"):
        init.add_argument(f"--{name}", type=count(f"--{name}", limit=1 << 31), default=None,
                          help=f"override the shape's {name.replace('-', '_')} (default: the --shape's value)")
    init.add_argument("--seed", type=count("--seed", minimum=0, limit=2**63 - 1), default=0,
                      help="seed of the random weights")
    init.add_argument("--std", type=number("--std", maximum=10.0), default=0.02,
                      help="standard deviation of the weight matrices (default 0.02)")
    init.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                      help="stored dtype (released GPT-2 checkpoints are f32; the device holds bf16 either way)")
    init.add_argument("--prefix", action="store_true", help="name tensors 'transformer.*'")
    init.add_argument("--attn-bias", action="store_true", help="add the h.{i}.attn.bias mask buffers of old checkpoints")


def _run_model(args: argparse.Namespace) -> int:
    import attrs

    from .gpt2.checkpoint import write_random_checkpoint
    from .gpt2.config import SHAPES

    config = SHAPES[args.shape]
    overrides = {f: getattr(args, f) for f in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size")
                 if getattr(args, f) is not None}
    config = attrs.evolve(config, **overrides).validate("hrx model init")
    # the weights are built in host memory (f32, plus one tensor's conversion) before writing
    check_host_memory("hrx model init", 8 * config.parameters)
    t0 = time.perf_counter()
    out = write_random_checkpoint(args.directory, config, seed=args.seed, std=args.std, dtype=args.dtype,
                                  prefix="transformer." if args.prefix else "", attn_bias=args.attn_bias)
    size = (out / "model.safetensors").stat().st_size
    print(f"wrote {out}: GPT-2 {config.n_layer} layers x {config.n_embd}, {config.n_head} heads, "
          f"{config.n_positions} positions, vocab {config.vocab_size}; {config.parameters / 1e6:.1f} M parameters, "
          f"{size / 1e6:.1f} MB {args.dtype} in {time.perf_counter() - t0:.1f} s (seed {args.seed})")
    return 0


def _prompt_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise InvalidArgument(f"--prompt-ids: {text!r} is not a list of integers (e.g. '464,2068,7586')") from None
    if not ids:
        raise InvalidArgument("--prompt-ids: empty")
    return ids


def _configure_generate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="GPT-2 checkpoint directory (config.json + model.safetensors) or a Hugging Face repo id "
                             "such as 'gpt2' (from the hub cache; downloaded unless HF_HUB_OFFLINE is set)")
    parser.add_argument("--revision", default=None, help="branch, tag or commit of a repo id (default: main)")
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append",
                         help="prompt text, encoded with the checkpoint's tokenizer (tokenizer.json, or vocab.json + "
                              "merges.txt); the output is decoded text; repeat for several concurrent requests")
    prompts.add_argument("--prompt-ids", action="append",
                         help="prompt token ids, comma or space separated; repeat for several concurrent requests")
    parser.add_argument("--max-new-tokens", type=count("--max-new-tokens", limit=1 << 20), default=32,
                        help="tokens to generate per request")
    parser.add_argument("--engine", default=None, help="engine (default: the best available; HRX_ENGINE also works)")
    parser.add_argument("--concurrency", choices=["threads", "asyncio"], default="threads",
                        help="how several requests run at once (each on its own slot)")
    parser.add_argument("--budget-mb", type=number("--budget-mb", maximum=2.0**40), default=None,
                        help="memory budget for weights and slots")
    parser.add_argument("--context", type=count("--context", limit=1 << 20), default=None,
                        help="positions per slot (default n_positions)")
    parser.add_argument("--trace", type=output_file("--trace"), default=None,
                        help="write a Perfetto trace (one slice per step; steps are waited one by one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _run_generate(args: argparse.Namespace) -> int:
    import hrx_core as hrx
    from hrx_core.budget import MemoryBudget

    from .gpt2.config import Gpt2Config
    from .gpt2.decoder import Generation, Gpt2Decoder, check_request, encode_prompt

    from .resolve import resolve_checkpoint
    from .tokenizer import MissingTokenizer, Tokenizer

    text = args.prompt is not None
    directory = resolve_checkpoint(args.model, tokenizer=True if text else None, revision=args.revision,
                                   progress=progress.enabled())
    tokenizer: Tokenizer | None = None
    if text:
        tokenizer = Tokenizer.load(directory)
        prompts = [encode_prompt(tokenizer, p) for p in args.prompt]
    else:
        prompts = [_prompt_ids(p) for p in args.prompt_ids]
        try:  # decoded text beside the ids where the checkpoint has a tokenizer
            tokenizer = Tokenizer.load(directory)
        except (MissingTokenizer, Unsupported):
            tokenizer = None
    config = Gpt2Config.load(directory)
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise InvalidArgument(f"--model: the tokenizer ({tokenizer.source}) has {tokenizer.vocab_size} tokens, "
                              f"more than the model's vocab_size {config.vocab_size}")
    for p in prompts:  # before anything is loaded
        check_request(config, args.context or config.n_positions, p, args.max_new_tokens)
    budget = None if args.budget_mb is None else MemoryBudget(int(args.budget_mb * (1 << 20)), name="generate")
    dev = hrx.device(args.engine)
    t0 = time.perf_counter()
    dec = Gpt2Decoder.load(directory, dev, budget=budget, context=args.context, max_slots=len(prompts))
    load_s = time.perf_counter() - t0
    trace = None
    if args.trace:
        from hrx_core.execution.trace import TraceRecorder

        trace = TraceRecorder()
    try:
        slots = [dec.acquire() for _ in prompts]  # one slot per request, recorded before timing
        results: list[Generation | None] = [None] * len(prompts)
        t1 = time.perf_counter()
        if len(prompts) == 1:
            results[0] = slots[0].generate(prompts[0], args.max_new_tokens, trace=trace)
        elif args.concurrency == "threads":
            errors: list[BaseException] = []

            def run(i: int) -> None:
                try:
                    results[i] = slots[i].generate(prompts[i], args.max_new_tokens, trace=trace)
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        else:
            async def main() -> list[Generation]:
                return await asyncio.gather(*(s.generate_async(p, args.max_new_tokens) for s, p in zip(slots, prompts)))

            results = list(asyncio.run(main()))
        wall = time.perf_counter() - t1
        for s in slots:
            dec.release(s)
    finally:
        dec.close()
    if trace is not None:
        trace.write(args.trace)
    done = [r for r in results if r is not None]
    total = sum(len(r.tokens) for r in done)
    if args.json:
        print(json.dumps({
            "model": args.model, "device": dev.name, "load_s": load_s, "wall_s": wall,
            "tokens_per_s": total / wall if wall > 0 else None,
            "requests": [{"prompt": list(r.prompt), "tokens": list(r.tokens), "prefill_s": r.prefill_s,
                          "decode_s": r.decode_s, "tokens_per_s": r.tokens_per_s,
                          **({} if tokenizer is None else {"prompt_text": tokenizer.decode(r.prompt),
                                                           "text": tokenizer.decode(r.tokens)})} for r in done],
        }))
        return 0
    c = dec.config
    print(f"model {args.model}: GPT-2 {c.n_layer} layers x {c.n_embd}, vocab {c.vocab_size}, on {dev.name}; "
          f"loaded {dec.weights.nbytes / 1e6:.1f} MB in {load_s:.2f} s")
    for i, r in enumerate(done):
        if tokenizer is not None:
            print(f"request {i}: text: {json.dumps(tokenizer.decode(r.prompt), ensure_ascii=False)} -> "
                  f"{json.dumps(tokenizer.decode(r.tokens), ensure_ascii=False)}")
        print(f"request {i}: tokens: {' '.join(str(t) for t in r.tokens)}")
        print(f"request {i}: {len(r.tokens)} tokens in {r.decode_s:.4f} s, {r.tokens_per_s:.1f} tokens/s "
              f"(prefill of {len(r.prompt)} tokens {r.prefill_s:.4f} s)")
    if len(done) > 1:
        print(f"all {len(done)} requests ({args.concurrency}): {total} tokens in {wall:.4f} s, {total / wall:.1f} tokens/s")
    if args.trace:
        print(f"trace: {args.trace}")
    return 0


def commands() -> list[Any]:
    return [
        CliCommand("model", "model checkpoints: 'hrx model init DIR' writes a GPT-2 with seeded random weights",
                   _configure_model, _run_model),
        CliCommand("generate", "greedy decoding with a GPT-2 checkpoint (prints tokens and tokens/s)",
                   _configure_generate, _run_generate),
    ]
