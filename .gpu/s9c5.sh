# session 9, call 5 (fresh): A/B of the leaner prepare on the committed release, K = 8: HEAD, then d7a02c9's decoding
# package (.gpu/old9, ahead on PYTHONPATH), alternating twice; then the fast-Sparrow GPU tests at HEAD.
source .gpu/s4setup.sh; date
X=$PWD/runs/x12; mkdir -p $X
$VIDSPEC data synthvid --out $X/held --num-videos 40 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
for r in 1 2; do
  timeout 70 python3 benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
     --data $X/held --limit 16 --k 8 --out $X/new$r > $X/new$r.log 2>&1; echo "new$r rc $?" >> $X/new$r.log
  PYTHONPATH=$PWD/.gpu/old9/packages/decoding/src:$PYTHONPATH timeout 70 python3 benchmarks/round_anatomy_gpu.py \
     --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
     --data $X/held --limit 16 --k 8 --out $X/old$r > $X/old$r.log 2>&1; echo "old$r rc $?" >> $X/old$r.log
done
timeout 110 python3 -m pytest -m gpu -q -p no:cacheprovider packages/decoding/tests/test_fast_sparrow.py > $X/tests.log 2>&1; echo "tests rc $?" >> $X/tests.log
date; for f in new1 old1 new2 old2; do echo "-- $f"; grep -E "^== |rc " $X/$f.log; grep -E "drafter.prepare|_feed_graphs|_start_prompt|_prepare_model|_engine" $X/$f.log | head -5; done; tail -n 3 $X/tests.log
cd $X && tar czf $OUT/x12.tgz --exclude='held' . ; ls -la $OUT
