#!/usr/bin/env bash
# Train the SynthVid testbed on the GPU machine, self-contained: generate SynthVid, train the
# >=24-layer LLaVA-OV target (caption style alpha) and the 2-layer draft VLM (style beta) with the
# recipes configs/train/synthvid-{target,draft}-gpu.yaml, export both to $OUT, and print figures
# (fact-judge precision/recall, MCQ accuracy, draft tau, filler/visual disagreement, training time
# and tokens/s). Run from the repository root with the venv active (datasets, decord and
# jsonargparse must be installed there from wheels: the GPU machine reaches no registry).
#
#   OUT=/path/to/out bash benchmarks/train_testbed_gpu.sh
#
# Knobs (environment): OUT, NUM_VIDEOS (20000), TARGET_STEPS (6000), DRAFT_STEPS (3000), DEVICES (1),
# EVAL_LIMIT (200), WORKERS (16). SMOKE=1 runs the same pipeline at toy size on CPU in about a
# minute (what the CPU tests of this script use).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
VIDSPEC=${VIDSPEC:-vidspec}
OUT=${OUT:-runs/testbed-gpu}
NUM_VIDEOS=${NUM_VIDEOS:-20000}
TARGET_STEPS=${TARGET_STEPS:-6000}
DRAFT_STEPS=${DRAFT_STEPS:-3000}
DEVICES=${DEVICES:-1}
EVAL_LIMIT=${EVAL_LIMIT:-200}
WORKERS=${WORKERS:-16}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA="$OUT/synthvid"

EXTRA=()
DATA_ARGS=(--preset default --frames 16 --size 112x112)
if [[ "${SMOKE:-0}" == "1" ]]; then
  NUM_VIDEOS=8; TARGET_STEPS=2; DRAFT_STEPS=2; EVAL_LIMIT=2; WORKERS=1
  DATA_ARGS=(--preset easy --frames 8 --size 64x64)
  EXTRA=(--trainer.accelerator cpu --trainer.precision 32-true --trainer.limit_val_batches 0
         --model.init_args.arch.num_layers 1 --model.init_args.arch.hidden_size 64
         --model.init_args.arch.vision_layers 1 --model.init_args.arch.vision_hidden_size 32
         --model.init_args.arch.image_size 56 --model.init_args.max_frames 4
         --data.batch_size 2 --data.num_workers 0)
fi

echo "== SynthVid: $NUM_VIDEOS videos -> $DATA"
if [[ ! -f "$DATA/synthvid.json" ]]; then
  $VIDSPEC data synthvid --out "$DATA" --num-videos "$NUM_VIDEOS" --seed 0 "${DATA_ARGS[@]}" \
    --styles alpha:1,beta:1 --captions-per-video 2 --workers "$WORKERS" --no-progress true
fi

train() {  # name steps
  local name=$1 steps=$2 run="$OUT/runs/$1"
  echo "== train $name ($steps steps, $DEVICES device(s))"
  local start=$(date +%s)
  $VIDSPEC train fit --config "configs/train/$name.yaml" \
    --data.path "$DATA" --model.init_args.tokenizer "$DATA/tokenizer" --data.frame_cache "$DATA/frames" \
    --trainer.max_steps "$steps" --trainer.devices "$DEVICES" \
    --trainer.default_root_dir "$run" --trainer.logger.init_args.save_dir "$run" \
    --checkpoint.dirpath "$run/checkpoints" "${EXTRA[@]}"
  echo "$(( $(date +%s) - start ))" > "$run/train_seconds"
  $VIDSPEC export --ckpt "$run/checkpoints/last.ckpt" --out "$OUT/releases/$name" --overwrite true
}

train synthvid-target-gpu "$TARGET_STEPS"
train synthvid-draft-gpu "$DRAFT_STEPS"

echo "== figures"
$PY benchmarks/train_testbed.py --data "$DATA" --target "$OUT/releases/synthvid-target-gpu" \
  --draft "$OUT/releases/synthvid-draft-gpu" --limit "$EVAL_LIMIT" --out "$OUT/figures.json" > /dev/null
$PY - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
fig = json.loads((out / "figures.json").read_text())
for name in ("synthvid-target-gpu", "synthvid-draft-gpu"):
    run = out / "runs" / name
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    tps = [r["train/tokens_per_s"] for r in recs if "train/tokens_per_s" in r]
    loss = [r["train/loss"] for r in recs if "train/loss" in r]
    val = [r["val/loss"] for r in recs if "val/loss" in r]
    fig.setdefault("training", {})[name] = {
        "seconds": int((run / "train_seconds").read_text()), "steps": len(loss),
        "final_train_loss": loss[-1] if loss else None, "final_val_loss": val[-1] if val else None,
        "median_tokens_per_s": sorted(tps)[len(tps) // 2] if tps else None,
    }
(out / "figures.json").write_text(json.dumps(fig, indent=2) + "\n")
c, m, d = fig["captions"], fig["mcq"], fig.get("draft", {})
print(f"target: precision {c['precision']} recall {c['recall']} per-category {c['per_category']}")
print(f"target: MCQ accuracy {m['accuracy']} ({m['questions']} questions)")
print(f"draft:  tau {d.get('tau')} lossless {d.get('lossless')} disagreement {d.get('disagreement')}")
print(json.dumps(fig["training"], indent=2))
print(f"figures: {out / 'figures.json'}")
PYEOF
