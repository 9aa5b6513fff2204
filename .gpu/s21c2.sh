# template, session 21 calls 2 and 3 (warm, each within 30 s of the previous return): issue 4's release-size LLaVA-OV
# target with the committed one's size and the GPU-scale target's head width: 6 layers at hidden 192 as 3 heads of 64
# (1 key/value head) instead of 6 heads of 32 (2 key/value heads), the same 5.96M parameters (RESULTS 27.3: is the
# head width what the motion questions need?). Everything else as s20c2.sh: 3000 steps over the two calls,
# validated every 200 steps. After s21c1.sh on the same machine, its pretrained tower (the same h256 config; a LLaVA-OV
# tower does not depend on the language model's width) is copied in, so both targets share it and call 2 saves ~70 s.
#   call 2: bash .gpu/s21c2.sh   data, tower 6000 steps (~70 s), SFT steps 0 -> 1700, then "paused" (train rc 3)
#   call 3: bash .gpu/s21c2.sh   SFT steps 1700 -> 3000, export, Sparrow 1:30, figures
if [[ -f runs/r21-h256/vision/tower.safetensors && ! -d runs/r21-heads64/vision ]]; then
  mkdir -p runs/r21-heads64 && cp -r runs/r21-h256/vision runs/r21-heads64/
fi
RUN=r21-heads64 RELEASE_TOWER=h256 EXPORT_DTYPE=bfloat16 MCQ_LIMIT=${MCQ_LIMIT:-400} VAL_EVERY=${VAL_EVERY:-200} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.num_heads 3 --model.init_args.arch.num_kv_heads 1"} \
  TARGET_STEPS=${TARGET_STEPS:-3000} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-1700} TARGET_TIME=${TARGET_TIME:-00:00:10:30} \
  SPARROW_STEPS=${SPARROW_STEPS:-1000} SPARROW_TIME=${SPARROW_TIME:-00:00:01:30} LIMIT=${LIMIT:-560} bash .gpu/s15c3.sh
