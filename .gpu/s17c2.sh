# template, session 17 calls 2 and 3 (warm, each within 30 s of the previous call's return; call 1: .gpu/s17c1.sh):
# the long pass of RESULTS 21.1 (the same fine-tune: captions, frame repeats [1,8,64,192,192], 650 steps in 8:00,
# then its Sparrow draft), now with every method: issue 9 asks for ar, sd, lvspec, lvspec-pst, fly, sparrow and
# sparrow-lvspec-pst on short and long videos. The draft-VLM methods use the committed draft VLM, which was never
# fine-tuned on long inputs; that is their honest long-video figure, not a tuned one.
#   call 2: STAGES=target LIMIT=585 bash .gpu/s17c2.sh   (the fine-tune, ~530 s)
#   call 3: LIMIT=<seconds left - 20> bash .gpu/s17c2.sh (Sparrow ~103 s, eval-long64, eval-long1536; estimated from
#           session 14's logs: ~165 s and ~100 s of warm-ups and graph captures, each 1536-frame video read once for
#           all methods (--share_video, the long pass's default): ~460 s in all. The runs go sample by sample, so a
#           call cut short leaves every method with the same videos, and the next call resumes them.)
test -f runs/h17/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h17; X=$OUT/x17l; mkdir -p $X
OUT=$H PHASES=eval EVAL_PARTS=long WORKERS=12 LONG_STAGES=${STAGES:-target,draft,sparrow,eval} \
  LONG_FRAMES=1536 LONG_LIMIT=${LONG_LIMIT:-10} LONG_TRAIN=1 \
  LONG_METHODS=${LONG_METHODS:-ar,sd,lvspec,lvspec-pst,fly,sparrow,sparrow-lvspec-pst} \
  timeout ${LIMIT:-585} bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1; echo "eval rc $?" >> $X/eval.log
date; grep -v -i warn $X/eval.log | grep -E "^==|^\| |^   |INFO vidspec.evaluation.runner: [a-z0-9-]+: (models|[a-z-]+ warm)|rc " | tail -40
tail -3 $H/runs/long-target/train.log 2>/dev/null
test -f $H/eval-long1536/summary.json && python3 benchmarks/long_tau.py $H/eval-long64 $H/eval-long1536 --out $X/long_tau.json --plot $X/long_tau.png 2>&1 | tail -12
cd $H && tar czf $OUT/h17long.tgz --exclude='synthvid*' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' --exclude='releases' --exclude='checkpoints' --exclude='events.out*' . ; ls -la $OUT
# Last, after the results are packed (a call cut here loses only this): the H200 figure for the Qwen2.5-VL training
# change of RESULTS 23.5, one vision-tower training step per-window against grouped, batch 128 (~30 s).
if [[ -z "${STAGES:-}" ]]; then
  cd "$H/../.." && timeout 60 python3 benchmarks/qwen_vision_train_speed.py --device cuda --batch 128 --steps 10 \
    --out $OUT/qwen_vision_speed.json 2>&1 | grep -v -i warn | tail -3
fi
