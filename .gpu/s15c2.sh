# template, session 15 call 3 (warm, within 30 s of call 2's return): every method on the captions and the MCQ with
# the longer-trained target of s15c1.sh, and the combination re-measured with the loose walk of session 12 (RESULTS
# 21.2: session 13's one-read walk cost 0.19 ms per round and is reverted). ~230 s captions + ~150 s MCQ.
test -f runs/h15/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted or call 2 unfinished"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h15; X=$OUT/x15c; mkdir -p $X
OUT=$H PHASES=train,eval EVAL_PARTS=${PARTS:-captions,mcq} WORKERS=12 \
  EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" \
  timeout ${LIMIT:-560} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^\| |^   |rc " | tail -40
cd $H && tar czf $OUT/h15eval.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
