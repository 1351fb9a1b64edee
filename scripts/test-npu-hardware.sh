#!/usr/bin/env bash
# Run the xdna engine on a real Strix Halo NPU5 (PCI 17f0 rev 11) through libamdf, serially.
#
# Nothing in HRX for Python has run on an NPU yet: CI proves the xdna engine on the
# simulated Strix Halo only. A Strix Halo owner runs this script and reports its log.
#
#   HRX_AMDF_LIBRARY=/path/to/libamdf.so HRX_XDNA_IMAGES=/path/to/images bash scripts/test-npu-hardware.sh
#
# Needs: libamdf built with its XDNA provider (docs/amd.md), the amdxdna driver and
# firmware loaded, /dev/accel/accel0 readable and writable by this user, and this
# repository installed as the README's test command installs it. HRX_XDNA_IMAGES is a
# folder of .xdna images HRX's compiler wrote: copy_i32.xdna (ROCm/hrx driver smoke),
# hrx_matmul8x8_bf16.xdna and hrx_xor_copy.xdna (the examples' programs, compiled for
# the contracts in hrx_npu/programs.py); tests and examples whose image is missing are
# skipped and say so.
#
# Everything runs one process and one test at a time (no xdist): two processes must
# not share the NPU's contexts while the checks and timings run.
set -uo pipefail
cd "$(dirname "$0")/.."
export HRX_AMDF_PROVIDER=libamdf
log=${HRX_HARDWARE_LOG:-npu-hardware-$(date +%Y%m%d-%H%M%S).log}
{
  echo "== hrx doctor"
  hrx doctor || exit 1
  python3 - <<'PY' || exit 1
import sys
import hrx_core as hrx
status = hrx.engine_status().get("xdna")
if status is None or not status.available:
    sys.exit(f"xdna is unavailable on libamdf: {status.reason if status else 'hrx-npu is not installed'}")
print("xdna:", status.reason)
PY
  echo "== xdna on the NPU (device facts, contexts, cache protocol, compiled images, GPU<->NPU imports)"
  python3 -m pytest -p no:cacheprovider -q -s plugins/hrx_npu/tests/test_xdna_hardware.py
  rc=$?
  gpu=host
  python3 -c 'import hrx_core as h, sys; s = h.engine_status().get("amdgpu"); sys.exit(0 if s is not None and s.available else 1)' && gpu=amdgpu
  rc2=0
  if [ -n "${HRX_XDNA_IMAGES:-}" ] && [ -f "$HRX_XDNA_IMAGES/hrx_matmul8x8_bf16.xdna" ]; then
    echo "== gpu_npu_parallel on $gpu + xdna (the seed measured 0.754 ms sequential, 0.610 ms parallel, 1.24x on gfx1151/NPU5)"
    python3 examples/gpu_npu_parallel.py 16777216 1024 21 /tmp/hrx-npu-trace.json --gpu-engine "$gpu" --npu-engine xdna
    rc2=$?
    echo "== gemm_pipeline and shared memory on $gpu + xdna"
    python3 examples/gemm_pipeline.py --gpu-engine "$gpu" --npu-engine xdna || rc2=1
    if [ -f "$HRX_XDNA_IMAGES/hrx_xor_copy.xdna" ]; then
      python3 examples/shared_roundtrip.py --gpu-engine "$gpu" --npu-engine xdna || rc2=1
      python3 examples/shared_bench.py --gpu-engine "$gpu" --npu-engine xdna || rc2=1
    fi
  else
    echo "== examples skipped: put HRX's compiled hrx_matmul8x8_bf16.xdna (and hrx_xor_copy.xdna) in \$HRX_XDNA_IMAGES"
  fi
  echo "exit codes: xdna tests $rc, examples $rc2"
  [ "$rc" -eq 0 ] && [ "$rc2" -eq 0 ]
} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "log: $log"
exit "$status"
