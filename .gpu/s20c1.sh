# template, session 20 call 1 (fresh, one H200): issue 4's Qwen2.5-VL release pair, third try. Session 19 (RESULTS
# 26.2) trained the target for 2100 steps under a cosine over 2200 at lr 1e-3: its captions learnt motion (precision
# 0.845) but it answered colour questions by position (MCQ colour 0.24, against 0.99 for session 18's 900-step target,
# whose schedule decayed sooner). Here: the target's peak LR halved (LR=5e-4), everything else as s19c1.sh, the figures
# on 400 questions (MCQ_LIMIT), the target validated every 200 steps (VAL_EVERY: val/mcq_acc/colour in its
# metrics.jsonl says whether the colour questions are learnt and when), and no tower-init A/B after the figures
# (session 19's call ran out of time before it).
#   call 1: bash .gpu/s20c1.sh        (~540 s)
# Bring the releases back as s15c3.sh says (r15-releases.tgz.part-*) and measure them on CPU as RESULTS 26.2 did:
#   python benchmarks/train_testbed.py --data DATA --target T --draft D --sparrow S --limit 90 --mcq-limit 400 --device cpu
#   python benchmarks/mcq_teacher_forced.py --data DATA --target T --type colour
FAMILY=qwen2.5-vl EXPORT_DTYPE=bfloat16 LR=${LR:-5.0e-4} MCQ_LIMIT=${MCQ_LIMIT:-400} VAL_EVERY=${VAL_EVERY:-200} VISION_STEPS=${VISION_STEPS:-3000} \
  TARGET_TIME=${TARGET_TIME:-00:00:03:00} TARGET_STEPS=${TARGET_STEPS:-2200} DRAFT_STEPS=${DRAFT_STEPS:-2400} \
  SPARROW_TIME=${SPARROW_TIME:-00:00:01:20} SPARROW_STEPS=${SPARROW_STEPS:-900} LIMIT=${LIMIT:-560} bash .gpu/s15c3.sh
