# template, session 14 calls 2 and 3 (warm, each within 30 s of the previous call's return): the long pass with a
# fine-tune that has a call to itself. Session 13 (RESULTS 20.1) fine-tuned for 3:00 with frame repeats
# [1,4,16,64,192] x position stretch [1,2,4] over all three tables: 313 steps, with ~50 clips at the eval's own
# condition (repeat 192, stretch 1), with ~11 answer tokens per long batch (MCQ and open-QA rows mixed in), and the schedule stopped at
# a third of its steps with the learning rate still high. Here: captions only, repeat 192 on two batches in five
# and no stretch (the eval reads 1536 frames unstretched), 8:00 with a schedule sized to end with it (~0.67 s per
# step on average from session 13's step times: ~650 steps, ~260 of them at repeat 192).
#   call 2: STAGES=target LIMIT=585 bash .gpu/s14c2.sh    (the fine-tune, ~530 s)
#   call 3: LIMIT=400 bash .gpu/s14c2.sh                  (its Sparrow draft 103 s, eval-long64 100 s, eval-long1536 120 s;
#           then AR at 1536 frames on the eager engine, to tell the target's fall from the fast engine's, ~1 min)
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x14; mkdir -p $X
OUT=$H PHASES=eval EVAL_PARTS=long WORKERS=12 LONG_STAGES=${STAGES:-target,sparrow,eval} \
  EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" LONG_FRAMES=1536 LONG_LIMIT=10 LONG_TRAIN=1 \
  LONG_AUGMENT="--data.frame_repeat [1,8,64,192,192] --data.frame_budget 3072 --data.tables [.]" \
  LONG_TRAIN_TIME=00:00:08:00 LONG_TRAIN_STEPS=650 \
  timeout ${LIMIT:-585} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^   |INFO vidspec.evaluation.runner: [a-z0-9-]+: (models|[a-z-]+ warm)|rc " | tail -30
tail -3 $H/runs/long-target/train.log 2>/dev/null
test -f $H/eval-long1536/summary.json && python3 benchmarks/long_tau.py $H/eval-long64 $H/eval-long1536 --out $X/long_tau.json --plot $X/long_tau.png 2>&1 | tail -12
# Is the fall the target's or the fast engine's? AR at 26k through HF's own modules (eager), against the fast AR.
if test -f $H/eval-long1536/summary.json && test ! -f $H/eval-long1536-eager/summary.json; then
  timeout 150 vidspec eval --benchmark synthvid_captions --data $H/synthvid-long1536 --split validation \
    --target $H/releases/long-target --methods ar --engine eager --device cuda --limit 10 --frames 1536 \
    --max_new_tokens 64 --out $H/eval-long1536-eager --no_progress true > $X/eager.log 2>&1; echo "eager rc $?" >> $X/eager.log
  python3 - $H <<'PY' 2>&1 | tee -a $X/eager.log
import json, sys
from pathlib import Path
def ar(run):
    return {r["sample_id"]: r["text"] for r in map(json.loads, (Path(sys.argv[1]) / run / "records.jsonl").open())
            if r["method"] == "ar"}
fast, eager = ar("eval-long1536"), ar("eval-long1536-eager")
print(f"AR at 1536 frames, fast vs eager engine: {sum(fast[s] == eager.get(s) for s in fast)} of {len(fast)} identical")
for s in fast:
    print(f"{s}\n  fast : {fast[s]}\n  eager: {eager.get(s)}")
PY
fi
cd $H && tar czf $OUT/h14long.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
