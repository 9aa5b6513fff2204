# session 7, call B (x2, warm after call A): GPU0 the headline eval (device rounds unless call A's device-round
# GPU tests failed); GPU1 HF generate e2e into the same run, then the K / tree sweep and the round profile on it.
test -f runs/h8/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h8; X=$PWD/runs/x8
EXTRA="--lam 1.0 --predicate prob --eps 0.3"
grep -q "tests rc 0" $X/tests.log || { EXTRA="$EXTRA --device_rounds false"; echo "device-round tests failed: host rounds"; }
(export CUDA_VISIBLE_DEVICES=1
 mkdir -p $H/eval-hf; timeout 150 python3 benchmarks/hf_generate_e2e.py --data $H/synthvid --target $H/releases/synthvid-target \
   --sparrow $H/releases/sparrow-synthvid --limit 20 --max-new-tokens 64 --device cuda --engine fast --out $H/eval-hf \
   > $OUT/hf.log 2>&1; echo "hf rc $?" >> $OUT/hf.log
 timeout 230 python3 benchmarks/device_rounds_gpu.py --target $H/releases/synthvid-target --sparrow $H/releases/sparrow-synthvid \
   --data $H/synthvid --limit 16 --k 4,5,6,8 --trees 32-6-6,48-8-8 --out $H/rounds > $OUT/rounds.log 2>&1; echo "rounds rc $?" >> $OUT/rounds.log
 left=$(( 470 - ($(date +%s) - T0) )); echo "rprof gets $left s" >> $OUT/rounds.log
 [ $left -gt 40 ] && timeout $left python3 benchmarks/round_profile_gpu.py --target $H/releases/synthvid-target \
   --sparrow $H/releases/sparrow-synthvid --draft data/releases/synthvid-draft --data $H/synthvid --limit 10 \
   --methods ar,sparrow,tree-sparrow --tree 32-6-6 --out $H/rp > $OUT/rp.log 2>&1; echo "rp rc $?" >> $OUT/rp.log) &
(export CUDA_VISIBLE_DEVICES=0; sleep 1
 OUT=$H PHASES=train,eval WORKERS=12 EVAL_LIMIT=40 MCQ_LIMIT=24 HF_LIMIT=20 EVAL_EXTRA="$EXTRA" timeout 470 bash benchmarks/headline_gpu.sh > $OUT/eval.log 2>&1
 echo "eval rc $?" >> $OUT/eval.log) &
wait; date
grep -v -i warn $OUT/hf.log | tail -6; grep -v -i warn $OUT/rounds.log | tail -16; grep -v -i warn $OUT/rp.log | tail -4
grep -v -i warn $OUT/eval.log | grep -v "^\s*$" | tail -36
cd $H && tar czf $OUT/c5.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' --exclude='trace-*' . ; ls -la $OUT
