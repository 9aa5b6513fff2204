#!/usr/bin/env bash
# The headline run of issue 9 from one command: train the GPU-scale SynthVid testbed, evaluate every
# method side by side on the fast engine, replay the acceptance at 7B shapes, measure DDP scaling,
# and print one summary table (also written to $OUT/headline.json).
#
#   OUT=runs/headline bash benchmarks/headline_gpu.sh                    # every phase, one H200
#   OUT=runs/headline PHASES=ddp bash benchmarks/headline_gpu.sh         # the DDP phase, 2x H200
#   SMOKE=1 OUT=/tmp/hl bash benchmarks/headline_gpu.sh                  # toy size on CPU (~1.5 min)
#
# Phases (PHASES=train,eval,replay,ddp selects; default all). Each is skipped when its outputs exist,
# so a run killed by a time limit is resumed by running the same command again:
#   train   benchmarks/train_releases_gpu.sh PROFILE=gpu: SynthVid (seed 0) -> vision pretraining ->
#           24-layer target -> Sparrow distillation -> releases in $OUT/releases/ + $OUT/figures.json.
#           ~15 min on one H200 (RESULTS 22.1: 2400 target steps in ~10.5 min; sessions 5-14 trained 800
#           in 3:45, TARGET_STEPS=800 TARGET_TIME=00:00:03:45). On 10-minute device calls add
#           TARGET_CALL_STEPS=1300 and run the same command twice (.gpu/s15c1.sh). If it is killed after
#           both releases are exported, the rerun only computes figures.json.
#   eval    vidspec eval --engine fast --device cuda, batch 1, greedy, K = 4, --max_new_tokens 64:
#           SynthVid captions -> $OUT/eval-captions, SynthVid MCQ -> $OUT/eval-mcq, methods
#           ar,sd,lvspec,lvspec-pst,fly,sparrow,sparrow-lvspec-pst,tree-sparrow (48-8-8), EVAL_LIMIT samples each; with
#           LONG_FRAMES=N > 0 also LONG_METHODS (ar,sparrow) on a held-out long set (seed 2, N frames per video) read
#           at LONG_SHORT_FRAMES and at N frames -> $OUT/eval-long<F> (17 visual tokens per 64x64
#           frame on the LLaVA-OV testbed: 64 frames ~1.1k, 1536 frames ~26k). A few minutes on one
#           H200 (mostly model loading and graph capture; the decodes themselves take seconds).
#           Each folder is a `vidspec eval` run, which also resumes by itself.
#   replay  benchmarks/replay_7b.py on $OUT/eval-captions/records.jsonl -> $OUT/replay (~3.5 min).
#   ddp     benchmarks/ddp_scaling.py --devices 1,2: the Sparrow distillation of the train phase
#           (the release target of the train phase, or data/releases/synthvid-target when this
#           machine has none) on 1 and 2 GPUs -> $OUT/ddp. ~4-5 min, an estimate: RESULTS section 8's
#           runs took 55 + 76 s on the 4.2M target, the 24-layer target's steps are longer, and a fresh
#           machine first regenerates the data. Skipped with a message when fewer than 2 GPUs are visible.
#
# On the lent GPU machine (30 minutes held, 10 minutes per call) each phase is its own call, and
# the resumability above is what makes that work: PHASES=train, then PHASES=eval, then
# PHASES=replay on the H200, then PHASES=ddp on the 2x H200 machine (a fresh machine: it
# regenerates the SynthVid set, same seed). There $OUT is the tool's return folder, emptied each
# call: point this script's OUT at a path inside the checkout that persists between calls, e.g.
# `OUT=runs/headline PHASES=eval bash benchmarks/headline_gpu.sh; cp -r runs/headline/eval-* "$OUT"/`,
# and set VIDSPEC_GIT_SHA (the machine's .git copy may name a stale commit).
#
# Determinism: seed 0 everywhere (SynthVid data, seed_everything of every recipe; the long set is
# seed 2, held out), greedy decoding. Training stops on wall time (TARGET_TIME, SPARROW_TIME) and
# GPU kernels are not bitwise deterministic, so the trained models and figures reproduce to within
# run-to-run noise, not bit for bit.
#
# Knobs: OUT (runs/headline), PHASES, DATA ($OUT/synthvid), DRAFT (the draft VLM for sd, lvspec,
# lvspec-pst, fly; default the committed data/releases/synthvid-draft, which uses the same SynthVid
# tokenizer as a freshly trained target; DRAFT=none leaves those four methods out), EVAL_LIMIT (40),
# MCQ_LIMIT (EVAL_LIMIT), HF_LIMIT (20: videos of the HF generate comparison), METHODS, MAX_NEW_TOKENS (64), FIGURES_LIMIT (20: samples of the train phase's figures.json, kept
# small so the train phase fits a 10-minute call), LONG_FRAMES (0: no long pass), LONG_SHORT_FRAMES
# (64), LONG_LIMIT (10), LONG_TRAIN (1: before the long pass, fine-tune the target with the length augmentation
# LONG_AUGMENT ("--data.frame_repeat [1,8,64,192,192] --data.frame_budget 3072 --data.tables [.]": captions only,
# frame repeats up to 192, so 8-frame clips reach the eval's 1536 frames, two batches in five at that length) for
# LONG_TRAIN_TIME / LONG_TRAIN_STEPS (00:00:08:00 / 650: a call of its own, LONG_STAGES=target; the recipe that met
# the long bar in RESULTS 21.1; sessions 12 and 13 used shorter repeats and position stretch, 19.3 and 20.1), distil a Sparrow draft from it (LONG_SPARROW_TIME / LONG_SPARROW_STEPS: 00:00:01:40 / 520), both
# at batch LONG_BATCH (16), exported to $OUT/releases/long-{target,sparrow}, and read the long set with them; RESULTS 17.5),
# LONG_METHODS (ar,sparrow: the methods of the long pass's two runs; the bar reads sparrow against ar. METHODS puts
# every method on the long set as issue 9 asks; each method adds its warm-up and graph capture to both runs, so with
# all eight the two runs need about a call of their own, and a run cut by the call's limit resumes where it stopped),
# EVAL_PARTS (captions,mcq,hf,long: which runs of the eval phase to make, e.g. EVAL_PARTS=long for the long pass alone),
# LONG_STAGES (target,draft,sparrow,eval: which stages (draft: only with LONG_DRAFT=1) of the long pass this call makes, so a longer fine-tune can have a
# call to itself: LONG_STAGES=target in one call, then the default in the next, which skips the exported target),
# LONG_EVAL_EXTRA ("--fast_compile false --share_video true": more `vidspec eval` arguments for the long pass's two runs,
# after EVAL_EXTRA; the default keeps the fast engine's CUDA graphs but skips torch.compile, since the long pass measures
# tau, not time, and reads each long video once for all methods (a 1536-frame read takes ~2.4 s on the H200, with PyAV),
# each record counting that read; set it empty to compile and read per method),
# VIDSPEC_LOG_LEVEL (INFO: the eval runs log their stage timings, so a run cut by a call limit shows where it was),
# REPLAY_EXTRA (more replay_7b.py arguments, e.g. "--draft-vocab 32768"), HF_EXTRA (more hf_generate_e2e.py arguments;
# default "--k 16", the eval's Sparrow K; session 12 ran it at 4), EVAL_EXTRA (more `vidspec eval` arguments for every eval
# run; default "--lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16", the published configuration since session 10: the
# probability gate that keeps the facts (benchmarks/loose_predicate.py, RESULTS 11.4 and 13.2) and the Sparrow chains at
# K = 16, the best eval with session 9's draft (RESULTS 17.1); EVAL_EXTRA="" runs the methods' own defaults (LVSpec's rule,
# K = 4); use another OUT, since a run folder refuses a changed config), DDP_STEPS (120), DDP_WARMUP (30), DDP_BATCH (256 per device), DDP_TARGET,
# NUM_VIDEOS (12000), WORKERS (8), VIDSPEC (vidspec), PY (python3), and every knob of
# train_releases_gpu.sh (TARGET_TIME, SPARROW_TIME, ...). SMOKE=1: toy size on the CPU (the train
# script's SMOKE, --device cpu, EVAL_LIMIT 2, replay --smoke, DDP on 2 CPU processes with gloo).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VIDSPEC=${VIDSPEC:-vidspec}
PY=${PY:-python3}
OUT=${OUT:-runs/headline}
PHASES=${PHASES:-train,eval,replay,ddp}
SMOKE=${SMOKE:-0}
SEED=0  # not a knob: every seed of the run is fixed (see the header)
EVAL_LIMIT=${EVAL_LIMIT:-40}
MCQ_LIMIT=${MCQ_LIMIT:-$EVAL_LIMIT}
HF_LIMIT=${HF_LIMIT:-20}
FIGURES_LIMIT=${FIGURES_LIMIT:-20}
METHODS=${METHODS:-ar,sd,lvspec,lvspec-pst,fly,sparrow,sparrow-lvspec-pst,tree-sparrow}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-64}
DRAFT=${DRAFT:-$REPO/data/releases/synthvid-draft}
LONG_FRAMES=${LONG_FRAMES:-0}
LONG_SHORT_FRAMES=${LONG_SHORT_FRAMES:-64}
LONG_LIMIT=${LONG_LIMIT:-10}
LONG_METHODS=${LONG_METHODS:-ar,sparrow}
LONG_TRAIN=${LONG_TRAIN:-0}
EVAL_PARTS=${EVAL_PARTS:-captions,mcq,hf,long}
LONG_TRAIN_TIME=${LONG_TRAIN_TIME:-00:00:08:00}
LONG_TRAIN_STEPS=${LONG_TRAIN_STEPS:-650}
LONG_SPARROW_TIME=${LONG_SPARROW_TIME:-00:00:01:40}
LONG_SPARROW_STEPS=${LONG_SPARROW_STEPS:-520}
# LONG_SPARROW_FT_STEPS / LONG_SPARROW_FT_TIME / LONG_SPARROW_FT_LR (520 / 00:00:02:20 / 3e-4; stage `sparrow-ft`):
# then fine-tune that draft on the target's long inputs (LONG_AUGMENT) at a fine-tune's peak LR (the clip
# distillation's last; the recipe configs/train/sparrow-long-ft-gpu.yaml), released as
# $OUT/releases/<LONG_SPARROW_NAME>-ft, which the long pass reads. RESULTS 31.1: on one long target and 30 videos this
# raised the draft's tau at both lengths and its 26k/1.1k ratio from 0.824 to 0.964. LONG_SPARROW_FT_STEPS=0: no
# fine-tune; the long pass reads the draft distilled on 8-frame clips (sessions 14-23).
LONG_SPARROW_FT_STEPS=${LONG_SPARROW_FT_STEPS:-520}
LONG_SPARROW_FT_TIME=${LONG_SPARROW_FT_TIME:-00:00:02:20}
LONG_SPARROW_FT_LR=${LONG_SPARROW_FT_LR:-3e-4}
[[ "$LONG_SPARROW_FT_STEPS" =~ ^[0-9]+$ ]] \
  || { echo "LONG_SPARROW_FT_STEPS=$LONG_SPARROW_FT_STEPS is not a step count (0: no fine-tune)" >&2; exit 2; }
