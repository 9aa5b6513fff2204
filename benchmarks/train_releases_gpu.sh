#!/usr/bin/env bash
# Train the small committed RELEASES (LLaVA-OV testbed target, draft VLM, Sparrow draft) on one GPU,
# each stage bounded by wall time so the whole job fits one device call (~9 minutes on an H200):
#
#   SynthVid (easy preset, 8 frames of 64x64)  ->  target (style alpha)  ->  draft VLM (style beta)
#   ->  Sparrow draft distilled from the target  ->  export all three  ->  figures (fact judge, MCQ, tau)
#
# Run from the repository root with the vidspec packages importable:
#   OUT=/path/out bash benchmarks/train_releases_gpu.sh
# Knobs: OUT, NUM_VIDEOS (6000), TARGET_TIME (00:00:03:30), DRAFT_TIME (00:00:01:00), SPARROW_TIME
# (00:00:01:00), EVAL_LIMIT (100), WORKERS (8), ACCEL (gpu), PRECISION (bf16-mixed).
# SMOKE=1 runs the same steps at toy size on the CPU (a minute or two), which is how it is tested.
# The releases land in $OUT/releases/{synthvid-target,synthvid-draft,sparrow-synthvid}; copy them
# to data/releases/ to commit them.
set -euo pipefail
cd "$(dirname "$0")/.."
VIDSPEC=${VIDSPEC:-vidspec}
PY=${PY:-python3}
OUT=${OUT:-runs/releases-gpu}
NUM_VIDEOS=${NUM_VIDEOS:-6000}
TARGET_TIME=${TARGET_TIME:-00:00:03:30}
DRAFT_TIME=${DRAFT_TIME:-00:00:01:00}
SPARROW_TIME=${SPARROW_TIME:-00:00:01:00}
EVAL_LIMIT=${EVAL_LIMIT:-100}
WORKERS=${WORKERS:-8}
ACCEL=${ACCEL:-gpu}
PRECISION=${PRECISION:-bf16-mixed}
BATCH=${BATCH:-64}
MAX_STEPS=${MAX_STEPS:-100000}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA="$OUT/synthvid"
TARGET_ARCH=(--model.init_args.arch.hidden_size 192 --model.init_args.arch.num_layers 6
             --model.init_args.arch.num_heads 6 --model.init_args.arch.num_kv_heads 2)
if [[ "${SMOKE:-0}" == "1" ]]; then
  NUM_VIDEOS=12; EVAL_LIMIT=2; WORKERS=1; ACCEL=cpu; PRECISION=32-true; BATCH=4; MAX_STEPS=3
  TARGET_ARCH=(--model.init_args.arch.hidden_size 64 --model.init_args.arch.num_layers 2
               --model.init_args.arch.num_heads 4 --model.init_args.arch.num_kv_heads 2)
fi
COMMON=(--trainer.accelerator "$ACCEL" --trainer.precision "$PRECISION" --trainer.max_steps "$MAX_STEPS"
        --data.path "$DATA" --data.frame_cache "$DATA/frames" --data.batch_size "$BATCH"
        --data.num_workers "$WORKERS" --trainer.val_check_interval 1.0 --trainer.limit_val_batches 2
        --trainer.check_val_every_n_epoch 1000)

stamp() { date +%s; }
t0=$(stamp)
echo "== SynthVid: $NUM_VIDEOS videos -> $DATA"
$VIDSPEC data synthvid --out "$DATA" --num-videos "$NUM_VIDEOS" --seed 0 --preset easy --frames 8 --size 64x64 \
  --styles alpha:1,beta:1 --captions-per-video 2 --workers "$WORKERS" --no-progress true
echo "   $(( $(stamp) - t0 )) s"

train() {  # name recipe max_time extra...
  local name=$1 recipe=$2 max_time=$3; shift 3
  local run="$OUT/runs/$name" start; start=$(stamp)
  echo "== train $name ($recipe, at most $max_time)"
  $VIDSPEC train fit --config "configs/train/$recipe.yaml" "${COMMON[@]}" --trainer.max_time "$max_time" \
    --trainer.default_root_dir "$run" --trainer.logger.init_args.save_dir "$run" \
    --checkpoint.dirpath "$run/checkpoints" "$@"
  echo "$(( $(stamp) - start ))" > "$run/train_seconds"
  $VIDSPEC export --ckpt "$run/checkpoints/last.ckpt" --out "$OUT/releases/$name" --overwrite true
  echo "   $(( $(stamp) - start )) s"
}

train synthvid-target synthvid-target-cpu "$TARGET_TIME" --model.init_args.tokenizer "$DATA/tokenizer" "${TARGET_ARCH[@]}"
train synthvid-draft synthvid-draft-cpu "$DRAFT_TIME" --model.init_args.tokenizer "$DATA/tokenizer"
# Sparrow: distilled from the released target on the target's own caption style (KL to its outputs).
train sparrow-synthvid sparrow-tiny-cpu "$SPARROW_TIME" --model.init_args.target "$OUT/releases/synthvid-target" \
  --model.init_args.target_dtype float32 --data.caption_styles '[alpha]' --data.tables '["."]'

echo "== figures"
$PY benchmarks/train_testbed.py --data "$DATA" --target "$OUT/releases/synthvid-target" \
  --draft "$OUT/releases/synthvid-draft" --sparrow "$OUT/releases/sparrow-synthvid" --limit "$EVAL_LIMIT" --out "$OUT/figures.json" | tail -c 3000
echo "== total $(( $(stamp) - t0 )) s"
