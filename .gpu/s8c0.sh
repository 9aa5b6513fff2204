# session 8, call 0 (x2, fresh): GPU0 the round anatomy (graph GPU/launch costs + host timers) and the
# device-round sweep on the committed release; GPU1 all GPU tests (the graph_of refactor's first GPU run).
source .gpu/s4setup.sh; date; T0=$(date +%s)
X=$PWD/runs/x9; mkdir -p $X; D=$X/held  # = data/cache/synthvid-heldout (same generator arguments)
(export CUDA_VISIBLE_DEVICES=0
 $VIDSPEC data synthvid --out $D --num-videos 300 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
 timeout 240 python3 benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $D --limit 16 --k 4,8 --trees 48-8-8 --out $X/anatomy > $X/anatomy.log 2>&1; echo "anatomy rc $?" >> $X/anatomy.log
 timeout 150 python3 benchmarks/device_rounds_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $D --limit 16 --k 4,8 --trees 48-8-8 --out $X/rounds > $X/rounds.log 2>&1; echo "rounds rc $?" >> $X/rounds.log) &
(export CUDA_VISIBLE_DEVICES=1
 timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider packages tests > $X/tests.log 2>&1; echo "tests rc $?" >> $X/tests.log) &
wait; date
grep -v -i warn $X/anatomy.log | tail -80; grep -v -i warn $X/rounds.log | tail -8; tail -n 5 $X/tests.log
cd $X && tar czf $OUT/x9.tgz --exclude=held . ; ls -la $OUT
