# template, session 11 call 2 (warm, within 30 s of call 1): the whole eval at K = 16 (captions ~250 s, MCQ ~100 s,
# HF comparison), with the EOS fix of session 10; one timeout of 540 s.
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x12b; mkdir -p $X
OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" \
  timeout 540 bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -v "^\s*$" | tail -40
cd $H && tar czf $OUT/h12eval.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='runs' . ; ls -la $OUT
