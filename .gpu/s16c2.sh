# template, session 16 call 3 (warm, within 30 s of call 2's return; calls 1 and 2: `bash .gpu/s15c1.sh` twice, the
# 2400-step target of RESULTS 22.1 on SynthVid world version 2, whose diamond a model can tell from a square, 22.5):
# every method on the captions and the MCQ, in one run, with the
# defaults of session 15 on (the loose rule inside the verify step, 22.3), so sparrow and sparrow-lvspec-pst are
# side by side with it for the first time. ~230 s captions + ~150 s MCQ in a warm process.
# PARTS=captions for the captions alone; LIMIT bounds the whole eval.
test -f runs/h15/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted or call 2 unfinished"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h15; X=$OUT/x16c; mkdir -p $X
OUT=$H PHASES=train,eval EVAL_PARTS=${PARTS:-captions,mcq} WORKERS=12 MCQ_LIMIT=${MCQ_LIMIT:-40} \
  timeout ${LIMIT:-480} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^\| |^   |rc " | tail -40
cp $H/figures.json $X/ 2>/dev/null
cd $H && tar czf $OUT/h16eval.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
