# session 9, call 1 (x2, fresh): GPU0 the headline train phase with the new Sparrow recipe (IVSB off, 4 MTP steps);
# GPU1 every GPU test (the prepare/begin split, the prefill without its final sync), then the round anatomy on
# the committed release (prepare timed inside the prefill) at K = 4, 8, 12.
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h10; X=$PWD/runs/x10; mkdir -p $X $H
(export CUDA_VISIBLE_DEVICES=0; OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 SPARROW_TIME=00:00:01:50 \
   timeout 565 bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
 echo "train rc $?" >> $X/train.log) &
(export CUDA_VISIBLE_DEVICES=1
 $VIDSPEC data synthvid --out $X/held --num-videos 300 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
 timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider packages tests > $X/tests.log 2>&1; echo "tests rc $?" >> $X/tests.log
 timeout 220 python3 benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $X/held --limit 16 --k 4,8,12 --trees 48-8-8 --out $X/anatomy > $X/anatomy.log 2>&1; echo "anatomy rc $?" >> $X/anatomy.log) &
wait; date
tail -n 3 $X/tests.log; grep -v -i warn $X/anatomy.log | grep -E "^==|rc "
grep -E "^==|rc |precision|tau|^   [0-9]+ s" $X/train.log | tail -16
cd $X && tar czf $OUT/x10.tgz --exclude='held' . ; cd - >/dev/null
cd $H && tar czf $OUT/h10train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