LONG_BATCH=${LONG_BATCH:-16}
LONG_STAGES=${LONG_STAGES:-target,draft,sparrow,sparrow-ft,eval}
# LONG_DRAFT (0): 1 fine-tunes the draft VLM (DRAFT) on the same long inputs as the target (stage `draft`,
# LONG_DRAFT_TIME / LONG_DRAFT_STEPS) and the long pass's draft-VLM methods (sd, lvspec, lvspec-pst, fly) use it. The
# committed draft VLM never saw more than 8 frames and degenerates on long inputs (RESULTS 24.1); this is the fair
# long-video comparison for them. 0 keeps the committed draft (the figures of 24.1).
LONG_DRAFT=${LONG_DRAFT:-0}
LONG_DRAFT_TIME=${LONG_DRAFT_TIME:-00:00:02:00}
LONG_DRAFT_STEPS=${LONG_DRAFT_STEPS:-650}
LONG_AUGMENT=${LONG_AUGMENT:---data.frame_repeat [1,8,64,192,192] --data.frame_budget 3072 --data.tables [.]}
LONG_ACCEL=gpu
LONG_PRECISION=bf16-mixed
NUM_VIDEOS=${NUM_VIDEOS:-12000}
WORKERS=${WORKERS:-8}
DDP_STEPS=${DDP_STEPS:-120}
DDP_WARMUP=${DDP_WARMUP:-30}
DDP_BATCH=${DDP_BATCH:-256}
DDP_ACCEL=gpu
DDP_WORKERS=12
DEV=cuda
EVAL_EXTRA=${EVAL_EXTRA---lam 1.0 --predicate prob --eps 0.3 --sparrow_k 16}  # unset: the published configuration
read -r -a EVAL_ARGS <<< "$EVAL_EXTRA"
read -r -a REPLAY_ARGS <<< "${REPLAY_EXTRA:-}"  # e.g. REPLAY_EXTRA="--draft-vocab 32768"
read -r -a HF_ARGS <<< "${HF_EXTRA---k 16}"  # unset: the Sparrow K of the default EVAL_EXTRA's --sparrow_k
# The long pass measures tau by video length: its two runs skip torch.compile by default (RESULTS 19), so a
# fresh machine's first eval process does not spend minutes compiling before its first record.
read -r -a LONG_EVAL_ARGS <<< "${LONG_EVAL_EXTRA---fast_compile false --share_video true}"
REPLAY_JSON=replay_7b.json
if [[ "$SMOKE" == "1" ]]; then
  EVAL_LIMIT=2; MCQ_LIMIT=2; HF_LIMIT=2; FIGURES_LIMIT=2; MAX_NEW_TOKENS=16; DEV=cpu; LONG_LIMIT=2; NUM_VIDEOS=12; WORKERS=1
  LONG_SHORT_FRAMES=8
  LONG_TRAIN_STEPS=3; LONG_SPARROW_STEPS=3; LONG_DRAFT_STEPS=3; LONG_BATCH=4; LONG_ACCEL=cpu; LONG_PRECISION=32-true; LONG_WORKERS=0
  LONG_AUGMENT="--data.frame_repeat [1,2] --data.position_stretch [1,2]"
  (( LONG_SPARROW_FT_STEPS > 0 )) && LONG_SPARROW_FT_STEPS=3
  DDP_STEPS=4; DDP_WARMUP=1; DDP_BATCH=4; DDP_ACCEL=cpu; DDP_WORKERS=0
  REPLAY_ARGS+=(--smoke --device cpu); REPLAY_JSON=replay_7b_smoke.json
