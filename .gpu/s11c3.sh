# template, session 11 call 3 (warm; NOT RUN YET): issue 9's long-video bar on the testbed. RESULTS 17.5: the
# length augmentation (frame repeat + position stretch) let the CPU release read 4x its longest training sequence.
# 1. fine-tune the testbed target for long inputs (repeat up to 32: 256 slots, ~4.4k tokens; stretch up to 6:
#    the positions of ~1536 frames); 2. distil a Sparrow draft from it; 3. a held-out set of 1536-frame videos
#    (seed 2); 4. ar + sparrow at 64 and 1536 frames (~1.1k and ~26k visual tokens). Timeouts 170+130+60+150 = 510 s.
test -f runs/h12/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h12; X=$OUT/long; mkdir -p $X
timeout 170 $VIDSPEC train fit --config configs/train/synthvid-target-cpu.yaml \
  --model.init_args.init_from $H/releases/synthvid-target --model.init_args.tokenizer $H/releases/synthvid-target \
  --model.init_args.freeze_vision true --data.path $H/synthvid --data.frame_cache $H/synthvid/frames \
  --data.batch_size 16 --data.num_workers 12 --data.frame_repeat '[1,2,4,8,16,32]' --data.position_stretch '[1,2,4,6]' \
  --model.init_args.optim.lr 3.0e-4 --model.init_args.optim.warmup_steps 20 --model.init_args.optim.min_lr_ratio 0.1 \
  --trainer.accelerator gpu --trainer.precision bf16-mixed --trainer.max_steps 1000 --trainer.max_time 00:00:02:10 \
  --trainer.limit_val_batches 0 --trainer.default_root_dir $H/long-target --trainer.logger.init_args.save_dir $H/long-target \
  > $X/target.log 2>&1
$VIDSPEC export --ckpt $H/long-target/checkpoints/last.ckpt --out $H/releases/long-target >> $X/target.log 2>&1
echo "target rc $? at $(( $(date +%s) - T0 )) s" | tee -a $X/target.log
timeout 130 $VIDSPEC train fit --config configs/train/sparrow-tiny-cpu.yaml --model.init_args.target $H/releases/long-target \
  --model.init_args.target_dtype float32 --data.path $H/synthvid --data.frame_cache $H/synthvid/frames \
  --data.caption_styles '[alpha]' --data.tables '["."]' --data.batch_size 64 --data.num_workers 12 \
  --trainer.accelerator gpu --trainer.max_steps 520 --trainer.max_time 00:00:01:40 --trainer.limit_val_batches 0 \
  --trainer.default_root_dir $H/long-sparrow --trainer.logger.init_args.save_dir $H/long-sparrow > $X/sparrow.log 2>&1
$VIDSPEC export --ckpt $H/long-sparrow/checkpoints/last.ckpt --out $H/releases/long-sparrow >> $X/sparrow.log 2>&1
echo "sparrow rc $? at $(( $(date +%s) - T0 )) s" | tee -a $X/sparrow.log
L=$H/synthvid-long1536
[ -f $L/synthvid.json ] || timeout 60 $VIDSPEC data synthvid --out $L --num-videos 10 --seed 2 --preset easy --frames 1536 \
  --size 64x64 --styles alpha:1,beta:1 --captions-per-video 2 --split validation=1 --workers 12 --no-progress true > $X/data.log 2>&1
for F in 64 1536; do
  timeout 75 $VIDSPEC eval --benchmark synthvid_captions --data $L --limit 10 --methods ar,sparrow --frames $F \
    --target $H/releases/long-target --sparrow $H/releases/long-sparrow --engine fast --device cuda --sparrow_k 16 \
    --fast_max_len $(( F * 17 + 1024 )) --out $X/eval-long$F > $X/eval-long$F.log 2>&1
  echo "eval $F rc $? at $(( $(date +%s) - T0 )) s" | tee -a $X/eval-long$F.log; grep "^| " $X/eval-long$F/report.md
done
