#!/usr/bin/env bash
# Run HRX's suites on a real AMD Strix Halo through libamdf, serially.
#
# Nothing in HRX for Python has run on AMD hardware yet: CI proves the amdgpu and xdna
# engines on the simulated Strix Halo only. A Strix Halo owner runs this script to
# exercise the same suites on the hardware and reports the log.
#
#   HRX_AMDF_LIBRARY=/path/to/libamdf.so bash scripts/test-amd-hardware.sh
#
# It needs libamdf (see docs/amd.md for building it), the kfd and accel device nodes
# with permissions for this user, and the repository installed as the README's test
# command installs it. Tests run one at a time (-p no:xdist, no parallel workers): two
# processes must not share the GPU's queues or the NPU's contexts while the suites
# measure their behaviour.
set -uo pipefail
cd "$(dirname "$0")/.."
export HRX_AMDF_PROVIDER=libamdf
log=${HRX_HARDWARE_LOG:-amd-hardware-$(date +%Y%m%d-%H%M%S).log}
{
  echo "== hrx doctor"
  hrx doctor || exit 1
  python3 - <<'PY' || exit 1
import sys
import hrx_core as hrx
status = hrx.engine_status().get("amdgpu")
if status is None or not status.available:
    sys.exit(f"amdgpu is unavailable on libamdf: {status.reason if status else 'not installed'}")
print("amdgpu:", status.reason)
PY
  echo "== conformance and engine suites on amdgpu (libamdf)"
  python3 -m pytest -p no:cacheprovider -q -k "amdgpu" tests plugins/hrx_tensor plugins/hrx_image plugins/hrx_models plugins/hrx_gpu/tests
  rc=$?
  echo "== the NPU on xdna (libamdf): scripts/test-npu-hardware.sh (compiled .xdna images from HRX_XDNA_IMAGES)"
  HRX_HARDWARE_LOG=/dev/null bash scripts/test-npu-hardware.sh
  rc2=$?
  echo "== hrx demo with amdgpu + xdna"
  hrx demo --gpu-engine amdgpu --npu-engine xdna --trace /tmp/hrx-amd-trace.json
  rc3=$?
  echo "exit codes: amdgpu suites $rc, xdna suites $rc2, demo $rc3"
  [ "$rc" -eq 0 ] && [ "$rc2" -eq 0 ] && [ "$rc3" -eq 0 ]
} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "log: $log"
exit "$status"
