# template, session 11 call 3 (warm, after s11c1 train and s11c2 eval; NOT RUN YET): issue 9's long-video bar.
# The headline's long pass with LONG_TRAIN=1 (RESULTS 17.5): fine-tune the trained target with the length augmentation
# (frame repeat up to 32: 256 slots ~4.4k tokens; position stretch up to 6: the positions of ~1536 frames), distil a
# Sparrow draft from it, generate 10 held-out videos of 1536 frames (seed 2) and read them at 64 and 1536 frames
# (~1.1k and ~26k visual tokens) with ar and sparrow. The eval-captions/mcq/hf runs of call 2 are skipped as done.
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x12c; mkdir -p $X
OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" \
  LONG_FRAMES=1536 LONG_LIMIT=10 LONG_TRAIN=1 timeout 540 bash benchmarks/headline_gpu.sh > $X/long.log 2>&1
echo "long rc $?" >> $X/long.log; date; grep -v -i warn $X/long.log | grep -v "^\s*$" | tail -30
tail -5 $H/runs/long-target/train.log $H/runs/long-sparrow/train.log > $X/long_train_tails.log 2>&1
cd $H && tar czf $OUT/h12long.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' eval-long* headline.json headline.log runs/long-target/train.log runs/long-sparrow/train.log ; ls -la $OUT
