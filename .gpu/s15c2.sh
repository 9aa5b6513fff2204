# template, session 15 call 3 (warm, within 30 s of call 2's return): every method on the captions with the
# longer-trained target of s15c1.sh, which re-measures the combination with the loose walk of session 12 (RESULTS
# 21.2: session 13's one-read walk cost 0.19 ms per round and is reverted), ~230 s; then the A/B of the loose rule
# inside the verify step (--loose_device true, built in session 14, CPU-tested only): ar and the three loose
# methods again in a run of their own, ~150-250 s (its draft graphs and the compiled rule per step length are new in this process). Compare verify_ms_per_round and the DSRs of the two runs.
# PARTS=captions,mcq adds the MCQ (~150 s). Session 15 ran it when the host walk was the default (RESULTS 22.3); the
# first run now names it (--loose_device false), so the script still measures what it measured then.
test -f runs/h15/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted or call 2 unfinished"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h15; X=$OUT/x15c; mkdir -p $X
OUT=$H PHASES=train,eval EVAL_PARTS=${PARTS:-captions} WORKERS=12 \
  EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16 --loose_device false" \
  timeout ${LIMIT:-560} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^\| |^   |rc " | tail -40
if test -f $H/eval-captions/summary.json; then
  timeout ${AB_LIMIT:-270} vidspec eval --benchmark synthvid_captions --data $H/synthvid --split validation \
    --target $H/releases/synthvid-target --draft data/releases/synthvid-draft --sparrow $H/releases/sparrow-synthvid \
    --methods ar,lvspec,lvspec-pst,sparrow-lvspec-pst --engine fast --device cuda --limit 40 --max_new_tokens 64 \
    --lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16 --loose_device true --out $H/eval-captions-loosedev \
    --no_progress true > $X/loosedev.log 2>&1; echo "loosedev rc $?" >> $X/loosedev.log
  grep -E "^\| |rc " $X/loosedev.log
  python3 - $H <<'PY' 2>&1 | tee -a $X/loosedev.log
import json, sys
from pathlib import Path
runs = {n: json.loads((Path(sys.argv[1]) / n / "summary.json").read_text())["methods"]
        for n in ("eval-captions", "eval-captions-loosedev")}
print("| method | verify ms/round: host walk / in the step | DSR (prepare in decode): host / step | tau |")
for m in ("lvspec", "lvspec-pst", "sparrow-lvspec-pst"):
    a, b = runs["eval-captions"][m], runs["eval-captions-loosedev"][m]
    print(f"| {m} | {a['verify_ms_per_round']:.3f} / {b['verify_ms_per_round']:.3f} | "
          f"{a['dsr_prepare_in_decode']:.2f} / {b['dsr_prepare_in_decode']:.2f} | {a['tau']:.2f} / {b['tau']:.2f} |")
PY
fi
cd $H && tar czf $OUT/h15eval.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
