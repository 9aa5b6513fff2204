# Source at the start of a shell on a GPU machine that reaches no package registry, from the repository root:
#   source tools/gpu-machine/setup.sh
# It unpacks .whl-x (made by tools/gpu-machine/wheels.sh and copied beside the tree) into a site folder once per machine
# (VIDSPEC_SITE, default vidspec-site in the system's temporary folder),
# installs the three vidspec distributions there (not editable, so the `vidspec` command and its entry-point
# subcommands exist), puts the site folder first on PYTHONPATH and PATH, and checks the imports. The machine must already
# have CUDA torch, lightning, safetensors and tokenizers. A copied tree may carry a stale .git: write the commit to
# .gitsha beside it (git rev-parse HEAD > .gitsha) and results record that one (VIDSPEC_GIT_SHA).
# Exit status 3 (from the sourcing shell) when something is missing.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
SITE=${VIDSPEC_SITE:-$(python3 -c "import tempfile; print(tempfile.gettempdir())")/vidspec-site}
if [ ! -f "$SITE/.wheels-ready" ]; then
  mkdir -p "$SITE"
  tar -C "$SITE" -xJf .whl-x/p.txz || { echo "setup: cannot unpack .whl-x/p.txz (run tools/gpu-machine/wheels.sh)"; exit 3; }
  if [ -f .whl-x/av.txz ]; then tar -C "$SITE" -xJf .whl-x/av.txz || exit 3; fi
  touch "$SITE/.wheels-ready"
fi
# Every time (the tree may be newer than the last install); a script started from a shell that already ran this
# (VIDSPEC_SETUP_DONE) skips it, so two runs side by side never install into the same folder at once.
if [ -z "${VIDSPEC_SETUP_DONE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$SITE" \
    ./packages/decoding ./packages/draft_training ./packages/evaluation > "$SITE/install.log" 2>&1 \
    || { cat "$SITE/install.log"; echo "setup: pip install of the vidspec packages failed"; exit 3; }
fi
export VIDSPEC_SETUP_DONE=1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
[ -f .gitsha ] && export VIDSPEC_GIT_SHA=$(cat .gitsha)
python3 -c "import torch, transformers, datasets, jsonargparse, lightning, vidspec.decoding, vidspec.draft_training, vidspec.evaluation; print('setup: torch', torch.__version__, 'transformers', transformers.__version__, 'lightning', lightning.__version__, 'cuda', torch.cuda.is_available())" || exit 3
