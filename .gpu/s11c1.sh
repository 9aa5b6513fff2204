# template for session 11, call 1 (fresh, one H200): the headline train phase (~510 s). Timeouts sum below the call's limit.
source .gpu/setup.sh; date
H=$PWD/runs/h12; X=$PWD/runs/x12; mkdir -p $X $H
OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 SPARROW_TIME=00:00:01:50 timeout 555 bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
echo "train rc $?" >> $X/train.log; date
grep -E "^==|rc |precision|tau|^   [0-9]+ s" $X/train.log | tail -16
cd $X && tar czf $OUT/x12.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h12train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
