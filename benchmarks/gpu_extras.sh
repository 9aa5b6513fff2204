#!/usr/bin/env bash
# The GPU measurements that are built and CPU-tested but not yet run on the H200 (docs/RESULTS.md
# "Not run yet"), in one command, each step with its own time limit, so a 10-minute device call
# returns whatever finished. Steps are skipped when their JSON exists (rerun the same command to
# resume). Run from the repository root with the vidspec packages importable, on one H200:
#
#   OUT=runs/extras bash benchmarks/gpu_extras.sh                 # ~15-20 min: two calls; STEPS=... picks steps
#
# Steps (STEPS=tests,step,tree,replay,treeeval,rounds,rprof; default all):
#   tests   pytest -m gpu packages tests (the GPU tests: draft vocabulary on the kernel path, the GC
#           pause around captures, per-request drafter temperature on graphs, the fast tree
#           drafter's graph rounds, device rounds and device tree rounds)              limit 200 s
#   step    sparrow_draft_step_gpu.py --draft-vocab 32768 (issue 8's 0.3 ms draft step)  limit 120 s
#   tree    tree_cost_7b.py: a Sparrow tree round's pieces at 7B shapes, projected DSR     limit 200 s
#   replay  replay_7b.py --draft-vocab 32768 on the session-4 H200 records, Qwen shape    limit 240 s
#   treeeval  vidspec eval --engine fast: ar, sparrow, tree-sparrow (48-8-8, FastTreeSparrowDrafter)
#           on the committed release and 40 held-out captions (seed 1, generated here)     limit 240 s
#   rounds  device_rounds_gpu.py: Sparrow chains (K = 4, 6, 8) and trees (32-6-6, 48-8-8) with device
#           rounds vs host-driven rounds vs AR, side by side, on the committed release and 12
#           held-out captions                                                           limit 240 s
#   rprof   round_profile_gpu.py --tree 32-6-6: per-round split, cProfile and torch.profiler
#           traces of ar, sparrow, tree-sparrow on the committed release             limit 240 s
# The 7B-shaped random models take about a minute to build on the H200: the limits allow for it.
# Knobs: OUT (runs/extras), STEPS, RECORDS (eval records to replay; default the session-4 H200 run),
# PY (python3).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-runs/extras}
STEPS=${STEPS:-tests,step,tree,replay,treeeval,rounds,rprof}
RECORDS=${RECORDS:-benchmarks/results/gpu_session4/eval-captions/records.jsonl.gz}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$PWD/packages/decoding/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for s in ${STEPS//,/ }; do
  case "$s" in tests|step|tree|replay|treeeval|rounds|rprof) ;;
    *) echo "unknown step $s in STEPS=$STEPS (tests,step,tree,replay,treeeval,rounds,rprof)" >&2; exit 2 ;; esac
done
want() { [[ ",$STEPS," == *",$1,"* ]]; }
step() {  # name limit_s done_file command...
  local name=$1 limit=$2 done=$3 t rc; shift 3
  if [[ -f "$done" ]]; then echo "== $name: skipped, $done exists"; return; fi
  echo "== $name (at most $limit s): $*"
  t=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "   $name: rc $rc, $(( $(date +%s) - t )) s"
  grep -v -i "warn" "$OUT/$name.log" | tail -n 14
}
want tests && step tests 200 "$OUT/tests.passed" bash -c \
  "$PY -m pytest -m gpu -q -p no:cacheprovider packages tests && touch '$OUT/tests.passed'"
want step && step step 120 "$OUT/step/sparrow_draft_step_gpu.json" \
  "$PY" benchmarks/sparrow_draft_step_gpu.py --draft-vocab 32768 --out "$OUT/step"
want tree && step tree 200 "$OUT/tree/tree_cost_7b.json" \
  "$PY" benchmarks/tree_cost_7b.py --out "$OUT/tree"
want replay && step replay 240 "$OUT/replay/replay_7b.json" \
  "$PY" benchmarks/replay_7b.py --records "$RECORDS" --methods sparrow --families qwen2.5-vl --draft-vocab 32768 \
  --out "$OUT/replay"
HELD=$OUT/synthvid-heldout
held() {  # the held-out caption set (seed 1), generated once
  [[ -f "$HELD/synthvid.json" ]] || $PY -m vidspec.decoding.cli data synthvid --out "$HELD" --num-videos 300 --seed 1 \
    --preset easy --frames 8 --size 64x64 --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true \
    > "$OUT/heldout.log" 2>&1
}
if want treeeval; then
  held
  step treeeval 240 "$OUT/treeeval/summary.json" "$PY" -m vidspec.decoding.cli eval --benchmark synthvid_captions \
    --data "$HELD" --split validation --limit 40 --target data/releases/synthvid-target \
    --sparrow data/releases/sparrow-synthvid --methods ar,sparrow,tree-sparrow --engine fast --device cuda \
    --max_new_tokens 64 --out "$OUT/treeeval" --no_progress true
fi
if want rounds; then
  held
  step rounds 240 "$OUT/rounds/device_rounds.json" "$PY" benchmarks/device_rounds_gpu.py \
    --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid --data "$HELD" --limit 12 \
    --k 4,6,8 --trees 32-6-6,48-8-8 --out "$OUT/rounds"
fi
if want rprof; then
  held
  step rprof 240 "$OUT/rprof/round_profile.json" "$PY" benchmarks/round_profile_gpu.py \
    --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid --draft data/releases/synthvid-draft \
    --data "$HELD" --limit 10 --methods ar,sparrow,tree-sparrow --tree 32-6-6 --out "$OUT/rprof"
fi
echo "== done: $(ls "$OUT")"
