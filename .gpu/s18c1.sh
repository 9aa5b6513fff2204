# template, session 18 call 1 (fresh, one H200): issue 4's Qwen2.5-VL release pair, which has never finished on the
# GPU. Session 17's throughput probe (RESULTS 24.3) trained it at 278 ms a step; since then the SFT step computes the
# M-RoPE positions and the tower's indices without transformers' per-row loops (24.4). This call trains the pair
# as s15c3.sh does (its Qwen tower pretrained and frozen, target and draft VLM side by side, then the Sparrow draft),
# then times one SFT step three ways on the H200 (transformers / grouped attention / grouped + batched positions).
#   call 1: bash .gpu/s18c1.sh        (~540 s)
# The exported pair (target and draft VLM in bfloat16, ~9 + ~1 MB, so it fits beside the LLaVA-OV releases) comes back
# in 15 MB parts (r15-releases.tgz.part-*); its figures are measured on CPU afterwards.
FAMILY=qwen2.5-vl EXPORT_DTYPE=bfloat16 LIMIT=${LIMIT:-470} bash .gpu/s15c3.sh
source .gpu/setup.sh >/dev/null
timeout 70 python3 benchmarks/qwen_sft_step_speed.py --data runs/h15/synthvid --device cuda --batch 128 --steps 10 \
  --out $OUT/qwen_sft_step.json 2>&1 | grep -v -i warn | tail -6
