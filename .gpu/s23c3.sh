# template, call 3 of the long-draft A/B (warm, within 30 s of call 2's return; calls 1 and 2: `LONG_LIMIT=30
# FIGURES_LIMIT=2 SPARROW_TIME=00:00:00:15 bash .gpu/s17c1.sh`, then `STAGES=target LIMIT=585 LONG_LIMIT=30 bash
# .gpu/s17c2.sh`). RESULTS 29: the long bar moves between retrainings by more than its margin, so two draft recipes
# are compared on one long target and the same 30 videos:
#   A: the long Sparrow distilled on 8-frame clips (the recipe of RESULTS 21.1 and 24.2; ~90 s);
#   B: A continued on the target's long inputs (frame repeats up to 192, as its fine-tune; B_TIME, ~0.49 s a step).
# Then benchmarks/long_ab.py: AR and A, then B against the same AR decodes, at 64 and 1536 frames, in one process
# (one read of each video, one FastTarget): ~370 s estimated from session 22's stage logs. The runs resume.
#   call 3: LIMIT=<seconds left - 20> bash .gpu/s23c3.sh
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
LONG_SPARROW_NAME=long-sparrow-aug LONG_SPARROW_TIME=${B_TIME:-00:00:01:10} \
  LONG_SPARROW_AUGMENT="--data.frame_repeat [1,8,64,192,192] --data.frame_budget 3072 --model.init_args.init_from $H/releases/long-sparrow" \
  long > $X/b.log 2>&1; echo "B rc $?" >> $X/b.log
grep -hE "^==|rc " $X/a.log $X/b.log
timeout $(left) python3 benchmarks/long_ab.py --target $H/releases/long-target --sparrow-a $H/releases/long-sparrow \
  --sparrow-b $H/releases/long-sparrow-aug --data $H/synthvid-long1536 --frames 64,1536 --limit ${LONG_LIMIT:-30} \
  --methods-a ${METHODS_A:-ar,sparrow} --device cuda --engine fast --out $H/long-ab > $X/ab.log 2>&1
echo "ab rc $?" >> $X/ab.log; date
grep -v -i warn $X/ab.log | grep -E "^\||B - A|misses|rc |A done|warm-up" | tail -20
cd $H && tar czf $OUT/h23ab.tgz --exclude='*.ckpt' --exclude='*.safetensors' --exclude='checkpoints' --exclude='tb' \
  long-ab runs/long-sparrow runs/long-sparrow-aug releases/long-sparrow/manifest.json releases/long-sparrow-aug/manifest.json
ls -la $OUT
