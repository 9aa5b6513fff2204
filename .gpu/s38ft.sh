# session 38: the release targets' MCQ-weighted fine-tune (FINETUNE_STEPS=800, configs/train/synthvid-target-mcq-ft.yaml)
# on session 37's GPU-scale SFT target (24 layers, hidden 256; 2400 SFT steps; CPU figures precision 0.980, MCQ 0.945
# with motion 0.845: RESULTS 43), so the fine-tune's effect is read on one first stage, before and after. The SFT
# target (bfloat16, 53 MB, as the recipe's first stage is exported) and the wheels (22.5 MB) do not travel in one call,
# so two calls on one warm machine, the second within 30 s of the first; the committed releases and result files stay
# here (`THIN="data/releases benchmarks/results" bash .gpu/thin.sh`, `--restore` after):
#   call 1, carry [.whl-x, .gitsha]:                           bash .gpu/s38ft.sh prep   wheels, SynthVid (~40 s)
#   call 2, carry [runs/r37-gpu/releases/synthvid-target, .gitsha]:   bash .gpu/s38ft.sh
#     the fine-tune at each data seed of SEEDS ("0 1": seed 0 is the recipe's, seed 1 a replicate in another order),
#     exported in bfloat16 (session 38 passed --seed_everything instead, which this stage does not read: the two runs'
#     losses were identical to the bit);
#     the targets, logs and metrics come back in 15 MB parts (cat r38.tgz.part-* | tar xzf - -C runs), and the
#     figures run on CPU (benchmarks/train_testbed.py --device cpu, ~2 min a target).
#   `bash .gpu/s38ft.sh more` (what .gpu/s38more.sh runs, its header has why): the SFT-mixture arms instead.
# Both fine-tunes start from the same export, as train_releases_gpu.sh's second stage starts from its first stage's
# bfloat16 export (FINETUNE_FROM there).
source .gpu/setup.sh; date
D=$PWD/runs/h15/synthvid
if [[ "${1:-}" == prep ]]; then  # the seed-0 set every GPU-scale run trained on (train_releases_gpu.sh's arguments)
  [[ -f $D/synthvid.json ]] || vidspec data synthvid --out $D --num-videos 12000 --seed 0 --preset easy --frames 8 \
    --size 64x64 --styles alpha:1,beta:1 --captions-per-video 2 --workers 12 --no-progress true
  ls $D | head -5; date; exit 0
fi
SFT=${SFT:-$PWD/runs/r37-gpu/releases/synthvid-target}
[[ -f $D/synthvid.json ]] || { echo "s38ft: no SynthVid set in $D (run 'bash .gpu/s38ft.sh prep' first)"; exit 2; }
stage() {  # name limit VAR=value...: a second stage from $SFT into runs/r38-<name>, its log there without warnings
  local name=$1 limit=$2; shift 2
  local R=$PWD/runs/r38-$name; mkdir -p $R
  env OUT=$R PROFILE=gpu DATA=$D EXPORT_DTYPE=bfloat16 FINETUNE_STEPS=${FINETUNE_STEPS:-800} FINETUNE_FROM=$SFT \
    STOP_AFTER=finetune VAL_EVERY=400 WORKERS=12 VIDSPEC=vidspec PY=python3 "$@" \
    timeout $limit bash benchmarks/train_releases_gpu.sh 2>&1 | grep -v -i warn > $R/train.log
  echo "$name rc ${PIPESTATUS[0]}" >> $R/train.log; tail -4 $R/train.log; date
}
if [[ "${1:-}" == more ]]; then  # .gpu/s38more.sh: the SFT-mixture arms, each back in parts of its own
  mkdir -p /tmp/r38-parts; dest=$OUT
  for arm in ${ARMS:-more more-aug}; do
    extra=(); [[ $arm == more-aug ]] && extra=(FINETUNE_EXTRA="--data.reverse_time 0.5")
    stage $arm ${LIMIT:-285} FINETUNE_MIX=sft FINETUNE_TIME=${ARM_TIME:-00:00:04:00} "${extra[@]}"
    (cd runs && tar czf - --exclude='*.ckpt' --exclude='events.out*' r38-$arm | split -b 15m - $dest/r38-$arm.tgz.part-)
    dest=/tmp/r38-parts
  done
  ls -la $OUT /tmp/r38-parts; nvidia-smi --query-gpu=name --format=csv,noheader; exit 0
fi
for s in ${SEEDS:-0 1}; do stage ft$s ${LIMIT:-270} FINETUNE_EXTRA="--data.seed $s"; done
cd runs && tar czf - --exclude='*.ckpt' --exclude='events.out*' r38-ft* | split -b 15m - $OUT/r38.tgz.part-
ls -la $OUT; nvidia-smi --query-gpu=name --format=csv,noheader
