# template, session 19 call 1 (fresh, one H200): issue 4's Qwen2.5-VL release pair, with the schedule that session 18
# showed fits. Session 18 (RESULTS 25.2) trained the pair at 74 ms a target step (900 steps in 72 s, against 278 ms in
# session 17) but stopped the target at 900 steps (precision 0.74, MCQ 0.825: the motions were not learnt yet), and
# its draft VLM's weights went NaN at step 667 in bf16 (training now drops a step with non-finite gradients and names
# the parameter, and export refuses NaN weights). Here: the tower pretrained for 3000 steps as in session 18 (held-out
# shape probe 0.928), the target for 2200 steps under one schedule in its 3:00, the Sparrow draft for 1:30, the draft
# VLM with its from-scratch tower at init std 1/sqrt(64) (train_releases_gpu.sh since RESULTS 25.6).
#   call 1: bash .gpu/s19c1.sh        (~560 s)
# Then (~60 s) the Qwen tower's initial weight scale A/B at the release size (RESULTS 25.3: at hidden 64 on CPU, std
# 1/sqrt(width) learnt shape faster than transformers' 0.02): 1000 pretraining steps each, vision_init_ab.json.
# Bring the releases back as in s15c3.sh (r15-releases.tgz.part-*) and measure them on CPU (docs/RESULTS.md 25.2).
FAMILY=qwen2.5-vl EXPORT_DTYPE=bfloat16 VISION_STEPS=${VISION_STEPS:-3000} TARGET_TIME=${TARGET_TIME:-00:00:03:00} \
  TARGET_STEPS=${TARGET_STEPS:-2200} DRAFT_STEPS=${DRAFT_STEPS:-2400} SPARROW_TIME=${SPARROW_TIME:-00:00:01:30} \
  SPARROW_STEPS=${SPARROW_STEPS:-1000} LIMIT=${LIMIT:-490} bash .gpu/s15c3.sh
source .gpu/setup.sh >/dev/null
timeout 80 python3 benchmarks/vision_learnability.py --family qwen2.5-vl --lm-hidden 192 --device cuda --workers 12 \
  --configs h128_l4_p8_lr5e-4_b128_n4,h128_l4_p8_lr5e-4_b128_n4_is0.088 --steps 1000 --every 250 \
  --out $OUT/vision_init_ab 2>&1 | grep -v -i warn | tail -5
