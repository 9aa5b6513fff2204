# session 9, call 2 (warm after call 1): the headline eval (Sparrow chains at K = 8), then the round anatomy on the testbed.
test -f runs/h10/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h10; X=$PWD/runs/x10
OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 8" \
  timeout 380 bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
left=$(( 560 - ($(date +%s) - T0) )); echo "anatomy gets $left s" > $X/anatomy_tb.log
timeout $left python3 benchmarks/round_anatomy_gpu.py --target $H/releases/synthvid-target --sparrow $H/releases/sparrow-synthvid \
   --data $H/synthvid --limit 16 --k 8,12,16 --out $H/anatomy >> $X/anatomy_tb.log 2>&1; echo "anatomy rc $?" >> $X/anatomy_tb.log
date; grep -v -i warn $X/anatomy_tb.log | grep -E "^==|rc "
grep -v -i warn $X/eval.log | grep -v "^\s*$" | tail -36
cd $X && tar czf $OUT/x10b.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h10eval.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' . ; ls -la $OUT
