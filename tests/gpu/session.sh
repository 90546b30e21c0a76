#!/usr/bin/env bash
# One stage of the H200 proof, run through the device tool (see README "GPU proof"):
#   bash tests/gpu/session.sh selftest|vllm1|vllm2|real1|real2|bench|trace|trace-selftest|contract
#   bash tests/gpu/session.sh matrix [MODEL …]|plan|plan-edits BASE [EDIT …]|plan-solve [BASE]|bench-sweep
#   bash tests/gpu/session.sh bench-real MODEL small|default [gc-on]   (issue 31: kvaudit run / plain LLM at real dimensions,
#     MODEL a folder of tests/gpu/models, graphs 1–64 or vLLM's own list; queue the four runs with queue.sh)
#   bash tests/gpu/session.sh profile-real MODEL   (issue 31: one kvaudit boot with each phase under cProfile)
#   bash tests/gpu/session.sh gc-check MODEL   (issue 31: one kvaudit boot with its gc sections checked, one with them on)
#   bash tests/gpu/session.sh cold-warm MODEL [mtp] [NAME=VALUE …]   (issue 28: --repeat 2 from empty caches)
#   bash tests/gpu/session.sh load1|load2|load-repeat[-cold|-warm]|user-path   (issue 28: verify scenarios, --repeat,
#     the user's path)
#   bash tests/gpu/session.sh release-a|release-b   (a release carried by prepare_release.py, e.g. 0.33.0:
#     a: its contract tests, the embedded model's matrix row and the 8B model; b: the 16B MLA+MoE and the MTP model)
# (real1: dense 8B and MLA+MoE 16B on MRv2; real2: MLA+MoE+MTP on V1, the retained-pool selftest and
#  an allocator-snapshot fixture; see tests/gpu/test_real_scale_gpu.py)
# (matrix: the installed vLLM release's row of the version matrix plus its contract tests;
#  plan / plan-solve: the `kvaudit plan` proof, see tests/gpu/proof.py)
# (trace-selftest needs no vLLM: the planted attribution, the overhead benchmark, the per-phase probe)
# KVAUDIT_SITE: where tests/gpu/prepare_release.py's install.sh put vLLM (default /tmp/site).
# Everything lands in $OUT/results.tar.gz (reports, vLLM logs, pytest output) plus $OUT/summary.txt.
set -uo pipefail
stage=${1:?stage}
site=${KVAUDIT_SITE:-/tmp/site}
# nvidia-cutlass-dsl's .pth puts its dsl_packages on sys.path in a site directory; a --target install on
# PYTHONPATH needs it written out (vLLM 0.34 imports `cutlass` in its kernel warmup)
[ -d "$site/nvidia_cutlass_dsl/dsl_packages" ] && site=$site/nvidia_cutlass_dsl/dsl_packages:$site
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
res=$OUT/results; mkdir -p "$res"
# the card in the result files' names (h200-…, h100-…): the device tool lends either
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -oiE 'h[0-9]{3}' | head -n 1 | tr 'H' 'h')
card=${card:-gpu}
export KVAUDIT_GPU_RESULTS=$res
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$res/env-$stage.txt" 2>&1
case $stage in
  selftest) sel="selftest" ;;
  vllm1) sel="graphs or eager" ;;
  vllm2) sel="mtp or llama" ;;
  contract) sel="" ;;
  trace) sel="trace" ;;
  real1) sel="dense_8b or mla_moe_16b" ;;
  real2) sel="mtp_over_40" ;;
  release-a|release-b|release-all) sel="" ;;
esac
if [ "$stage" = trace ]; then
  timeout ${STAGE_TIMEOUT:-380} python3 -m pytest -q -rA tests/gpu/test_trace_gpu.py -p no:cacheprovider 2>&1 | tee "$res/pytest-trace.txt"
  timeout 150 python3 tests/benchmarks/bench_trace.py --pairs 2 --json "$res/$card-bench-trace.json" 2>&1 | tee "$res/bench-trace.txt"
elif [ "$stage" = trace-selftest ]; then
  timeout 120 python3 -m pytest -q -rA tests/gpu/test_trace_gpu.py -k planted -p no:cacheprovider 2>&1 | tee "$res/pytest-trace-selftest.txt"
  timeout 200 python3 tests/benchmarks/bench_trace.py --pairs 3 --json "$res/$card-bench-trace.json" 2>&1 | tee "$res/bench-trace.txt"
  timeout 120 python3 tests/benchmarks/probe_trace.py --out /tmp untraced traced > "$res/$card-probe-trace.jsonl"
