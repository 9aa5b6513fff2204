# template, session 21 call 1 (fresh, one H200): issue 4's release-size LLaVA-OV target at the GPU-scale target's
# width. Release-size targets answer motion questions at 0.44-0.60 in every run of either family (RESULTS 27): 10
# layers instead of 6 did not help (27.2), and on CPU the 6-layer target can compute the motion in the MCQ prompt but
# not bind it to a letter (27.3). The GPU-scale target (24 layers, hidden 256, 4 heads of 64) answers them all (25.1).
# Here: 6 layers at hidden 256 with 4 heads of 64 (8.8M parameters, 17.6 MB in bfloat16: the tracked tree ~36 MB, under
# the 38.4 MB of tests/test_repo_budget.py; no room beside it for a Qwen pair), 2000 SFT steps in this one call (the
# release-size step is ~145 ms whatever the depth, 27.2), validated every 200 steps (val/mcq_acc/motion says whether
# and when motion questions are learnt).
#   call 1: bash .gpu/s21c1.sh        (~540 s)
# Then s21c2.sh twice (warm). Measure on CPU as RESULTS 26.1 did, and read val/mcq_acc/motion in
# runs/synthvid-target/metrics.jsonl of r15runs.tgz.
RUN=r21-h256 RELEASE_TOWER=h256 EXPORT_DTYPE=bfloat16 MCQ_LIMIT=${MCQ_LIMIT:-400} VAL_EVERY=${VAL_EVERY:-200} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.hidden_size 256 --model.init_args.arch.num_heads 4 --model.init_args.arch.num_kv_heads 2"} \
  TARGET_STEPS=${TARGET_STEPS:-2000} TARGET_TIME=${TARGET_TIME:-00:00:05:40} SPARROW_STEPS=${SPARROW_STEPS:-800} \
  SPARROW_TIME=${SPARROW_TIME:-00:00:01:15} LIMIT=${LIMIT:-570} bash .gpu/s15c3.sh
