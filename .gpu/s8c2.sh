# session 8, call 2 (x2, warm after call 1): GPU0 the headline eval with Sparrow at K = 8; GPU1 HF generate e2e,
# the round anatomy and the K / tree sweep on the trained testbed. Falls back to the pre-session chain code
# when call 1's kernel-chain GPU tests failed.
test -f runs/h9/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
if ! grep -q "tests rc 0" runs/x9/tests1.log; then
  echo "FALLBACK: call 1's chain tests failed; the fast Sparrow files of b722fe2"
  cp .gpu/old/sparrow.py .gpu/old/lm.py .gpu/old/tree_sparrow_fast.py packages/decoding/src/vidspec/decoding/fast/
fi
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h9; X=$PWD/runs/x9
EXTRA="--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 8"
(export CUDA_VISIBLE_DEVICES=1
 mkdir -p $H/eval-hf; timeout 150 python3 benchmarks/hf_generate_e2e.py --data $H/synthvid --target $H/releases/synthvid-target \
   --sparrow $H/releases/sparrow-synthvid --limit 20 --max-new-tokens 64 --device cuda --engine fast --out $H/eval-hf \
   > $X/hf.log 2>&1; echo "hf rc $?" >> $X/hf.log
 timeout 170 python3 benchmarks/round_anatomy_gpu.py --target $H/releases/synthvid-target --sparrow $H/releases/sparrow-synthvid \
   --data $H/synthvid --limit 16 --k 4,8 --trees 48-8-8 --out $H/anatomy > $X/anatomy_tb.log 2>&1; echo "anatomy rc $?" >> $X/anatomy_tb.log
 left=$(( 475 - ($(date +%s) - T0) )); echo "rounds get $left s" > $X/rounds.log
 [ $left -gt 60 ] && timeout $left python3 benchmarks/device_rounds_gpu.py --target $H/releases/synthvid-target \
   --sparrow $H/releases/sparrow-synthvid --data $H/synthvid --limit 16 --k 4,6,8 --trees 48-8-8 --out $H/rounds >> $X/rounds.log 2>&1
 echo "rounds rc $?" >> $X/rounds.log) &
(export CUDA_VISIBLE_DEVICES=0; sleep 1
 OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="$EXTRA" timeout 480 bash benchmarks/headline_gpu.sh > $X/eval.log 2>&1
 echo "eval rc $?" >> $X/eval.log) &
wait; date
grep -v -i warn $X/hf.log | tail -6; grep -v -i warn $X/anatomy_tb.log | grep -E "^==|target T=(1|9|49) |chain T=(1|32) k=(1|4|8) |growth T=1 depth=8|post depth=8"
grep -v -i warn $X/rounds.log | tail -8
grep -v -i warn $X/eval.log | grep -v "^\s*$" | tail -36
cd $X && tar czf $OUT/x9b.tgz --exclude='held' . ; cd - >/dev/null
cd $H && tar czf $OUT/h9eval.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' . ; ls -la $OUT