elif [ "$stage" = release-a ]; then
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  timeout 60 python3 -m pytest -q tests/vllm/test_contract.py -p no:cacheprovider 2>&1 | tee "$res/$card-contract-vllm$ver.txt"
  MATRIX_TIMEOUT=${EMBEDDED_TIMEOUT:-220} timeout 280 python3 tests/gpu/proof.py matrix "$res" embedded-mtp 2>&1 | tee "$res/matrix-$ver.txt"
  timeout ${STAGE_TIMEOUT:-300} python3 -m pytest -q -rA tests/gpu/test_real_scale_gpu.py -k dense_8b -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
  stage=$stage-$ver
elif [ "$stage" = release-all ]; then
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  timeout ${STAGE_TIMEOUT:-580} python3 -m pytest -q -rA tests/gpu/test_real_scale_gpu.py -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
  stage=$stage-$ver
elif [ "$stage" = release-b ]; then
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  timeout ${STAGE_TIMEOUT:-560} python3 -m pytest -q -rA tests/gpu/test_real_scale_gpu.py -k "mla_moe_16b or mtp_over_40" -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
  stage=$stage-$ver
elif [ "$stage" = real1 ]; then
  timeout ${STAGE_TIMEOUT:-560} python3 -m pytest -q -rA tests/gpu/test_real_scale_gpu.py -k "$sel" -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
elif [ "$stage" = real2 ]; then
  timeout 330 python3 -m pytest -q -rA tests/gpu/test_real_scale_gpu.py -k "$sel" -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
  timeout 90 python3 -m pytest -q -rA tests/gpu/test_selftest_gpu.py -k retained -p no:cacheprovider 2>&1 | tee "$res/pytest-retained.txt"
  timeout 60 python3 tests/gpu/record_pool_snapshot.py "$res/$card-pool-snapshot.json" 2>&1 | tail -3
elif [ "$stage" = bench ]; then
  timeout 560 python3 tests/benchmarks/bench_run.py --gmu 0.9 --orders pkkp --json "$res/$card-bench-run.json" 2>&1 | tee "$res/bench-run.txt"
elif [ "$stage" = matrix ]; then
  shift
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  timeout ${STAGE_TIMEOUT:-1000} python3 tests/gpu/proof.py matrix "$res" "$@" 2>&1 | tee "$res/matrix-$ver.txt"
  timeout 90 python3 -m pytest -q tests/vllm/test_contract.py -p no:cacheprovider 2>&1 | tee "$res/$card-contract-vllm$ver.txt"
  stage=matrix-$ver
elif [ "$stage" = plan ] || [ "$stage" = plan-edits ] || [ "$stage" = plan-solve ]; then
  shift
  timeout ${STAGE_TIMEOUT:-570} python3 tests/gpu/proof.py "$stage" "$res" "$@" 2>&1 | tee "$res/$stage.txt"
elif [ "$stage" = bench-sweep ]; then
  # the cost of --sweep at real dimensions: kvaudit run, then --sweep (BENCH_ORDERS=kssk for a balanced order)
  timeout ${STAGE_TIMEOUT:-560} python3 tests/benchmarks/bench_run.py --model tests/gpu/models/llama-3.2-1b \
    --dummy-weights --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 --max-num-batched-tokens 8192 \
    --cudagraph-sizes 1,2,4,8,16,24,32,48,64 --orders ${BENCH_ORDERS:-ks} --json "$res/$card-bench-sweep.json" 2>&1 | tee "$res/bench-sweep.txt"
elif [ "$stage" = bench-real ]; then
  model=${2:?model} sizes=${3:?small|default}  # [gc-on]
  [ "$sizes" = small ] && list=1,2,4,8,16,24,32,48,64 || list=default
  # a fourth argument `gc-on`: the same benchmark with kvaudit's gc sections on (KVAUDIT_GC_SECTIONS, issue 31)
  gc=""; [ "${4:-}" = gc-on ] && { export KVAUDIT_GC_SECTIONS=on; gc=-gc-on; }
  mtp=(); [ "$model" = deepseek-v3-2layer-mtp ] && mtp=(--mtp 1)
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  timeout ${STAGE_TIMEOUT:-1500} python3 tests/benchmarks/bench_run.py --model "tests/gpu/models/$model" --dummy-weights \
    "${mtp[@]}" --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 --max-num-batched-tokens 8192 \
    --cudagraph-sizes "$list" --orders ${BENCH_ORDERS:-pkkp} \
    --json "$res/$card-bench-run-$model-$sizes$gc-vllm$ver.json" 2>&1 | tee "$res/bench-run-$model-$sizes$gc.txt"
  stage=bench-real-$model-$sizes$gc
