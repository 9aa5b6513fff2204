# session 7, call A (x2, fresh): GPU0 retrains the headline testbed (call 1's was lost with the machine);
# GPU1: device rounds with the tree post graphs on the committed release, then the device-round GPU tests.
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h8; X=$PWD/runs/x8; mkdir -p $X
(export CUDA_VISIBLE_DEVICES=0; OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 timeout 520 bash benchmarks/headline_gpu.sh > $OUT/train.log 2>&1
 echo "train rc $?" >> $OUT/train.log) &
(export CUDA_VISIBLE_DEVICES=1
 $VIDSPEC data synthvid --out $X/held --num-videos 40 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
 timeout 200 python3 benchmarks/device_rounds_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $X/held --limit 12 --k 4 --trees 32-6-6,48-8-8 --out $X/rounds > $X/rounds.log 2>&1; echo "rounds rc $?" >> $X/rounds.log
 left=$(( 505 - ($(date +%s) - T0) ))
 timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider packages/decoding/tests/test_tree_sparrow_fast.py \
   packages/decoding/tests/test_fast_sparrow.py -k "tree or device" > $X/tests.log 2>&1; echo "tests rc $? (limit $left)" >> $X/tests.log) &
wait; date
grep -v -i warn $X/rounds.log | tail -9; tail -n 5 $X/tests.log
grep -E "^==|rc |precision" $OUT/train.log | tail -12
cd $X && tar czf $OUT/x8.tgz --exclude='held' . ; cd - >/dev/null
cd $H && tar czf $OUT/h8train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