fi
LONG_WORKERS=${LONG_WORKERS:-$WORKERS}
read -r -a LONG_AUG_ARGS <<< "$LONG_AUGMENT"  # e.g. "--data.frame_repeat [1,2,4] --data.position_stretch [1,2]"
# LONG_SPARROW_AUGMENT: more `vidspec train fit` arguments for the long pass's Sparrow draft (default none: distilled on
# the 8-frame clips, as in RESULTS 21.1 and 24). RESULTS 24.2 found the draft losing passes at 1536 frames where the
# long target's reading differs from its short one; LONG_SPARROW_AUGMENT="$LONG_AUGMENT" distils it on the same long
# inputs the target was fine-tuned on, so it learns the target's text states at 26k visual tokens.
read -r -a LONG_SPARROW_AUG_ARGS <<< "${LONG_SPARROW_AUGMENT:-}"
# LONG_SPARROW_NAME (long-sparrow): the long Sparrow's release ($OUT/releases/NAME) and run folder, which the long
# pass's eval reads: a second name distils a second draft beside the first (benchmarks/long_ab.py compares two).
LONG_SPARROW_NAME=${LONG_SPARROW_NAME:-long-sparrow}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONHASHSEED=$SEED VIDSPEC_LOG_LEVEL=${VIDSPEC_LOG_LEVEL:-INFO}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=${DATA:-$OUT/synthvid}
TARGET=$OUT/releases/synthvid-target
SPARROW=$OUT/releases/sparrow-synthvid
DRAFT_ARGS=()
if [[ "$DRAFT" == "none" ]]; then
  # Without a draft VLM the draft-VLM methods cannot run; keep the others.
  METHODS=$(echo ",$METHODS," | sed -e 's/,sd,/,/; s/,lvspec,/,/; s/,lvspec-pst,/,/; s/,fly,/,/; s/^,//; s/,$//')
  DRAFT=""
else
  [[ -f "$DRAFT/config.json" ]] || { echo "DRAFT=$DRAFT is not a draft VLM release (or set DRAFT=none)" >&2; exit 2; }
  DRAFT=$(cd "$DRAFT" && pwd)
  DRAFT_ARGS=(--draft "$DRAFT")
fi
for p in ${EVAL_PARTS//,/ }; do
  case "$p" in captions|mcq|hf|long) ;; *) echo "unknown eval part $p in EVAL_PARTS=$EVAL_PARTS (captions,mcq,hf,long)" >&2; exit 2 ;; esac
