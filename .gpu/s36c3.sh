# session 36, call 3 (warm, within 30 s of call 2's return): the GPU-scale target's figures on the device, after
# `bash .gpu/s28c2.sh` (call 1) and `FIGURES=0 bash .gpu/s28c2.sh` (call 2) left its releases in runs/r28-gpu.
# Issue 4's GPU-scale bar (precision >= 0.98, MCQ >= 0.95) on 150 validation captions and 400 questions (session 18
# had 60 of each), then on the seed-1 held-out set (90 captions and questions), rendered here (300 videos, ~5 s).
# Split from call 2 because call 2's SFT steps, export and Sparrow take ~450 s, and the figures ~200 s more.
#   bash .gpu/s36c3.sh          writes $OUT/figures_val.json, $OUT/figures_heldout.json and their logs
# TAU=0 (session 37): the target's figures alone (precision, MCQ, teacher-forced words), no draft VLM or Sparrow tau
# (a caption then costs one AR pass, not four), so they fit in call 2 after `FIGURES=0 STOP_AFTER=finetune`.
source .gpu/setup.sh; date
R=$PWD/runs/${RUN:-r28-gpu}; D=$PWD/runs/h15/synthvid; H=$PWD/runs/h15/heldout
REL=$R/releases
NEEDED=($REL/synthvid-target); TAU_ARGS=()
if [[ "${TAU:-1}" != 0 ]]; then
  NEEDED+=($REL/sparrow-synthvid); TAU_ARGS=(--draft $PWD/data/releases/synthvid-draft --sparrow $REL/sparrow-synthvid)
fi
for r in "${NEEDED[@]}"; do
  [[ -f $r/manifest.json ]] || { echo "s36c3: no exported $(basename $r) in $REL (run call 2 first)"; exit 2; }
done
figures() {  # name data train_testbed-args...: figures_<name>.json and its log under $OUT
  local name=$1 data=$2; shift 2
  python3 benchmarks/train_testbed.py --data $data --target $REL/synthvid-target "${TAU_ARGS[@]}" \
    --device cuda --out $OUT/figures_$name.json "$@" 2>&1 | grep -v -i warn \
    | tee $OUT/figures_$name.log | tail -c 2500
  date
}
figures val $D --limit ${EVAL_LIMIT:-150} --mcq-limit ${MCQ_LIMIT:-400}
if [[ "${HELDOUT:-1}" == 1 ]]; then
  [[ -f $H/synthvid.json ]] || vidspec data synthvid --out $H --num-videos 300 --seed 1 --preset easy --frames 8 \
    --size 64x64 --styles alpha:1,beta:1 --captions-per-video 2 --workers 12 --no-progress true
  figures heldout $H --limit 90
fi
date; nvidia-smi --query-gpu=name --format=csv,noheader
