# template, session 13 calls 2.. (warm, each within 30 s of the previous call's return): the same resumable command
# as s12c2.sh, with the long pass trained on longer sequences. Session 12 (RESULTS 19.3) judged the long-video bar
# and missed it because the target, fine-tuned on at most 32 x 8 = 256 frames (~4.4k visual tokens), degenerates at
# 1536 frames (~26k). Here the fine-tune reaches 192 x 8 = 1536 frame slots, with data.frame_budget keeping every
# batch at <= 3072 frames (2 clips at r = 192, 16 at r <= 16). Not run on a GPU yet: watch the first steps' memory
# and speed in runs/h12/runs/long-target/train.log. PARTS (long,hf): e.g. PARTS=long first. LIMIT: the timeout.
# HF_EXTRA: the HF comparison at the eval's Sparrow K (session 12's ran at K = 4).
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x13b; mkdir -p $X
OUT=$H PHASES=train,eval EVAL_PARTS=${PARTS:-long,hf} WORKERS=12 HF_LIMIT=20 HF_EXTRA="--k 16" \
  EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" LONG_FRAMES=1536 LONG_LIMIT=10 LONG_TRAIN=1 \
  LONG_AUGMENT="--data.frame_repeat [1,4,16,64,192] --data.position_stretch [1,2,4] --data.frame_budget 3072" \
  LONG_TRAIN_TIME=00:00:03:00 LONG_TRAIN_STEPS=1000 \
  timeout ${LIMIT:-570} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^   |INFO vidspec.evaluation.runner: [a-z0-9-]+: (models|[a-z-]+ warm)|rc " | tail -40
tail -5 $H/runs/long-target/train.log 2>/dev/null
python3 benchmarks/long_tau.py $H/eval-long64 $H/eval-long1536 --out $X/long_tau.json 2>&1 | tail -8
cd $H && tar czf $OUT/h13eval.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
