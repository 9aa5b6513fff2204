# session 11, call B (warm, right after call A): issue 9's long-video bar alone (EVAL_PARTS=long): fine-tune the trained
# target with the length augmentation, distil a Sparrow draft from it, read the 10 held-out 1536-frame videos at 64 and
# 1536 frames with ar and sparrow (K = 16). Stage times shortened to fit what is left of the session's device time.
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x12c; mkdir -p $X
OUT=$H PHASES=eval EVAL_PARTS=long WORKERS=12 EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" \
  LONG_FRAMES=1536 LONG_LIMIT=10 LONG_TRAIN=1 LONG_TRAIN_TIME=00:00:01:55 LONG_SPARROW_TIME=00:00:01:25 \
  timeout ${LIMIT:-470} bash benchmarks/headline_gpu.sh > $X/long.log 2>&1
echo "long rc $?" >> $X/long.log; date; grep -v -i warn $X/long.log | grep -v "^\s*$" | tail -30
tail -5 $H/runs/long-target/train.log $H/runs/long-sparrow/train.log > $X/long_train_tails.log 2>&1
cd $H && tar czf $OUT/h12long.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' eval-long* headline.json headline.log runs/long-target/train.log runs/long-sparrow/train.log ; ls -la $OUT
