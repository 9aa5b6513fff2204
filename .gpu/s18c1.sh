# template, session 18 call 1 (fresh, one H200): issue 4's Qwen2.5-VL release pair, which has never finished on the
# GPU. Session 17's throughput probe (RESULTS 24.3) trained it at 278 ms a step; since then the SFT step computes the
# M-RoPE positions and the tower's indices without transformers' per-row loops (24.4). This call trains the pair
# as s15c3.sh does (its Qwen tower pretrained and frozen, target and draft VLM side by side, then the Sparrow draft),
# then times one SFT step three ways on the H200 (transformers / grouped attention / grouped + batched positions).
#   call 1: bash .gpu/s18c1.sh        (~540 s)
# The exported pair (target and draft VLM in bfloat16, ~9 + ~1 MB, so it fits beside the LLaVA-OV releases) comes back
# in 15 MB parts (r15-releases.tgz.part-*); its figures are measured on CPU afterwards.
# Budget (470 s): data ~25 s, Qwen tower pretraining 3000 steps (~130 s at session 17's 43 ms a step; 8000, the h128
# default, would take ~340 s), target SFT 3:00 (900 steps fit if a step is under 200 ms: session 17 measured 278 ms
# before the batched positions), Sparrow 1:00, figures ~40 s.
FAMILY=qwen2.5-vl EXPORT_DTYPE=bfloat16 VISION_STEPS=${VISION_STEPS:-3000} TARGET_TIME=${TARGET_TIME:-00:00:03:00} \
  TARGET_STEPS=${TARGET_STEPS:-900} LIMIT=${LIMIT:-470} bash .gpu/s15c3.sh
source .gpu/setup.sh >/dev/null
timeout 70 python3 benchmarks/qwen_sft_step_speed.py --data runs/h15/synthvid --device cuda --batch 128 --steps 10 \
  --out $OUT/qwen_sft_step.json 2>&1 | grep -v -i warn | tail -6
