#!/usr/bin/env bash
# Install HRX on an NVIDIA H200 image (python3 3.12 with numpy, torch, cupy; cffi and
# pycparser carried as wheels in .whl/) and run the GPU tests and the benchmarks that
# write bench/results/h200.json, each under its own time limit. Carry pyelftools and
# msgpack wheels as well (hrx-amdf's dependencies, installed here without --deps).
#
#   bash bench/h200.sh [tests] [hot] [launch] [graph] [runtime] [tensor] [tensor-sweep] [image] [model] [npu] [artifacts] [amdgpu] [gpu-rest] [attention] [pdl] [occupancy] [budget] [plan] [eager] [compiled] [none]
#
# (none: install only, for a diagnostic run after it; compiled: the compiled-path and
# cuda timeline tests (on host and cuda: the image has no clang for amdgpu's code objects,
# which CI's machine tests) and the shipped conformance suite on cuda, a short check where
# device time is scarce; attention: the GPT-2 kernel tests
# and bench/tools/attention_ab.py; pdl: bench/tools/pdl_ab.py's variants; occupancy:
# bench/tools/occupancy_ab.py; budget: bench/tools/budget_ab.py and the GEMV's splits at
# each register budget (gemv_variants.py); plan: bench/tools/plan_ab.py at the sweep's
# large shapes; eager: bench/tools/eager_probe.py (wall, thread and process CPU time of
# host-bound eager GEMVs); none of these is part of the default run)
#
# With no argument it runs everything. Logs and the results file go to $OUT (or ./h200-out).
# The results file is named for the GPU the run finds (h200.json; h100-80gb-hbm3.json on an
# H100). Over several device calls, copy it from $OUT back into bench/results/ before the
# next call: each call starts from the local tree, and its scripts update the file they find.
# A copy of the tree whose git metadata is not current (a remote device's) records a
# wrong commit in the results: name the measured one, HRX_COMMIT=<short sha> bash bench/h200.sh ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/hrx_amdf -e plugins/hrx_gpu -e plugins/hrx_npu \
  -e plugins/hrx_tensor -e plugins/hrx_image -e plugins/hrx_models 2>&1 | grep -v WARNING
hrx doctor 2>&1 | grep -i "cuda" | head -5
steps=${*:-tests hot launch graph runtime tensor tensor-sweep image model npu artifacts amdgpu gpu-rest}
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date +%T), limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -4 "$OUT/$name.log"
  echo "== $name rc=$rc"
}
for step in $steps; do
  case $step in
    tests) run tests 400 python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 120 ;;
    hot) HRX_HOT_PATH=0 run tests-no-hot-path 120 python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 60 \
           tests/test_properties.py tests/test_records.py tests/test_graphs.py plugins/hrx_gpu/tests/test_cuda_hot.py ;;
    launch) run gpu-launch 90 python3 bench/gpu.py --only launch --reps 7 ;;
    graph) run gpu-graph 150 python3 bench/gpu.py --only graph,graph_allocs --reps 7 ;;  # one process: comparable raw peers
    runtime) run runtime 90 python3 bench/runtime.py --reps 7 ;;
    tensor) run tensor 150 python3 bench/tensor.py --engine cuda --only base ;;
    tensor-sweep) run tensor-sweep 150 python3 bench/tensor.py --engine cuda --only sweep ;;
    image) run image 150 python3 bench/image.py --engine cuda ;;
    model) run model 300 python3 bench/model.py ;;
    npu) run npu 120 python3 bench/npu.py ;;
    artifacts) run artifacts 150 python3 bench/artifacts.py --gpu ;;
    amdgpu) run amdgpu 120 python3 bench/amdgpu.py ;;
    gpu-rest) for only in transfer d2d memops; do run "gpu-$only" 150 python3 bench/gpu.py --only "$only"; done ;;
    attention) run attention-tests 150 python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 120 \
                 plugins/hrx_models/tests/test_gpt2_kernels.py plugins/hrx_models/tests/test_gpt2_fused.py ;
               run attention-ab 240 python3 bench/tools/attention_ab.py ;  # the decoder's attention against the earlier kernel
               for a in streamed earlier; do for p in 16 1000; do
                 run "attention-profile-$a-$p" 120 python3 bench/tools/profile_model.py --prompt $p --steps 8 --attention $a
               done; done ;;
    pdl) run pdl-ab 300 python3 bench/tools/pdl_ab.py --early --late --rounds 5 ;;  # decode with and without PDL variants
    occupancy) run occupancy-ab 300 python3 bench/tools/occupancy_ab.py --shapes gpt2,gpt2-medium,1b ;;  # the fused GEMVs at other register budgets
    budget) run budget-ab 120 python3 bench/tools/budget_ab.py --all ;  # hrx_tensor's GEMV at both budgets, every warp-kernel sweep shape
            run budget-splits 240 python3 bench/tools/gemv_variants.py --unroll 4,2b8 --reps 100 \
              --shapes 1024x8192,2048x4096,2048x8192,2560x8192,4096x2048,4096x4096,6144x2048,8192x2048,16384x1024 ;;  # splits at each budget
    plan) run plan-ab 240 python3 bench/tools/plan_ab.py --variants plan,six,warp,warp6,bulk \
            --shapes 4096x16384,8192x8192,8192x16384,12288x16384,16384x4096,16384x8192,16384x16384 ;;  # the GEMV plan against its variants
    eager) run eager-probe 120 python3 bench/tools/eager_probe.py --engine cuda ;;  # where host-bound eager GEMV time goes
    compiled) run compiled-path-tests 240 python3 -m pytest -q -p no:cacheprovider --timeout 120 --hrx-engine host --hrx-engine cuda \
        tests/test_fastpath.py tests/test_submit_fastpath.py tests/test_runtime_fastpath.py tests/test_dispatch_fastpath.py \
        plugins/hrx_gpu/tests/test_cuda_hot.py plugins/hrx_gpu/tests/test_cuda_gpu.py \
        && run conformance 120 python3 -m pytest -q -p no:cacheprovider --pyargs hrx_core.conformance --hrx-engine cuda ;;  # the compiled paths and the timelines on cuda, in a few minutes
    none) ;;  # install only (for diagnostics run after it)
    *) echo "unknown step $step"; exit 2 ;;
  esac
  for f in bench/results/h[0-9]*.json; do [ -f "$f" ] && cp "$f" "$OUT/"; done  # h200.json, or h100.json on an H100
done
if [ -f ../shared/tools/bench_check.py ]; then  # (not on the device machine: run it where the results land)
  for f in bench/results/h[0-9]*.json; do python3 ../shared/tools/bench_check.py "$f"; done > "$OUT/bench_check.log" 2>&1 || true
  tail -3 "$OUT/bench_check.log"
fi
