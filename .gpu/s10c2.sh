# template, call 2 (warm, within 30 s of call 1): the eval (Sparrow chains at K = 16, to try the 4x bar of the combination),
# then the anatomy with a cProfile of prepare. Budgets: eval 360 s + anatomy what is left of 540 s.
test -f runs/h11/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h11; X=$PWD/runs/x11
OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" \
  timeout 360 bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
left=$(( 540 - ($(date +%s) - T0) )); echo "anatomy gets $left s" > $X/anatomy_tb.log
[ $left -gt 40 ] && timeout $left python3 benchmarks/round_anatomy_gpu.py --target $H/releases/synthvid-target \
  --sparrow $H/releases/sparrow-synthvid --data $H/synthvid --limit 16 --k 8,16 --profile-prepare 32 --out $H/anatomy >> $X/anatomy_tb.log 2>&1
echo "anatomy rc $?" >> $X/anatomy_tb.log
date; grep -v -i warn $X/anatomy_tb.log | grep -E "^==|rc "; grep -v -i warn $X/eval.log | grep -v "^\s*$" | tail -30
cd $X && tar czf $OUT/x11b.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h11eval.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='runs' . ; ls -la $OUT
