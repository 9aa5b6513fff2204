# session 8, call 1 (x2, fresh): GPU0 the headline train phase; GPU1 the kernel-chain GPU tests first, then the
# round anatomy on the committed release (the fused chains, one-block pending states, prompt feed T = 32), then
# the other GPU tests.
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h9; X=$PWD/runs/x9; mkdir -p $X $H
(export CUDA_VISIBLE_DEVICES=0; OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 timeout 530 bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
 echo "train rc $?" >> $X/train.log) &
(export CUDA_VISIBLE_DEVICES=1
 $VIDSPEC data synthvid --out $X/held --num-videos 300 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
 timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider packages/decoding/tests/test_fast_sparrow.py \
   packages/decoding/tests/test_tree_sparrow_fast.py > $X/tests1.log 2>&1; echo "tests rc $?" >> $X/tests1.log
 timeout 200 python3 benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $X/held --limit 16 --k 4,8 --trees 48-8-8 --out $X/anatomy > $X/anatomy.log 2>&1; echo "anatomy rc $?" >> $X/anatomy.log
 left=$(( 520 - ($(date +%s) - T0) )); echo "tests2 get $left s" > $X/tests2.log
 [ $left -gt 60 ] && timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider packages tests \
   --ignore=packages/decoding/tests/test_fast_sparrow.py --ignore=packages/decoding/tests/test_tree_sparrow_fast.py >> $X/tests2.log 2>&1
 echo "tests2 rc $?" >> $X/tests2.log) &
wait; date
tail -n 3 $X/tests1.log; grep -v -i warn $X/anatomy.log | grep -E "^==|target T=(1|9|49) |chain T=(1|16|32) k=(1|4|8) |growth T=1 depth=8|post depth=8"; tail -n 3 $X/tests2.log
grep -E "^==|rc |precision|tau" $X/train.log | tail -14
cd $X && tar czf $OUT/x9.tgz --exclude='held' . ; cd - >/dev/null
cd $H && tar czf $OUT/h9train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
