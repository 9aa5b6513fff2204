# session 8, call 4 (x2, fresh): side by side on the committed release, the round anatomy at HEAD (GPU0: begin with
# fewer host operations, no sync after begin) and at 253986f (GPU1: the code of calls 1-3); then the kernel-path
# GPU tests at HEAD on GPU0. The .gpu/old253 files (not committed) are `git show 253986f:packages/decoding/src/vidspec/decoding/F`.
source .gpu/s4setup.sh; date
X=$PWD/runs/x10; mkdir -p $X
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r /tmp/site/vidspec /tmp/old/
for f in engine.py fast/lm.py fast/sparrow.py fast/tree.py sparrow.py types.py; do cp .gpu/old253/$f /tmp/old/vidspec/decoding/$f; done
$VIDSPEC data synthvid --out $X/held --num-videos 300 --seed 1 --preset easy --frames 8 --size 64x64 \
  --styles alpha:1,beta:1 --captions-per-video 2 --workers 16 --no-progress true > $X/held.log 2>&1
A="--target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid --data $X/held --limit 16 --k 4,8 --trees 48-8-8"
(export CUDA_VISIBLE_DEVICES=0
 timeout 150 python3 benchmarks/round_anatomy_gpu.py $A --out $X/anatomy_head > $X/anatomy_head.log 2>&1; echo "anatomy rc $?" >> $X/anatomy_head.log
 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider packages/decoding/tests/test_fast_sparrow.py \
   packages/decoding/tests/test_tree_sparrow_fast.py > $X/tests.log 2>&1; echo "tests rc $?" >> $X/tests.log) &
(export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/old:$PYTHONPATH VIDSPEC_GIT_SHA=253986f
 python3 -c "import vidspec.decoding.fast.sparrow as m; print(m.__file__, hasattr(m.FastSparrowDrafter, '_feed_graphs'))" > $X/anatomy_old.log 2>&1
 timeout 150 python3 benchmarks/round_anatomy_gpu.py $A --out $X/anatomy_old >> $X/anatomy_old.log 2>&1; echo "anatomy rc $?" >> $X/anatomy_old.log) &
wait; date
for f in old head; do echo "== $f"; grep -v -i warn $X/anatomy_$f.log | grep -E "^==|sparrow.py|chain T=(1|32) k=(1|4|8) "; done; tail -n 3 $X/tests.log
cd $X && tar czf $OUT/x10.tgz --exclude='held' . ; ls -la $OUT