elif [ "$stage" = cold-warm ]; then
  # issue 28: one `kvaudit run --repeat 2` of MODEL in caches of its own, empty at the start: boot 1 compiles
  # the model, boot 2 loads it (repeat.runs[].compile_cache); a third argument `mtp` adds --mtp 1, and
  # NAME=VALUE arguments after it go into the environment (e.g. VLLM_USE_MEGA_AOT_ARTIFACT=0): which of them
  # moves the KV a cold first boot sizes away from the warm ones' (H100, 0.34.0: 5,988,608 against 5,337,536)
  model=${2:?model}; shift 2
  mtp=(); tag=""; [ "${1:-}" = mtp ] && { mtp=(--mtp 1); tag=-mtp; shift; }
  for kv in "$@"; do export "$kv"; tag="$tag-${kv%%=*}-${kv#*=}"; done
  caches=$(mktemp -d); export VLLM_CACHE_ROOT=$caches/vllm TORCHINDUCTOR_CACHE_DIR=$caches/inductor TRITON_CACHE_DIR=$caches/triton
  ver=$(python3 -c 'import vllm; print(vllm.__version__)')
  name=$card-cold-warm-$model$tag-vllm$ver
  timeout ${STAGE_TIMEOUT:-570} python3 -m kvaudit run --model "tests/gpu/models/$model" --dummy-weights "${mtp[@]}" \
    --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 --max-num-batched-tokens 8192 \
    --cudagraph-sizes 1,2,4,8,16,24,32,48,64 --repeat 2 -o "$res/$name.json" --log "$res/$name.log" \
    > "$res/cold-warm$tag.txt" 2>&1
  rm -rf "$caches"
  stage=cold-warm-$model$tag
elif [ "$stage" = profile-real ]; then
  # issue 31: where each phase's seconds go, one kvaudit boot of MODEL (graphs 1–64) with every phase of every
  # rank under cProfile (KVAUDIT_PROFILE_DIR, kvaudit/engines/stage_profile.py): <phase>-pid<N>.txt/.pstats
  model=${2:?model}
  mtp=(); [ "$model" = deepseek-v3-2layer-mtp ] && mtp=(--mtp 1)
  KVAUDIT_PROFILE_DIR=$res/profile-$model timeout ${STAGE_TIMEOUT:-570} python3 -m kvaudit run \
    --model "tests/gpu/models/$model" --dummy-weights "${mtp[@]}" --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 \
    --max-num-batched-tokens 8192 --cudagraph-sizes 1,2,4,8,16,24,32,48,64 -o "$res/$card-profile-$model.json" \
    > "$res/profile-$model.txt" 2>&1
  stage=profile-real-$model
elif [ "$stage" = gc-check ]; then
  # issue 31: kvaudit's collections inside its own sections (kvaudit/engines/gc_sections.py), checked: one boot of
  # MODEL with KVAUDIT_GC_SECTIONS=check, whose notes count what a full collection found after each young one
  # (0 everywhere: the sections are exact on this path); then compare its KV with a plain `kvaudit run`'s
  model=${2:?model}
  mtp=(); [ "$model" = deepseek-v3-2layer-mtp ] && mtp=(--mtp 1)
  KVAUDIT_GC_SECTIONS=check timeout ${STAGE_TIMEOUT:-570} python3 -m kvaudit run \
    --model "tests/gpu/models/$model" --dummy-weights "${mtp[@]}" --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 \
    --max-num-batched-tokens 8192 --cudagraph-sizes 1,2,4,8,16,24,32,48,64 -o "$res/$card-gc-check-$model.json" \
    > "$res/gc-check-$model.txt" 2>&1
  grep -o 'gc check ([^)]*): [^;]*; [^"]*missed[^;"]*' "$res/$card-gc-check-$model.json" | tee "$res/gc-check-$model-notes.txt"
  # then the same boot with the sections on, as a default would run them: its KV against the check's (whose
  # readings follow a full collection, so equal to the full measurement's)
  KVAUDIT_GC_SECTIONS=on timeout ${STAGE_TIMEOUT:-570} python3 -m kvaudit run \
    --model "tests/gpu/models/$model" --dummy-weights "${mtp[@]}" --gmu 0.98 --max-model-len 32768 --max-num-seqs 16 \
    --max-num-batched-tokens 8192 --cudagraph-sizes 1,2,4,8,16,24,32,48,64 -o "$res/$card-gc-on-$model.json" \
    > "$res/gc-on-$model.txt" 2>&1
  python3 - "$res/$card-gc-check-$model.json" "$res/$card-gc-on-$model.json" <<'PY' | tee -a "$res/gc-check-$model-notes.txt"
