# session 8, call 3 (x2, warm or fresh): longer Sparrow chains on the trained testbed (the fused chain made a
# draft step ~36 us): GPU0 the caption eval of ar + sparrow at K = 12 (40 samples, the headline's protocol);
# GPU1 the device-round sweep at K = 8, 10, 12, 16.
test -f runs/h9/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date
H=$PWD/runs/h9; X=$PWD/runs/x9
(export CUDA_VISIBLE_DEVICES=1
 timeout 200 python3 benchmarks/device_rounds_gpu.py --target $H/releases/synthvid-target --sparrow $H/releases/sparrow-synthvid \
   --data $H/synthvid --limit 16 --k 8,10,12,16 --out $H/rounds_k > $X/rounds_k.log 2>&1; echo "rounds rc $?" >> $X/rounds_k.log) &
(export CUDA_VISIBLE_DEVICES=0
 timeout 200 $VIDSPEC eval --benchmark synthvid_captions --data $H/synthvid --split validation --target $H/releases/synthvid-target \
   --sparrow $H/releases/sparrow-synthvid --methods ar,sparrow --limit 40 --engine fast --device cuda --max_new_tokens 64 \
   --sparrow_k 12 --no_progress true --out $H/eval-captions-k12 > $X/eval_k12.log 2>&1; echo "eval rc $?" >> $X/eval_k12.log) &
wait; date
grep -v -i warn $X/rounds_k.log | tail -10; grep -v -i warn $X/eval_k12.log | grep -v "^\s*$" | tail -12
cd $H && tar czf $OUT/h9k.tgz rounds_k eval-captions-k12 --exclude='*.png' ; cp $X/rounds_k.log $X/eval_k12.log $OUT/; ls -la $OUT
