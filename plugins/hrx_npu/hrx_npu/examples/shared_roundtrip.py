"""GPU/NPU exchange through shared memory, checked on every round.

    python examples/shared_roundtrip.py [--bytes 1048576] [--rounds 3]

Asks the fabric which backing both devices reach (``allocation_profiles``), allocates
two buffers with the first coherent profile, and per round: the GPU's DMA engine
writes new bytes into ``ping``; the NPU reads ``ping`` through its alias and writes
``ping ^ 0x5A`` into ``pong``; the GPU reads ``pong`` back -- ordered by the
runtime's hazards, since an alias and its original are one allocation. The host
also reads ``pong`` directly (coherent). Where the GPU side has ordinary
host-mappable memory (the host engine), a second exchange goes through it with the
explicit cache operations of ``prepare_release_host``/``prepare_acquire_host``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from hrx_core.errors import Unsupported
from hrx_core.execution import Runtime
from hrx_core.placement import Fabric, prepare_acquire_host, prepare_release_host

from ..programs import XOR_KEY, load_xor_copy
from .common import engine_arguments, engines


def run(nbytes: int = 1 << 20, rounds: int = 3, *, gpu_engine: str | None = None, npu_engine: str | None = None,
        log: Any = None) -> dict[str, Any]:
    gpu, npu = engines(gpu_engine, npu_engine)
    say = log or (lambda *_: None)
    fabric = Fabric()
    profiles = fabric.allocation_profiles([gpu, npu], coherent=True)
    if not profiles:
        raise Unsupported(f"no coherent memory reaches both {gpu.name} and {npu.name}")
    profile = profiles[0]
    say(f"coherent profile: {dict(profile.access)}, host access {profile.host}")
    rng = np.random.default_rng(1)
    prog = load_xor_copy(npu, nbytes)
    ok = 0
    with Runtime(gpu, npu=npu) as rt, profile.allocate(nbytes, fabric=fabric) as ping, profile.allocate(nbytes, fabric=fabric) as pong:
        vis = ping.buffer.visibility(gpu, npu)
        say(f"gpu -> npu visibility: release {vis.release}, acquire {vis.acquire}, atomics {dict(vis.atomic_scopes)}")
        vis = pong.buffer.visibility(npu, "host")
        say(f"npu -> host visibility: release {vis.release}, acquire {vis.acquire}, atomics {dict(vis.atomic_scopes)}")
        g = rt.graph("shared roundtrip")
        up = g.upload(ping.on(gpu), np.zeros(nbytes, np.uint8), name="gpu writes ping")
        g.compute("npu xor ping -> pong", lambda r: prog.record(r, [ping.on(npu), pong.on(npu)]), lane="npu")
        down = g.download(pong.on(gpu), name="gpu reads pong")
        for _ in range(rounds):
            data = rng.integers(0, 256, nbytes, dtype=np.uint8)
            up.write(data)
            rt.submit(g).wait()
            want = data ^ np.uint8(XOR_KEY)
            with pong.buffer.map("read") as host:
                direct = np.array_equal(host, want)
            ok += int(direct and np.array_equal(down.read(), want))
        g.close()

        cached = 0
        if gpu.info.host_mappable:
            plain = fabric.allocation_profiles([gpu, npu], coherent=False)[-1]
            with plain.allocate(nbytes, fabric=fabric) as src, plain.allocate(nbytes, fabric=fabric) as dst:
                for _ in range(rounds):
                    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
                    with src.buffer.map("write") as host:
                        host[:] = data
                    with prepare_release_host([src.buffer]) as release:   # host writes -> device
                        release.apply()
                    prog.invoke([src.on(npu), dst.on(npu)]).wait()
                    with prepare_acquire_host([dst.buffer]) as acquire:   # device writes -> host
                        acquire.apply()
                    with dst.buffer.map("read") as host:
                        cached += int(np.array_equal(host, data ^ np.uint8(XOR_KEY)))
            say(f"non-coherent profile {dict(plain.access)}: {cached}/{rounds} rounds exact with explicit cache operations")
    prog.close()
    result = {"example": "shared_roundtrip", "bytes": nbytes, "rounds": rounds, "coherent_ok": ok,
              "cache_maintained_ok": cached, "imports": fabric.imports,
              "ok": ok == rounds and (cached == rounds or not gpu.info.host_mappable)}
    say(f"shared_roundtrip {gpu.name} <-> {npu.name}: {ok}/{rounds} coherent rounds exact, {fabric.imports} imports")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    engine_arguments(ap, columns=False)
    args = ap.parse_args(argv)
    return 0 if run(args.bytes, args.rounds, gpu_engine=args.gpu_engine, npu_engine=args.npu_engine, log=print)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