done
for p in ${LONG_STAGES//,/ }; do
  case "$p" in target|draft|sparrow|sparrow-ft|eval) ;; *) echo "unknown long stage $p in LONG_STAGES=$LONG_STAGES (target,draft,sparrow,sparrow-ft,eval)" >&2; exit 2 ;; esac
done
if [[ "$LONG_DRAFT" == "1" && -z "$DRAFT" ]]; then
  echo "LONG_DRAFT=1 fine-tunes the draft VLM, but DRAFT=none" >&2; exit 2
fi
for p in ${PHASES//,/ }; do
  case "$p" in train|eval|replay|ddp) ;; *) echo "unknown phase $p in PHASES=$PHASES (train,eval,replay,ddp)" >&2; exit 2 ;; esac
done
mkdir -p "$OUT/phases"
exec > >(tee -a "$OUT/headline.log") 2>&1

stamp() { date +%s; }
want() { [[ ",$PHASES," == *",$1,"* ]]; }
part() { [[ ",$EVAL_PARTS," == *",$1,"* ]]; }
stage() { [[ ",$LONG_STAGES," == *",$1,"* ]]; }
took() { echo "$(( $(stamp) - $2 ))" > "$OUT/phases/$1.seconds"; echo "   $1: $(( $(stamp) - $2 )) s"; }
skip() { echo "== $1: skipped, outputs exist ($2)"; }
T_START=$(stamp)
echo "== headline_gpu.sh: OUT=$OUT PHASES=$PHASES SMOKE=$SMOKE device=$DEV $(date -u +%FT%TZ)"

gen_data() {  # the SynthVid set of train_releases_gpu.sh (same arguments, so the same data)
  $VIDSPEC data synthvid --out "$DATA" --num-videos "$NUM_VIDEOS" --seed "$SEED" --preset easy --frames 8 --size 64x64 \
    --styles alpha:1,beta:1 --captions-per-video 2 --workers "$WORKERS" --no-progress true
}

# ---- train -----------------------------------------------------------------------------------------
if want train; then
  if [[ -f "$OUT/figures.json" && -f "$TARGET/manifest.json" && -f "$SPARROW/manifest.json" ]]; then
    skip train "$OUT/figures.json"
  else
    t=$(stamp)
    if [[ -f "$TARGET/manifest.json" && -f "$SPARROW/manifest.json" ]]; then
      echo "== train: releases exist, figures only"  # the train script's last step, as it runs it
      FIG_DRAFT=(); [[ -n "$DRAFT" ]] && FIG_DRAFT=(--draft "$DRAFT")
      $PY benchmarks/train_testbed.py --data "$DATA" --target "$TARGET" "${FIG_DRAFT[@]}" --sparrow "$SPARROW" \
        --limit "$FIGURES_LIMIT" --device "$DEV" --out "$OUT/figures.json" | tail -c 3000
    else
      echo "== train: benchmarks/train_releases_gpu.sh PROFILE=gpu"
      OUT="$OUT" PROFILE=gpu DATA="$DATA" DRAFT="$DRAFT" EVAL_LIMIT="$FIGURES_LIMIT" NUM_VIDEOS="$NUM_VIDEOS" \
        WORKERS="$WORKERS" VIDSPEC="$VIDSPEC" PY="$PY" SMOKE="$SMOKE" bash benchmarks/train_releases_gpu.sh
    fi
    took train "$t"
  fi
fi

