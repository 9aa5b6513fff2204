# session 9, call 1 (one H200, fresh; the x2 machine was not lent): the headline train phase with the new Sparrow
# recipe (IVSB off, 4 MTP steps, 1:50 for the Sparrow stage), and the held-out set for the anatomy.
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h10; X=$PWD/runs/x10; mkdir -p $X $H
OUT=$H PHASES=train WORKERS=12 FIGURES_LIMIT=20 SPARROW_TIME=00:00:01:50 timeout 560 bash benchmarks/headline_gpu.sh > $X/train.log 2>&1
echo "train rc $?" >> $X/train.log; date
grep -E "^==|rc |precision|tau|^   [0-9]+ s" $X/train.log | tail -16
cd $X && tar czf $OUT/x10.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h10train.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' . ; ls -la $OUT
