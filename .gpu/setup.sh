# Sourced at the start of every device call: makes the lent H200 run vidspec.
# The machine lacks datasets, jsonargparse, av (and has transformers 5.17, while constraints/cpu.txt pins 5.24),
# and reaches no registry. They travel as two xz tarballs of unpacked py3.12 wheels (transformers trimmed to the model
# families vidspec uses) in the ignored folder .whl-x
# (carry it): p.txz = transformers 5.24.0, datasets 5.2.0, dill, multiprocess, jsonargparse 4.53.0,
# docstring_parser, typeshed_client (2.6 MB); av.txz = PyAV 18.1.0 (19.9 MB, its libraries stripped). decord (10 MB) does not fit beside
# the tree; video.py falls back to PyAV. Rebuild them with `bash .gpu/wheels.sh`.
# Then the three vidspec distributions are installed (not editable) into the same folder, so the `vidspec`
# command and its entry-point subcommands exist. The commit comes from the carried .gitsha (the machine's
# .git copy may name a stale commit).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ ! -f /tmp/site/.wheels-ready ]; then  # once per machine
  mkdir -p /tmp/site
  tar -C /tmp/site -xJf .whl-x/p.txz && tar -C /tmp/site -xJf .whl-x/av.txz || { echo "setup: cannot unpack .whl-x"; exit 3; }
  touch /tmp/site/.wheels-ready
fi
# Every call (a warm machine's copy may be older than this call's tree): the vidspec distributions. Scripts started by
# a call that has already sourced this (VIDSPEC_SETUP_DONE) skip the install: two runs side by side must not
# reinstall into /tmp/site at the same time.
if [ -z "${VIDSPEC_SETUP_DONE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target /tmp/site \
    ./packages/decoding ./packages/draft_training ./packages/evaluation > /tmp/site-install.log 2>&1 \
    || { cat /tmp/site-install.log; echo "setup: pip install of the vidspec packages failed"; exit 3; }
fi
export VIDSPEC_SETUP_DONE=1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
[ -f .gitsha ] && export VIDSPEC_GIT_SHA=$(cat .gitsha)
python3 -c "import torch, transformers, datasets, jsonargparse, av, vidspec.decoding, vidspec.draft_training, vidspec.evaluation; print('setup: torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" || exit 3