# ---- eval ------------------------------------------------------------------------------------------
eval_done() {  # dir limit methods: summary.json of a finished run with this limit and these methods
  $PY - "$@" <<'EOF'
import json, sys
from pathlib import Path
p = Path(sys.argv[1]) / "summary.json"
if not p.is_file():
    sys.exit(1)
c = json.loads(p.read_text())["config"]
sys.exit(0 if c.get("limit") == int(sys.argv[2]) and set(sys.argv[3].split(",")) <= set(c.get("methods") or []) else 1)
EOF
}
long_release() {  # name recipe max_time max_steps [vidspec train fit args...]: one training stage of LONG_TRAIN, exported
  local name=$1 recipe=$2 max_time=$3 steps=$4 run=$OUT/runs/$1 t; shift 4
  if [[ -f "$OUT/releases/$name/manifest.json" ]]; then skip "train $name" "$OUT/releases/$name"; return; fi
  t=$(stamp); rm -rf "$run"; mkdir -p "$run"
  echo "== train $name ($recipe, at most $steps steps / $max_time)"
  $VIDSPEC train fit --config "configs/train/$recipe.yaml" --trainer.accelerator "$LONG_ACCEL" \
    --trainer.precision "$LONG_PRECISION" --data.path "$DATA" --data.frame_cache "$DATA/frames" \
    --data.num_workers "$LONG_WORKERS" --trainer.limit_val_batches 0 --trainer.max_time "$max_time" \
    --trainer.max_steps "$steps" --trainer.default_root_dir "$run" --trainer.logger.init_args.save_dir "$run" \
    --checkpoint.dirpath "$run/checkpoints" "$@" > "$run/train.log" 2>&1
  $VIDSPEC export --ckpt "$run/checkpoints/last.ckpt" --out "$OUT/releases/$name" --overwrite true >> "$run/train.log" 2>&1
  took "train-$name" "$t"
}
eval_run() {  # name benchmark data limit methods [vidspec eval args...]
  local name=$1 bench=$2 data=$3 limit=$4 methods=$5 t; shift 5
  if eval_done "$OUT/$name" "$limit" "$methods"; then skip "$name" "$OUT/$name/summary.json"; return; fi
  t=$(stamp)
  echo "== $name: $bench, $methods, $limit samples"
  $VIDSPEC eval --benchmark "$bench" --data "$data" --split validation --target "$TARGET" "${DRAFT_ARGS[@]}" \
    --sparrow "$SPARROW" --methods "$methods" --engine fast --device "$DEV" --limit "$limit" \
    --max_new_tokens "$MAX_NEW_TOKENS" --out "$OUT/$name" --no_progress true "${EVAL_ARGS[@]}" "$@"
  took "$name" "$t"
}
eval_hf() {  # issue 9: end-to-end tokens/s against transformers' own generate on the same target
  local t
  if [[ -f "$OUT/eval-hf/hf_generate_e2e.json" ]]; then skip eval-hf "$OUT/eval-hf/hf_generate_e2e.json"; return; fi
  t=$(stamp)
  echo "== eval-hf: HF generate vs our ar and sparrow, end to end, $HF_LIMIT videos"
  $PY benchmarks/hf_generate_e2e.py --data "$DATA" --target "$TARGET" --sparrow "$SPARROW" --limit "$HF_LIMIT" \
    --max-new-tokens "$MAX_NEW_TOKENS" --device "$DEV" --engine fast --out "$OUT/eval-hf" "${HF_ARGS[@]}" 2>&1 \
    | grep -v -i warn | tail -8
  took eval-hf "$t"
}
if want eval; then
  if [[ ! -f "$TARGET/manifest.json" || ! -f "$SPARROW/manifest.json" ]]; then
    echo "eval: no releases in $OUT/releases (run PHASES=train first)" >&2; exit 1
  fi
  part captions && eval_run eval-captions synthvid_captions "$DATA" "$EVAL_LIMIT" "$METHODS"
  part mcq && eval_run eval-mcq synthvid_mcq "$DATA" "$MCQ_LIMIT" "$METHODS"
  part hf && eval_hf
  if (( LONG_FRAMES > 0 )) && part long; then
    SAVED_TARGET=$TARGET; SAVED_SPARROW=$SPARROW; SAVED_DRAFT_ARGS=("${DRAFT_ARGS[@]}")
    if [[ "$LONG_TRAIN" == "1" ]]; then
      # Issue 9's long-video bar needs a target that reads long inputs: fine-tune the trained target with the
      # length augmentation (RESULTS 17.5), distil a Sparrow draft from it, and read the long set with both.
      stage target && long_release long-target synthvid-target-cpu "$LONG_TRAIN_TIME" "$LONG_TRAIN_STEPS" \
        --model.init_args.init_from "$TARGET" --model.init_args.tokenizer "$TARGET" --model.init_args.freeze_vision true \
        --data.batch_size "$LONG_BATCH" --model.init_args.optim.lr 3.0e-4 --model.init_args.optim.warmup_steps 20 \
        --model.init_args.optim.min_lr_ratio 0.1 "${LONG_AUG_ARGS[@]}"
      if [[ "$LONG_DRAFT" == "1" ]] && stage draft; then  # the draft VLM on the same long inputs (its own style)
        long_release long-draft synthvid-draft-cpu "$LONG_DRAFT_TIME" "$LONG_DRAFT_STEPS" \
          --model.init_args.init_from "$DRAFT" --model.init_args.tokenizer "$DRAFT" --model.init_args.freeze_vision true \
          --data.batch_size "$LONG_BATCH" --model.init_args.optim.lr 3.0e-4 --model.init_args.optim.warmup_steps 20 \
          --model.init_args.optim.min_lr_ratio 0.1 "${LONG_AUG_ARGS[@]}"
      fi
      if stage sparrow; then
        [[ -f "$OUT/releases/long-target/manifest.json" ]] \
          || { echo "long pass: no $OUT/releases/long-target (LONG_STAGES without target, and none exported yet)" >&2; exit 1; }
        long_release "$LONG_SPARROW_NAME" sparrow-tiny-cpu "$LONG_SPARROW_TIME" "$LONG_SPARROW_STEPS" \
          --model.init_args.target "$OUT/releases/long-target" --model.init_args.target_dtype float32 \
          --data.caption_styles '[alpha]' --data.tables '["."]' --data.batch_size "$LONG_BATCH" "${LONG_SPARROW_AUG_ARGS[@]}"
      fi
      SPARROW=$OUT/releases/$LONG_SPARROW_NAME
      if (( LONG_SPARROW_FT_STEPS > 0 )); then
        if stage sparrow-ft; then
          [[ -f "$SPARROW/manifest.json" ]] \
            || { echo "long pass: no $SPARROW to fine-tune (LONG_STAGES without sparrow, and none exported yet)" >&2; exit 1; }
          long_release "$LONG_SPARROW_NAME-ft" sparrow-long-ft-gpu "$LONG_SPARROW_FT_TIME" "$LONG_SPARROW_FT_STEPS" \
            --model.init_args.target "$OUT/releases/long-target" --model.init_args.init_from "$SPARROW" \
            --model.init_args.optim.lr "$LONG_SPARROW_FT_LR" --data.batch_size "$LONG_BATCH" "${LONG_AUG_ARGS[@]}"
        fi
        SPARROW=$OUT/releases/$LONG_SPARROW_NAME-ft
      fi
      TARGET=$OUT/releases/long-target
      if stage eval && [[ ! -f "$SPARROW/manifest.json" ]]; then
        echo "long pass: no $SPARROW to evaluate with (run the target, sparrow and sparrow-ft stages first; LONG_SPARROW_FT_STEPS=0 reads the clip-distilled draft)" >&2; exit 1
      fi
      if [[ "$LONG_DRAFT" == "1" ]]; then
        if stage eval && [[ ! -f "$OUT/releases/long-draft/manifest.json" ]]; then
          echo "long pass: LONG_DRAFT=1 but no $OUT/releases/long-draft (run the draft stage first)" >&2; exit 1
        fi
        DRAFT_ARGS=(--draft "$OUT/releases/long-draft")
      fi
    fi
    LONG_DATA=${LONG_DATA:-$OUT/synthvid-long$LONG_FRAMES}
    if ! stage eval; then
      echo "== long pass: stages $LONG_STAGES done; the eval stage is left to a later call"
    elif [[ ! -f "$LONG_DATA/synthvid.json" ]]; then
      echo "== long set: $LONG_LIMIT held-out videos of $LONG_FRAMES frames -> $LONG_DATA"
      $VIDSPEC data synthvid --out "$LONG_DATA" --num-videos "$LONG_LIMIT" --seed 2 --preset easy --frames "$LONG_FRAMES" \
        --size 64x64 --styles alpha:1,beta:1 --captions-per-video 2 --split validation=1 --workers "$WORKERS" \
        --no-progress true
    fi
    for F in "$LONG_SHORT_FRAMES" "$LONG_FRAMES"; do  # same videos, uniform sampling: only the length changes
      stage eval || break
      eval_run "eval-long$F" synthvid_captions "$LONG_DATA" "$LONG_LIMIT" "$LONG_METHODS" --frames "$F" \
        --fast_max_len $(( F * 17 + 1024 )) "${LONG_EVAL_ARGS[@]}"
    done
    TARGET=$SAVED_TARGET; SPARROW=$SAVED_SPARROW; DRAFT_ARGS=("${SAVED_DRAFT_ARGS[@]}")
  fi
