# template, session 33: two Qwen2.5-VL release targets side by side on one GPU, on the same SynthVid set and the
# same pretrained tower (60,000 scenes, 6000 steps: RESULTS 38.3), so that one device session tests two levers.
# The tower pretrains on what the target is fed (VISION_EXTRA="--pairs --codec"): the scenes' real frame pairs,
# through H.264. benchmarks/results/session33/tower_shift.py: session 32's tower, pretrained on each end frame twice
# in memory, read shape at 0.93 there and at 0.69 on the codec's (f0, f1) pairs, about the target's 0.75 shape words.
#   a  runs/r31-qwen     16 x 96, MLP 384 (38.3's recipe), its SFT schedule of 2300 steps run to the end
#   b  runs/r33-qwen24   24 x 96, MLP 192: the same size (RESULTS 37.1/37.3), the LLaVA-OV release's depth
# Each is `.gpu/s32c1.sh` (-> s31c1.sh -> s28c1.sh -> s15c3.sh) with its own RUN and OUT; only the depth differs.
# The SFTs of a tiny model leave the GPU mostly idle (38.3: ~114 ms a step, ~140k tokens/s), so two share it.
#   call 1: STOP_AFTER=sft bash .gpu/s33c1.sh   SynthVid, the tower (once), then both SFTs until the call's deadline
#   call 2: FIGURES=0 bash .gpu/s33c1.sh        both SFTs resume from their last checkpoint (every 100 steps) and
#                                               finish, then the MCQ fine-tune (800 steps) and Sparrow of each
# or, with little device time left, one run in one call: ONE_CALL=1 RUNS=a STOP_AFTER=sft bash .gpu/s33c1.sh (the SFT's
# time budget ends it in time for its export; the fine-tune and Sparrow then run on the CPU);
# with carry [".whl-x", ".gitsha", "runs/s30-qwen-draft"] (cp -r SESSION30/releases/synthvid-draft there first).
# The stages are not paused by a step count: speeds side by side are not known, so each run is killed at the call's
# DEADLINE (545 s from the start of this script; session 33's call 1 counted 575 from after the setup and hit the
# call's 600-s limit) and the next call resumes it; TARGET_TIME is the whole stage's
# budget across calls (Lightning restores its elapsed time), set so that it does not end a stage early. The figures
# are left to the CPU (train_testbed.py --device cpu). Everything comes back as s33.tar.part-* (15 MB pieces).
# Session 33 ran it on an H100 (call 1 above, then call 2 as ONE_CALL=1 DEADLINE=500 STOP_AFTER=sft): both SFTs
# finished, and both pairs missed the release bars (RESULTS 39.3).
# Session 34: the same two runs with each frame in a temporal patch of its own (no vision token mixes two frames), a
# tower pretrained on single H.264 frames, and M-RoPE moving one position a frame (RESULTS 40):
#   common="VISION_EXTRA=--codec TARGET_ARCH_EXTRA='--model.init_args.arch.tokens_per_second 4'
#           ADAPTER_OPTIONS='{\"min_pixels\": 4096, \"max_pixels\": 4096, \"frame_per_patch\": true}'"
#   call 1: $common STOP_AFTER=sft bash .gpu/s33c1.sh
#   call 2: $common STOP_AFTER=finetune bash .gpu/s33c1.sh   (the SFTs finish, then the 800-step fine-tunes)
# Both targets named shapes (object precision 0.95) and called 14-18 of 27 still objects moving: the language model
# read where the object is, which in SynthVid's easy world tells the motion (RESULTS 40.3). Next, the same two calls
# with training examples cut to runs of frames and played backwards (data.time_crop, data.reverse_time; RESULTS 40.5),
# so that the first place tells the motion much less and the frames' order has to:
#   aug="--data.time_crop 0.5 --data.reverse_time 0.5"
#   common="VISION_EXTRA=--codec TARGET_ARCH_EXTRA='--model.init_args.arch.tokens_per_second 4 $aug'
#           FINETUNE_EXTRA='$aug' ADAPTER_OPTIONS='{...as above...}'"
# Session 35 ran those two calls (RESULTS 41.1): still objects were called moving as often, and the motion letters
# stayed unbound. What worked was the language model's shape: 16 x 128 with heads of 64 (RESULTS 41.2, the committed
# Qwen2.5-VL release; its command is in data/releases/qwen2.5-vl/README.md).
T0=$(date +%s); source .gpu/setup.sh; date  # the deadline counts from here: a fresh machine's setup takes ~30 s
O=$OUT; DEADLINE=${DEADLINE:-545}
A=runs/r31-qwen; B=runs/r33-qwen24
export TARGET_STEPS=${TARGET_STEPS:-2300} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-2300}
export TARGET_TIME=${TARGET_TIME:-00:00:15:00} VISION_EXTRA=${VISION_EXTRA:---pairs --codec}
if [[ ! -f $A/vision/tower.safetensors ]]; then
  STOP_AFTER=vision OUT=$O/v LIMIT=$(( DEADLINE - ($(date +%s) - T0) )) bash .gpu/s32c1.sh
  rm -f $O/v/r15-releases.tgz.part-*
fi
[[ -f $A/vision/tower.safetensors ]] || { echo "s33c1: no tower in $A/vision"; exit 5; }
mkdir -p $B; [[ -f $B/vision/tower.safetensors ]] || cp -r $A/vision $B/
left=$(( DEADLINE - ($(date +%s) - T0) )); echo "== runs ${RUNS:=a b}: $left s left"
if [[ -n ${ONE_CALL:-} ]]; then  # one call only (little device time left): the SFT stops in time to be exported here
  s=$(( left - 45 )); export TARGET_TIME=$(printf '00:00:%02d:%02d' $(( s / 60 )) $(( s % 60 )))
fi
# Without session 30's draft VLM (runs/s30-qwen-draft, carried), run a trains one in the background (DRAFT empty:
# train_releases_gpu.sh's release profile) and run b's figures use it.
DA=${DRAFT-$PWD/runs/s30-qwen-draft}; DB=$DA
[[ -f $DA/config.json ]] || { DA=; DB=$PWD/$A/releases/synthvid-draft; echo "== no draft VLM carried: run a trains one"; }
for r in $RUNS; do
  case $r in
    a) (DRAFT=$DA OUT=$O/a LIMIT=$left bash .gpu/s32c1.sh) > $O/a.log 2>&1 & ;;
    b) (DRAFT=$DB OUT=$O/b LIMIT=$left RUN=r33-qwen24 TARGET_LAYERS=24 TARGET_FFN=192 bash .gpu/s32c1.sh) > $O/b.log 2>&1 & ;;
  esac
done
wait
for r in $RUNS; do echo "== run $r"; grep -v -i warn $O/$r.log | grep -E "^==|rc |tau|^   [0-9]+ s" | tail -12; done
for r in $A $B; do  # the curves (steps, losses, validation), for the RESULTS entry
  for m in $r/runs/*/metrics.jsonl; do
    [[ -f $m ]] && echo "$m: $(tail -1 $m | cut -c1-60); $(grep '"val/loss"' $m | tail -1)"
  done
done
tar cf - -C $O $(cd $O && ls) | split -b 15m - $O/s33.tar.part- && (cd $O && ls | grep -v '^s33.tar.part-' | xargs rm -rf)
ls -la $O; date
