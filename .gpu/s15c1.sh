# template, session 15 calls 1 and 2 (call 1 on a fresh H200; call 2 the same command, warm, within 30 s of call 1's
# return): issue 4's longer target SFT, spread over two calls with TARGET_CALL_STEPS (built in session 13, smoke-
# tested on CPU, not yet run on the GPU). Every testbed since session 5 trained its target for 800 steps in 3:45 and
# reached precision 0.88 / MCQ 0.80 (RESULTS 21: 11 of 16 hallucinated facts are motions; the frozen tower's tokens
# carry motion, 6, so the language layers need more training). Here: 2400 steps (~0.28 s each), one LR schedule.
#   call 1: data, vision pretraining, target steps 0 -> 1300, then "paused" (exit 3 from the headline), ~480 s
#   call 2: target steps 1300 -> 2400, Sparrow (1:50), figures.json (precision, MCQ, tau), ~470 s
source .gpu/setup.sh; date
H=$PWD/runs/h15; X=$OUT/x15; mkdir -p $X $H
OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=${FIGURES_LIMIT:-20} SPARROW_TIME=00:00:01:50 \
  TARGET_STEPS=2400 TARGET_CALL_STEPS=1300 TARGET_TIME=00:00:14:00 \
  timeout ${LIMIT:-575} bash benchmarks/headline_gpu.sh > $X/train.log 2>&1; echo "train rc $? (3: paused, go on)" >> $X/train.log
date; grep -v -i warn $X/train.log | grep -E "^==|rc |precision|accuracy|tau|^   [0-9]+ s|paused" | tail -24
cp $H/figures.json $OUT/ 2>/dev/null
cd $H && tar czf $OUT/h15train.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='events.out*' . ; ls -la $OUT