fi

# ---- replay ----------------------------------------------------------------------------------------
if want replay; then
  if [[ -f "$OUT/replay/$REPLAY_JSON" ]]; then
    skip replay "$OUT/replay/$REPLAY_JSON"
  else
    [[ -f "$OUT/eval-captions/records.jsonl" ]] || { echo "replay: no $OUT/eval-captions/records.jsonl (run PHASES=eval first)" >&2; exit 1; }
    t=$(stamp)
    mkdir -p "$OUT/replay"
    # Keep the records replay_7b.py can rebuild each round's acceptance of (record_schedule) and say
    # how many were left out (filter.json).
    REPLAY_METHODS=$(PYTHONPATH="benchmarks${PYTHONPATH:+:$PYTHONPATH}" $PY - "$OUT/eval-captions/records.jsonl" "$OUT/replay" <<'EOF'
import json, sys
from pathlib import Path
from replay_7b import record_schedule
src, out = Path(sys.argv[1]), Path(sys.argv[2])
methods = ["sparrow", "sparrow-lvspec-pst"]
kept, dropped = [], {m: 0 for m in methods}
for line in src.read_text().splitlines():
    r = json.loads(line)
    if r.get("method") not in methods or not r.get("target_passes"):
        continue
    if record_schedule(r) is not None:
        kept.append(line)
    else:
        dropped[r["method"]] += 1
(out / "records.jsonl").write_text("".join(x + "\n" for x in kept))
have = [m for m in methods if any(json.loads(x)["method"] == m for x in kept)]
(out / "filter.json").write_text(json.dumps({"source": str(src), "kept": len(kept), "dropped": dropped,
                                             "methods": have}, indent=1) + "\n")
print(",".join(have))
EOF
)
    echo "== replay: methods ${REPLAY_METHODS:-none} ($(tr -d '\n ' < "$OUT/replay/filter.json"))"
    [[ -n "$REPLAY_METHODS" ]] || { echo "replay: no replayable sparrow records" >&2; exit 1; }
    PYTHONPATH="packages/decoding/src${PYTHONPATH:+:$PYTHONPATH}" $PY benchmarks/replay_7b.py \
      --records "$OUT/replay/records.jsonl" --methods "$REPLAY_METHODS" --out "$OUT/replay" "${REPLAY_ARGS[@]}"
    took replay "$t"
  fi
fi

# ---- ddp -------------------------------------------------------------------------------------------
if want ddp; then
  if [[ -f "$OUT/ddp/ddp_scaling.json" ]]; then
    skip ddp "$OUT/ddp/ddp_scaling.json"
  else
    NGPU=2  # SMOKE: 2 CPU processes (Lightning's DDP on CPU uses gloo)
    [[ "$SMOKE" == "1" ]] || NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
    if (( NGPU < 2 )); then
      echo "== ddp: skipped, $NGPU GPU(s) visible and the phase needs 2 (run PHASES=ddp on the 2x H200 machine)"
      echo "$NGPU GPU(s) visible" > "$OUT/phases/ddp.skipped"
    else
      rm -f "$OUT/phases/ddp.skipped"
      t=$(stamp)
      DDP_TARGET=${DDP_TARGET:-$TARGET}
      if [[ ! -f "$DDP_TARGET/manifest.json" ]]; then
        echo "   ddp: no $DDP_TARGET on this machine; distilling from the committed data/releases/synthvid-target"
        DDP_TARGET=$REPO/data/releases/synthvid-target
      fi
      [[ -f "$DATA/synthvid.json" ]] || { echo "== ddp: SynthVid -> $DATA (seed $SEED)"; gen_data; }
      echo "== ddp: 1 and 2 devices, $DDP_STEPS steps, per-device batch $DDP_BATCH, target $DDP_TARGET"
      # The arguments of RESULTS section 8 (batch 256), with this run's target and data.
      $PY benchmarks/ddp_scaling.py --devices 1,2 --steps "$DDP_STEPS" --warmup "$DDP_WARMUP" --batch "$DDP_BATCH" \
        --out "$OUT/ddp" --timeout 900 -- --config configs/train/sparrow-tiny-cpu.yaml \
        --trainer.accelerator "$DDP_ACCEL" --trainer.precision 32-true --model.init_args.target "$DDP_TARGET" \
        --data.path "$DATA" --data.frame_cache "$DATA/frames" --data.caption_styles '[alpha]' --data.tables '["."]' \
        --data.num_workers "$DDP_WORKERS" --trainer.limit_val_batches 0 --trainer.log_every_n_steps 1
      took ddp "$t"
    fi
  fi
fi

