# template, session 32 (one call, for a session whose starts keep being refused): the Qwen2.5-VL pair's GPU part in
# a single call on a fresh machine, so that no second start is needed. Session 32 spent 540 s of its budget on six
# refused starts; s31c1.sh's plan needs two or three warm calls in a row.
# What the GPU must do: the tower (60,000 scenes: RESULTS 38.1) and the SFT, in one go (~530 s: data 26 s, 60,000
# scenes ~15 s, the tower's 6000 steps ~110 s from 55 s for 3000, 3000 SFT steps ~330 s from 297 s for 2400 with the
# draft VLM training beside it). The draft VLM is not trained again: session 30's Qwen draft VLM (same tokenizer,
# style beta, 36.2) is carried in and reused (DRAFT). The MCQ fine-tune (800 steps) and Sparrow then run on CPU
# (RESULTS 37.2: the CPU fine-tune reproduces the H200's), or in a warm second call: `bash .gpu/s32c1.sh` without
# STOP_AFTER (the exported SFT stage is skipped, the rest runs).
#   cp -r /tmp/s30/gpu/releases/synthvid-draft runs/s30-qwen-draft   (here, before the call)
#   call: STOP_AFTER=sft bash .gpu/s32c1.sh      with carry [".whl-x", ".gitsha", "runs/s30-qwen-draft"]
# TARGET_TIME (330 s) stops the SFT early, and it is then exported as it is, if the steps run slower than guessed;
# LIMIT (555 s, the training script's timeout) would kill it unexported. The SFT stage comes back in r15-releases.tgz.part-* (stages/synthvid-target-sft), the tower's curve in r15runs.tgz.
DRAFT=${DRAFT:-$PWD/runs/s30-qwen-draft} VISION_TRAIN=${VISION_TRAIN:-60000} VISION_STEPS=${VISION_STEPS:-6000} \
  TARGET_STEPS=${TARGET_STEPS:-3000} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-3000} \
  TARGET_TIME=${TARGET_TIME:-00:00:05:30} LIMIT=${LIMIT:-555} \
  bash .gpu/s31c1.sh