import json, sys
kv = [(json.load(open(p)).get("capacity") or {}).get("kv_tokens") for p in sys.argv[1:]]
print(f"KV tokens: check {kv[0]}, on {kv[1]}: {'equal' if kv[0] == kv[1] else 'DIFFERENT'}")
PY
  stage=gc-check-$model
elif [ "$stage" = load1 ] || [ "$stage" = load2 ] || [ "$stage" = load2-expandable ] || [ "$stage" = load2-capped ] || [ "$stage" = load2-contended ] || [ "$stage" = load-repeat ] || [ "$stage" = load-repeat-cold ] || [ "$stage" = load-repeat-warm ] || [ "$stage" = user-path ] || [ "$stage" = own-sizing ]; then
  # issue 28: every --verify scenario (load1: 8B, V2-Lite; load2: V3 dims + MTP), the spread of
  # --repeat 3 --cold and --repeat 3 on the 8B (load-repeat), the plain vLLM user path (user-path)
  # the MTP model's verify boot, then the plain vLLM with the flags it printed (the report read from that boot)
  mtp_then_user="tests/gpu/test_verify_gpu.py tests/gpu/test_user_path_gpu.py" mtp_then_user_k="mtp_every or (plain_vllm and mtp)"
  case $stage in
    load1) f=tests/gpu/test_verify_gpu.py; k="dense_8b_every or mla_moe_16b_every" ;;
    load2) f=tests/gpu/test_verify_gpu.py; k="mtp_every" ;;
    # the MTP model's fragmentation experiment: the same boot with the allocator's expandable segments,
    # then the plain vLLM user path with the flags it printed, under the same allocator setting
    load2-expandable) f=$mtp_then_user; k=$mtp_then_user_k; export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True KVAUDIT_RESULT_TAG=expandable ;;
    # and with the allocator held to the budget in each scenario (audit.VERIFY_CAP_ENV): what it cannot give back
    load2-capped) f=tests/gpu/test_verify_gpu.py; k="mtp_every"; export KVAUDIT_VERIFY_CAP=1 KVAUDIT_RESULT_TAG=capped ;;
    # the default allocator's verify boot, then the user path with the rest of the device taken during its load
    load2-contended) f=$mtp_then_user; k=$mtp_then_user_k; export KVAUDIT_USER_PATH_CONTEND=1 KVAUDIT_RESULT_TAG=contended ;;
    load-repeat) f=tests/gpu/test_verify_gpu.py; k="repeat" ;;
    # each half alone (H100, 0.34: the cold half about 9 min, the warm one about 4)
    load-repeat-cold) f=tests/gpu/test_verify_gpu.py; k="repeat and cold" ;;
    load-repeat-warm) f=tests/gpu/test_verify_gpu.py; k="repeat and warm" ;;
    user-path) f=tests/gpu/test_user_path_gpu.py; k="" ;;
    own-sizing) f=tests/gpu/test_user_path_gpu.py; k="own_sizing or llama" ;;  # 8B: kvaudit's flags, vLLM 0.34's own
  esac
  timeout ${STAGE_TIMEOUT:-580} python3 -m pytest -q -rA $f -k "$k" -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
elif [ "$stage" = contract ]; then
  timeout 300 python3 -m pytest -q tests/vllm/test_contract.py -p no:cacheprovider 2>&1 | tee "$res/pytest-contract.txt"
else
  timeout ${STAGE_TIMEOUT:-570} python3 -m pytest -q -rA tests/gpu -k "$sel" -p no:cacheprovider 2>&1 | tee "$res/pytest-$stage.txt"
fi
tar -czf "$OUT/results-$stage.tar.gz" -C "$OUT" results
tail -30 "$res"/pytest-*.txt "$res"/bench-*.txt "$res"/profile-*.txt "$res"/cold-warm*.txt "$res"/*.jsonl "$res"/matrix-*.txt "$res"/plan*.txt "$res"/$card-contract-*.txt 2>/dev/null > "$OUT/summary-$stage.txt"
