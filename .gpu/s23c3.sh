# template, call 3 of the long-draft A/B (warm, within 30 s of call 2's return; calls 1 and 2: `LONG_LIMIT=30
# FIGURES_LIMIT=2 SPARROW_TIME=00:00:00:15 bash .gpu/s17c1.sh`, then `STAGES=target LIMIT=585 LONG_LIMIT=30 bash
# .gpu/s17c2.sh`). RESULTS 29: the long bar moves between retrainings by more than its margin, so two draft recipes
# are compared on one long target and the same 30 videos:
#   A: the long Sparrow distilled on 8-frame clips (the recipe of RESULTS 21.1 and 24.2; ~90 s);
#   B: A continued on the target's long inputs (frame repeats up to 192; B_AUGMENT) as a fine-tune: peak LR B_LR
#      (3e-4, A's final LR) over B_STEPS steps (520, ~0.12 s a step since RESULTS 30.5), inside B_TIME (2:20).
#      Session 23 ran B at A's peak LR (3e-3) on a schedule max_time cut: B lost tau (RESULTS 30). Session 24 ran
#      300 and 520 steps at 3e-4 (`LIMIT=585 bash .gpu/s23c3.sh` then `B_NAME=long-sparrow-ft2 B_LR=3e-4 B_STEPS=520
#      B_TIME=00:00:02:20 PROFILE=0 LIMIT=445 bash .gpu/s23c3.sh`, at 4cb8292, whose defaults were 300 steps in
#      2:30): ratios 0.900 and 0.964, tau higher than A's at both lengths (RESULTS 31.1); the 520-step one is the
#      headline's `sparrow-ft` stage now.
# Then benchmarks/long_ab.py: AR and A, then B against the same AR decodes, at 64 and 1536 frames, in one process
# (one read of each video, one FastTarget; 180-235 s in session 24), and last, each only if time is left, the step
# profile (PROFILE=1, ~60 s), the position-offset check (~20 s) and the GPU test of RESULTS 30.5 (~20 s). The runs resume.
# A_NAME (long-sparrow) puts another release on A's side, so a fourth call can compare two fine-tunes. The control
# that session 24 lacked (is it the long inputs, or only 520 more steps?), ~300 s, once long-sparrow-ft exists (this
# script's defaults, or the headline's `sparrow-ft` stage: `STAGES=sparrow,sparrow-ft,eval ... bash .gpu/s17c2.sh`):
# A_NAME=long-sparrow-ft B_NAME=long-sparrow-clipft B_AUGMENT= B_TIME=00:00:01:30 LIMIT=<left - 20> bash .gpu/s23c3.sh
#   call 3: LIMIT=<seconds left - 20, at most 585> bash .gpu/s23c3.sh
test -f runs/h17/releases/long-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/setup.sh; date
H=$PWD/runs/h17; X=$OUT/x23; mkdir -p $X
END=$(( $(date +%s) + ${LIMIT:-560} ))
left() { echo $(( END - $(date +%s) )); }
long() {  # the headline's long pass, Sparrow stage only
  OUT=$H PHASES=eval EVAL_PARTS=long WORKERS=12 LONG_STAGES=sparrow LONG_FRAMES=1536 LONG_LIMIT=${LONG_LIMIT:-30} \
    LONG_TRAIN=1 timeout $(left) bash benchmarks/headline_gpu.sh "$@"
}
long > $X/a.log 2>&1; echo "A rc $?" >> $X/a.log
A=${A_NAME:-long-sparrow}; B=${B_NAME:-long-sparrow-ft}
LONG_SPARROW_NAME=$B LONG_SPARROW_TIME=${B_TIME:-00:00:02:20} LONG_SPARROW_STEPS=${B_STEPS:-520} \
  LONG_SPARROW_AUGMENT="${B_AUGMENT---data.frame_repeat [1,8,64,192,192] --data.frame_budget 3072} --model.init_args.init_from $H/releases/long-sparrow --model.init_args.optim.lr ${B_LR:-3e-4}" \
  long > $X/$B.log 2>&1; echo "B rc $?" >> $X/$B.log
grep -hE "^==|rc |learning-rate schedule" $X/a.log $X/$B.log $H/runs/$B/train.log
timeout $(left) python3 benchmarks/long_ab.py --target $H/releases/long-target --sparrow-a $H/releases/$A \
  --sparrow-b $H/releases/$B --data $H/synthvid-long1536 --frames 64,1536 --limit ${LONG_LIMIT:-30} \
  --methods-a ${METHODS_A:-ar,sparrow} --device cuda --engine fast --out $H/long-ab-$B > $X/ab-$B.log 2>&1
echo "ab rc $?" >> $X/ab-$B.log; date
grep -v -i warn $X/ab-$B.log | grep -E "^\||B - A|misses|rc |A done|warm-up" | tail -20
cd $H && tar czf $OUT/h23ab-$B.tgz --exclude='*.ckpt' --exclude='*.safetensors' --exclude='checkpoints' --exclude='tb' \
  long-ab-$B runs/$A runs/$B releases/$A/manifest.json releases/$B/manifest.json
ls -la $OUT
# Last, after the results are packed (a call cut here loses only this): where a distillation step's time goes on
# the long inputs, ~60 s; PROFILE=1 runs it (session 24 did: RESULTS 31.3).
if [[ "${PROFILE:-0}" == "1" && $(left) -gt 75 ]]; then
  cd "$H/../.." && timeout $(( $(left) - 5 )) python3 benchmarks/sparrow_step_profile.py --target $H/releases/long-target \
    --data $H/synthvid --shapes 1x16,64x6,192x2 --steps 4 --device cuda --out $OUT/sparrow_step_profile.json 2>&1 \
    | grep -v -i warn | tail -6
fi
# And whether draft A's acceptance moves when only its position ids after the video do (RESULTS 30.4: the committed
# release draft's does not, on CPU), ~20 s.
if [[ $(left) -gt 30 ]]; then
  cd "$H/../.." && timeout $(( $(left) - 5 )) python3 benchmarks/sparrow_position_offset.py --target $H/releases/long-target \
    --sparrow $H/releases/long-sparrow --data $H/synthvid --offsets 0,1024,4096,25000 --limit 64 --device cuda \
    --out $OUT/position_offset.json 2>&1 | grep -v -i warn | tail -7
fi
# And the GPU check of RESULTS 30.5's cheaper step (the same loss as the old path under bf16 autocast), ~20 s.
if [[ $(left) -gt 30 ]]; then
  cd "$H/../.." && timeout $(( $(left) - 5 )) python3 -m pytest -q -m gpu packages/draft_training/tests/test_length_augment.py \
    -p no:cacheprovider 2>&1 | tail -3
fi
