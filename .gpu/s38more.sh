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
# FINETUNE_MIX=sft (train_releases_gpu.sh) is that mixture, batch and LR; session 38 spelt them out as FINETUNE_EXTRA,
# FINETUNE_BATCH and FINETUNE_LR, which give the same training config. The calls run in .gpu/s38ft.sh (`more`).
exec bash .gpu/s38ft.sh more
