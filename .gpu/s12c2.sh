# template, session 12 calls 2 and 3 (warm, each within 30 s of the previous call's return): the same resumable command
# twice. After call 1's train phase: the figures (if call 1 was cut in them), the MCQ at K = 16 with the EOS fix of
# session 10 (24 questions, all methods), the HF generate comparison, then issue 9's long pass (fine-tune the target
# with the length augmentation, distil its Sparrow draft, read the 10 held-out 1536-frame videos at 64 and 1536 frames).
# Every stage resumes: a second call finishes what the first was cut in. The captions at K = 16 were measured in
# session 10 (add captions to PARTS to rerun them, ~250 s). LIMIT: the timeout (default 570 s; make it fit the
# device time left). PARTS (mcq,hf,long): e.g. PARTS=long first, since the long-video bar is the one never judged.
# Each eval process on a machine pays ~100-230 s of compilation and graph capture before its first record
# (RESULTS 18): the first is the dearest. The long pass's two runs now skip torch.compile (LONG_EVAL_EXTRA's default).
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$OUT/x12b; mkdir -p $X
OUT=$H PHASES=train,eval EVAL_PARTS=${PARTS:-mcq,hf,long} WORKERS=12 MCQ_LIMIT=24 HF_LIMIT=20 \
  EVAL_EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16" LONG_FRAMES=1536 LONG_LIMIT=10 LONG_TRAIN=1 \
  timeout ${LIMIT:-570} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^   |INFO vidspec.evaluation.runner: [a-z0-9-]+: (models|[a-z-]+ warm)|rc " | tail -40
cp $H/figures.json $X/ 2>/dev/null
cd $H && tar czf $OUT/h12eval.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' . ; ls -la $OUT
