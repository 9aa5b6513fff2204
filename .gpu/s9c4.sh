# session 9, call 4 (fresh): the round anatomy on the committed release (new Sparrow draft) at K = 8, with a cProfile of
# the drafter's prepare (32 calls).
source .gpu/s4setup.sh; date
X=$PWD/runs/x11; mkdir -p $X
$VIDSPEC data synthvid --out $X/held --num-videos 60 --seed 1 --preset easy --frames 8 --size 64x64 \
   --styles alpha:1,beta:1 --captions-per-video 2 --workers 8 --no-progress true > $X/held.log 2>&1
timeout 200 python3 benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target --sparrow data/releases/sparrow-synthvid \
   --data $X/held --limit 16 --k 8 --profile-prepare 32 --out $X/anatomy > $X/anatomy.log 2>&1; echo "anatomy rc $?" >> $X/anatomy.log
date; grep -v -i warn $X/anatomy.log | grep -E "^==|rc |^prepare" ; grep -A 32 "^prepare of" $X/anatomy.log | tail -31
cd $X && tar czf $OUT/x11.tgz --exclude='held' . ; ls -la $OUT