# ---- summary ---------------------------------------------------------------------------------------
GIT_SHA=${VIDSPEC_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
GIT_FROM=$([[ -n "${VIDSPEC_GIT_SHA:-}" ]] && echo VIDSPEC_GIT_SHA || echo "git rev-parse HEAD")
echo "== summary ($(( $(stamp) - T_START )) s in this call)"
OUT="$OUT" SMOKE="$SMOKE" SEED="$SEED" GIT_SHA="$GIT_SHA" GIT_FROM="$GIT_FROM" REPLAY_JSON="$REPLAY_JSON" \
  DEV="$DEV" PHASES="$PHASES" EVAL_LIMIT="$EVAL_LIMIT" MAX_NEW_TOKENS="$MAX_NEW_TOKENS" METHODS="$METHODS" \
  DRAFT="${DRAFT:-none}" DATA="$DATA" LONG_FRAMES="$LONG_FRAMES" LONG_SHORT_FRAMES="$LONG_SHORT_FRAMES" \
  EVAL_EXTRA="${EVAL_EXTRA:-}" DDP_BATCH="$DDP_BATCH" DDP_STEPS="$DDP_STEPS" $PY - <<'EOF'
import json, os, time
from pathlib import Path

out = Path(os.environ["OUT"])
env = os.environ


def load(p):
    return json.loads(p.read_text()) if p.is_file() else None


def fmt(v, spec=".2f", suffix=""):
    return "n/a" if v is None else f"{v:{spec}}{suffix}"


steps = {p.name[: -len(".seconds")]: int(p.read_text()) for p in sorted((out / "phases").glob("*.seconds"))}
phase_seconds = {}
for ph in ("train", "eval", "replay", "ddp"):  # a phase's steps: train, eval-captions, eval-mcq, ...
    got = [s for n, s in steps.items() if n == ph or n.startswith(ph + "-")]
    phase_seconds[ph] = sum(got) if got else None
doc = {
    "schema": 1,
    "git_sha": env["GIT_SHA"], "git_sha_from": env["GIT_FROM"],
    "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "smoke": env["SMOKE"] == "1", "seed": int(env["SEED"]), "device": env["DEV"],
    "command": ("SMOKE=1 " if env["SMOKE"] == "1" else "") + f"OUT={out} PHASES={env['PHASES']} bash benchmarks/headline_gpu.sh",
    "note": "phase_seconds: the seconds of the call that finished each step; skipped steps keep them",
    "knobs": {k: env[k] for k in ("PHASES", "EVAL_LIMIT", "MAX_NEW_TOKENS", "METHODS", "DRAFT", "DATA",
                                  "LONG_FRAMES", "LONG_SHORT_FRAMES")}
             | {k: env[k] for k in ("EVAL_EXTRA", "TARGET_TIME", "TARGET_STEPS", "SPARROW_TIME", "SPARROW_STEPS",
                                    "SPARROW_EXTRA", "DDP_BATCH", "DDP_STEPS") if env.get(k)},
    "phase_seconds": phase_seconds, "step_seconds": steps,
    "conventions": ("batch 1, greedy, fast engine; tau includes the bonus token (AR = 1.0); DSR = decode-phase "
                    "speedup over AR in the same run, ESR = end to end; retention = method score / AR score on "
                    "the same samples (SynthVid fact F1 for captions, accuracy for MCQ); ALGORITHMS.md section 5"),
}

fig = load(out / "figures.json")
if fig:
    doc["train"] = {
        "target": {k: fig["target"].get(k) for k in ("parameters", "layers", "metrics")},
        "fact_precision": fig.get("captions", {}).get("precision"), "fact_recall": fig.get("captions", {}).get("recall"),
        "mcq_accuracy": (fig.get("mcq") or {}).get("accuracy"),
        "draft_tau": (fig.get("draft") or {}).get("tau"), "sparrow_tau": (fig.get("sparrow") or {}).get("tau"),
    }

KEYS = ("n_samples", "tau", "dsr", "dsr_prepare_in_decode", "esr", "retention", "accuracy", "token_identical_share", "fact_precision",
        "fact_recall", "tokens_per_s", "draft_ms_per_round", "verify_ms_per_round", "draft_prefill_ms",
        "prefill_vs_ar_ms_median")
doc["eval"] = {}
runs = [out / "eval-captions", out / "eval-mcq"]  # then the long pass, shortest first
# eval-long<frames> only: side runs beside them (e.g. eval-long1536-eager, an engine check) are not the pass's
runs += sorted((p for p in out.glob("eval-long*") if p.name[len("eval-long"):].isdigit()),
               key=lambda p: int(p.name[len("eval-long"):]))
for d in runs:
    s = load(d / "summary.json")
    if s:
        doc["eval"][d.name[len("eval-"):]] = {
            "benchmark": s["benchmark"], "n_samples": s["n_samples"], "frames": s["config"].get("frames"),
            "engine": s["config"].get("engine"), "device": s["config"].get("device"),
            "methods": {m: {k: v.get(k) for k in KEYS} for m, v in s["methods"].items()},
        }

hf = load(out / "eval-hf" / "hf_generate_e2e.json")
if hf:
    doc["hf_generate"] = {"samples": hf["samples"], "engine": hf["engine"], "device": hf["device"],
                          "results": {n: {k: v[k] for k in ("tokens_per_s", "ratio_to_hf_generate", "identical_to_hf_generate")}
                                      for n, v in hf["results"].items()}}

rep = load(out / "replay" / env["REPLAY_JSON"])
if rep:
    doc["replay"] = {"rows": rep["rows"], "filter": load(out / "replay" / "filter.json"),
                     "note": "costs measured at 7B shapes with random weights, acceptance replayed from eval-captions"}

ddp = load(out / "ddp" / "ddp_scaling.json")
if ddp:
    doc["ddp"] = {"speedup": ddp["results"][-1]["speedup"], "fit_args": ddp["fit_args"],
                  "results": [{k: r[k] for k in ("devices", "samples_per_s", "speedup", "final_loss")}
                              for r in ddp["results"]]}
elif (out / "phases" / "ddp.skipped").is_file():
    doc["ddp"] = {"skipped": (out / "phases" / "ddp.skipped").read_text().strip()}

# Issue 9's bars (ANCHORS.md), checked on the captions run.
bars = []
cap = doc["eval"].get("captions", {}).get("methods", {})


def bar(name, value, target, ok, note=None):
    bars.append({"bar": name, "value": value, "target": target, "met": bool(ok) if value is not None and ok is not None else None,
                 **({"note": note} if note else {})})


def judged_dsr(m):
    """The bars are judged on the conservative DSR: the drafter's prepare (prompt feed or draft prefill,
    run in the prefill phase) counted in the decode. Records older than the field: the plain DSR."""
    d = m.get("dsr_prepare_in_decode")
    return m["dsr"] if d is None else d


if "sparrow" in cap:
    m = cap["sparrow"]
    bar("sparrow DSR (prepare in decode), token-identical", judged_dsr(m), ">= 2.8x, 100%",
        (judged_dsr(m) or 0) >= 2.8 and m["token_identical_share"] == 1, f"DSR with prepare in the prefill {fmt(m['dsr'])}x")
for name, dsr, ret in (("lvspec-pst", 2.9, 0.998), ("sparrow-lvspec-pst", 4.0, 0.995)):
    if name in cap:
        m = cap[name]
        bar(f"{name} DSR (prepare in decode) at retention", judged_dsr(m), f">= {dsr}x at >= {ret:.1%}",
            (judged_dsr(m) or 0) >= dsr and (m["retention"] or 0) >= ret,
            f"retention {fmt(m['retention'], '.1%')}; DSR with prepare in the prefill {fmt(m['dsr'])}x")
lf, sf = env["LONG_FRAMES"], env["LONG_SHORT_FRAMES"]
longs = sorted((v["frames"], k) for k, v in doc["eval"].items() if k.startswith("long") and v.get("frames"))
if int(lf) <= 0 and len(longs) >= 2:  # a later call without LONG_FRAMES (e.g. PHASES=replay) keeps the judged bar
    sf, lf = longs[0][0], longs[-1][0]
lo, sh = doc["eval"].get(f"long{lf}"), doc["eval"].get(f"long{sf}")
if lo and sh and "sparrow" in lo["methods"] and "sparrow" in sh["methods"]:
    r = lo["methods"]["sparrow"]["tau"] / sh["methods"]["sparrow"]["tau"]
    # tau on text that says nothing about the video (a target trained on short clips may fall into
    # repetition on long ones) compares degenerate text: then the bar is not judged.
    recall = [(x["methods"].get("ar") or {}).get("fact_recall") for x in (sh, lo)]
    said = all(v is not None and v > 0.05 for v in recall)
    bar(f"sparrow tau at {lf} vs {sf} frames", r, ">= 0.90", (r >= 0.9) if said else None,
        None if said else f"not judged: AR fact recall {recall[0]} / {recall[1]} (short / long); the target's "
        "captions of these videos state (almost) no facts")
if "speedup" in doc.get("ddp", {}):
    bar("DDP 2-GPU throughput ratio", doc["ddp"]["speedup"], ">= 1.85x", doc["ddp"]["speedup"] >= 1.85)
doc["bars"] = bars
(out / "headline.json").write_text(json.dumps(doc, indent=1) + "\n")

print(f"\ngit {doc['git_sha']} ({doc['git_sha_from']}), seed 0, device {doc['device']}, "
      f"phase seconds {json.dumps(phase_seconds)}")
if doc["eval"]:
    print("\n| run | method | n | τ | DSR | DSR, prepare in decode | ESR | retention | MCQ acc. | token-identical |"
          "\n|---|---|---|---|---|---|---|---|---|---|")
for name, e in doc["eval"].items():
    for m, v in e["methods"].items():
        print(f"| {name} | {m} | {v['n_samples']} | {fmt(v['tau'])} | {fmt(v['dsr'], suffix='x')} | "
              f"{fmt(v.get('dsr_prepare_in_decode'), suffix='x')} | "
              f"{fmt(v['esr'], suffix='x')} | {fmt(v['retention'], '.1%')} | {fmt(v['accuracy'], '.2f')} | "
              f"{fmt(v['token_identical_share'], '.0%')} |")
if "hf_generate" in doc:
    print(f"\nEnd to end vs transformers' generate on the same target ({doc['hf_generate']['samples']} videos)\n"
          "| decoder | tokens/s | vs HF generate | identical to HF generate |\n|---|---|---|---|")
    for n, v in doc["hf_generate"]["results"].items():
        print(f"| {n} | {v['tokens_per_s']:.1f} | {v['ratio_to_hf_generate']:.2f}x | {v['identical_to_hf_generate']:.0%} |")
if "replay" in doc:
    print("\n7B-shape replay (projection: measured costs, replayed acceptance)\n"
          "| family | visual tokens | method | τ | DSR |\n|---|---|---|---|---|")
    for r in doc["replay"]["rows"]:
        print(f"| {r['family']} | {r['visual_tokens']} | {r['method']} | {fmt(r['tau'])} | {fmt(r['dsr'], suffix='x')} |")
if "ddp" in doc:
    print(f"\nDDP: {doc['ddp'].get('skipped') or fmt(doc['ddp']['speedup'], suffix='x') + ' samples/s on 2 vs 1 device(s)'}")
if bars:
    print("\n| issue 9 bar | value | target | met |\n|---|---|---|---|")
    for b in bars:
        print(f"| {b['bar']} | {fmt(b['value'])} | {b['target']} | {b['met']} |" + (f" {b['note']}" if b.get("note") else ""))
print(f"\nwrote {out / 'headline.json'}")
EOF
