# template, session 17 call 1 (fresh, one H200): issue 9's last unrun evaluation is every method on the long videos
# (RESULTS 21.1 ran ar and sparrow). The long pass needs its own fine-tune (a call to itself, 21.1), so the base target
# here is the 800-step one of sessions 5-14 (3:45), not the 2400-step one of RESULTS 23.1 (two calls): three calls of
# ~530 s fit in 30 minutes, four do not. World version 2. The held-out long set (10 videos, 1536 frames, seed 2) is
# rendered in the background on 2 workers, with the headline's exact arguments so the long pass finds it.
#   call 1: bash .gpu/s17c1.sh                     (train phase, ~530 s)
#   call 2: STAGES=target LIMIT=585 bash .gpu/s17c2.sh   (the long fine-tune alone, ~530 s)
#   call 3: LIMIT=<seconds left - 20> bash .gpu/s17c2.sh (its Sparrow 103 s, then every method at 64 and 1536 frames)
source .gpu/setup.sh; date
H=$PWD/runs/h17; X=$OUT/x17; mkdir -p $X $H
( vidspec data synthvid --out $H/synthvid-long1536 --num-videos ${LONG_LIMIT:-10} --seed 2 --preset easy --frames 1536 --size 64x64 \
    --styles alpha:1,beta:1 --captions-per-video 2 --split validation=1 --workers 2 --no-progress true > $X/longset.log 2>&1; \
  echo "longset rc $?" >> $X/longset.log ) &
# FIGURES_LIMIT and SPARROW_TIME may be lowered where the base target's figures and Sparrow are not needed (the A/B of
# .gpu/s23c3.sh distils its own drafts from the long target): FIGURES_LIMIT=2 SPARROW_TIME=00:00:00:15 saves ~2:30.
OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=${FIGURES_LIMIT:-20} SPARROW_TIME=${SPARROW_TIME:-00:00:01:50} TARGET_STEPS=800 TARGET_TIME=00:00:03:45 \
  timeout ${LIMIT:-560} bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
echo "train rc $?" >> $X/train.log; wait; date; tail -2 $X/longset.log
grep -v -i warn $X/train.log | grep -E "^==|rc |precision|accuracy|tau|^   [0-9]+ s" | tail -20
cp $H/figures.json $OUT/ 2>/dev/null
cd $H && tar czf $OUT/h17train.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='events.out*' . ; ls -la $OUT
