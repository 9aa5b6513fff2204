# template, session 32 (one call, for a session whose starts keep being refused): the Qwen2.5-VL pair's GPU part in a
# single call on a fresh machine, so that no second start is needed. Session 32 spent 540 s of its budget on six
# refused starts; s31c1.sh's plan needs two or three warm calls in a row. What the GPU must do: the tower (60,000
# scenes: RESULTS 38.1) and the SFT, in one go (~530 s: data 26 s, 60,000 scenes ~15 s, the tower's 6000 steps ~110 s
# from 55 s for 3000, 2300 SFT steps ~300 s at session 32's 7.7 steps/s). The draft VLM is not trained again: session
# 30's Qwen draft VLM (same tokenizer, style beta, 36.2) is carried in and reused (DRAFT). The MCQ fine-tune (800
# steps) and Sparrow then run on CPU (RESULTS 37.2: the CPU fine-tune reproduces the H200's), or in a warm second
# call: `bash .gpu/s32c1.sh` without STOP_AFTER (the exported SFT stage is skipped, the rest runs).
#   cp -r /tmp/s30/gpu/releases/synthvid-draft runs/s30-qwen-draft   (here, before the call)
#   call: STOP_AFTER=sft bash .gpu/s32c1.sh      with carry [".whl-x", ".gitsha", "runs/s30-qwen-draft"]
# TARGET_TIME stops the SFT early, and it is then exported as it is, if the steps run slower than guessed; LIMIT (555
# s, the training script's timeout) would kill it unexported. Session 32 ran it with 330 s: the SFT stopped at step
# 2525 of 3000 (7.7 steps/s, the LR at 11% of its peak) and LIMIT killed the export, which a warm second call then did
# (.gpu/README.md). Now 2300 steps in at most 300 s: the schedule ends, and the export fits. The SFT stage comes back
# in r15-releases.tgz.part-* (stages/synthvid-target-sft), the tower's curve in r15runs.tgz.
DRAFT=${DRAFT-$PWD/runs/s30-qwen-draft} VISION_TRAIN=${VISION_TRAIN:-60000} VISION_STEPS=${VISION_STEPS:-6000} \
  TARGET_STEPS=${TARGET_STEPS:-2300} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-2300} \
  TARGET_TIME=${TARGET_TIME:-00:00:05:00} LIMIT=${LIMIT:-555} \
  bash .gpu/s31c1.sh

