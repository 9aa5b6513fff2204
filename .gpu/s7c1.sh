# session 7, call 1 (x2, fresh): GPU0 trains the headline testbed; GPU1 measures device rounds (chains K 4/6/8,
# trees 32-6-6 and 48-8-8, each device vs host) on the committed release, then the GPU tests, then the round profile.
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h7
(export CUDA_VISIBLE_DEVICES=0; OUT=$H PHASES=train WORKERS=12 timeout 555 bash benchmarks/headline_gpu.sh > $OUT/train.log 2>&1
 echo "train rc $?" >> $OUT/train.log) &
(export CUDA_VISIBLE_DEVICES=1; X=$PWD/runs/x7
 OUT=$X STEPS=rounds bash benchmarks/gpu_extras.sh > $OUT/rounds.log 2>&1
 OUT=$X STEPS=tests bash benchmarks/gpu_extras.sh > $OUT/tests.log 2>&1
 left=$(( 540 - ($(date +%s) - T0) )); echo "rprof gets $left s" >> $OUT/tests.log
 [ $left -gt 40 ] && OUT=$X STEPS=rprof timeout $left bash benchmarks/gpu_extras.sh > $OUT/rprof.log 2>&1) &
wait; date
cat $OUT/rounds.log | grep -v -i warn | tail -22; grep -v -i warn $OUT/tests.log | tail -12; grep -v -i warn $OUT/rprof.log | tail -8
grep -E "^==|rc |figures|precision" $OUT/train.log | tail -20
cd runs/x7 && tar czf $OUT/x7.tgz --exclude='synthvid-heldout' . ; cd - >/dev/null
cd $H && tar czf $OUT/h7train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
