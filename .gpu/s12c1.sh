# template, session 12 call 1 (fresh, one H200; as session 11 call A): the headline train phase, and in the background
# (2 CPU workers) the held-out long set of call B, with the headline's exact arguments so the long pass skips it.
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$PWD/runs/x12; mkdir -p $X $H
( vidspec data synthvid --out $H/synthvid-long1536 --num-videos 10 --seed 2 --preset easy --frames 1536 --size 64x64 \
    --styles alpha:1,beta:1 --captions-per-video 2 --split validation=1 --workers 2 --no-progress true > $X/longset.log 2>&1; \
  echo "longset rc $?" >> $X/longset.log ) &
OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 SPARROW_TIME=00:00:01:50 timeout 560 bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
echo "train rc $?" >> $X/train.log; wait; date; tail -2 $X/longset.log
grep -E "^==|rc |precision|tau|^   [0-9]+ s" $X/train.log | tail -16
cp $H/figures.json $OUT/ 2>/dev/null; cd $X && tar czf $OUT/x12.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h12train.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
