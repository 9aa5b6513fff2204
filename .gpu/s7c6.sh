# session 7, call 3 (x2, warm): DDP 1 vs 2 GPUs (the headline's Sparrow distillation, batch 512 per device).
test -f runs/h8/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h8
OUT_=$OUT; OUT=$H PHASES=ddp DDP_BATCH=512 DDP_STEPS=45 DDP_WARMUP=12 timeout 285 bash benchmarks/headline_gpu.sh > $OUT_/ddp.log 2>&1; echo "ddp rc $?" >> $OUT_/ddp.log
OUT=$OUT_; grep -v -i warn $OUT/ddp.log | tail -n 20; date
rm -rf $H/ddp/devices*/checkpoints
cd $H && tar czf $OUT/c3.tgz --exclude='synthvid' --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.npz' --exclude='frames' ddp headline.json figures.json 2>/dev/null; ls -la $OUT
