# session 38, call 2 (after `bash .gpu/s38ft.sh prep` on the same warm machine; carry
# [runs/r37-gpu/releases/synthvid-target, .gitsha]): the MCQ fine-tune (s38ft.sh) left the GPU-scale target's motion
# letters where the SFT had them (0.845 -> 0.825 on 400 questions, CPU). Its SFT's validation motion was still rising
# when its LR had decayed (0.44 / 0.76 / 0.88 at steps 1600 / 2000 / 2400), so two more arms from the same SFT export,
# each 800 steps of the SFT's own mixture (captions, MCQ, open QA; style alpha) at batch 128, LR 3e-4 re-warmed over
# 10 steps, cosine to 10%:
#   more      that alone (what more SFT steps do)
#   more-aug  with --data.reverse_time 0.5 (RESULTS 40.5: half the clips played backwards; the SFT confuses left,
#             up and down, and a clip played backwards swaps left and right, up and down). Written with
#             --data.time_crop 0.5 too, which LLaVA-OV batches refuse (clips of one length only; exit 2 in 19 s), so
#             session 38 ran it with reverse_time alone, as a call of its own: ARMS=more-aug.
# The first arm's weights come back in 15 MB parts (r38-more.tgz.part-*); the second's wait in /tmp/r38-parts for
# call 3: `cp /tmp/r38-parts/* $OUT/` (a call returns at most ~64 MB). Then, per arm,
# `cat r38-ARM.tgz.part-* | tar xzf - -C runs` and the figures on CPU.
source .gpu/setup.sh; date
D=$PWD/runs/h15/synthvid; SFT=${SFT:-$PWD/runs/r37-gpu/releases/synthvid-target}
[[ -f $D/synthvid.json ]] || { echo "s38more: no SynthVid set in $D (run 'bash .gpu/s38ft.sh prep' first)"; exit 2; }
mkdir -p /tmp/r38-parts; first=1
for arm in ${ARMS:-more more-aug}; do
  EXTRA="--data.tables=[.,mcq,openqa] --data.caption_styles=[alpha]"
  [[ $arm == more-aug ]] && EXTRA+=" --data.reverse_time 0.5"
  R=$PWD/runs/r38-$arm; mkdir -p $R
  OUT=$R PROFILE=gpu DATA=$D EXPORT_DTYPE=bfloat16 FINETUNE_STEPS=800 FINETUNE_BATCH=128 FINETUNE_LR=3.0e-4 \
    FINETUNE_TIME=${ARM_TIME:-00:00:04:00} FINETUNE_FROM=$SFT FINETUNE_EXTRA="$EXTRA" STOP_AFTER=finetune VAL_EVERY=400 \
    WORKERS=12 VIDSPEC=vidspec PY=python3 timeout ${LIMIT:-285} bash benchmarks/train_releases_gpu.sh 2>&1 \
    | grep -v -i warn > $R/train.log
  echo "$arm rc ${PIPESTATUS[0]}" >> $R/train.log; tail -4 $R/train.log; date
  dest=$OUT; (( first )) || dest=/tmp/r38-parts; first=0
  (cd runs && tar czf - --exclude='*.ckpt' --exclude='events.out*' r38-$arm | split -b 15m - $dest/r38-$arm.tgz.part-)
done
ls -la $OUT /tmp/r38-parts; nvidia-smi --query-gpu=name --format=csv,noheader
