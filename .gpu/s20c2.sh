# template, session 20 calls 2 and 3 (warm, each within 30 s of the previous return): issue 4's release-size LLaVA-OV
# target with 10 language layers instead of 6. Session 19's (RESULTS 26.1: h256 tower, 3300 steps) met the precision
# bar (0.960) and missed the MCQ's (0.880) on motion questions alone (0.60 of 103, although its captions state motion
# right; a linear probe finds the motion mostly absent where the letter is predicted, 26.6); the 24-layer GPU-scale
# target answers them all (25.1), so depth is the suspect. 10 layers: 8.03M parameters,
# 16.1 MB in bfloat16 (the tracked tree then ~34.6 MB, with the wheels ~62 MB of the 64 MiB a call carries).
# Everything else as s19c2.sh; the figures on 400 questions, the target validated every 200 steps (VAL_EVERY).
#   call 2: bash .gpu/s20c2.sh   data, tower 6000 steps (~89 s), SFT steps 0 -> 1700, then "paused" (train rc 3)
#   call 3: bash .gpu/s20c2.sh   SFT steps 1700 -> 3000, export, Sparrow 1:30, figures
# At an assumed ~200 ms a step (144 ms at 6 layers in session 19; not measured at 10) the 3000 steps need ~10 min of
# the stage's 10:30 budget (TARGET_TIME spans both calls). Measure on CPU as RESULTS 26.1 did.
RELEASE_TOWER=h256 EXPORT_DTYPE=bfloat16 MCQ_LIMIT=${MCQ_LIMIT:-400} VAL_EVERY=${VAL_EVERY:-200} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.num_layers 10"} TARGET_STEPS=${TARGET_STEPS:-3000} \
  TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-1700} TARGET_TIME=${TARGET_TIME:-00:00:10:30} SPARROW_STEPS=${SPARROW_STEPS:-1000} \
  SPARROW_TIME=${SPARROW_TIME:-00:00:01:30} LIMIT=${LIMIT:-560} bash .gpu/s15c3.sh
