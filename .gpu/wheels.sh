# Rebuilds .whl-x/{p,av}.txz for .gpu/setup.sh (run here, where pip reaches the registry).
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -i "^$1==" constraints/cpu.txt; }
W=$(mktemp -d); S=$(mktemp -d)
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any"
python3 -m pip download -q $P -d "$W" "$(pin transformers)" "$(pin datasets)" "$(pin dill)" "$(pin multiprocess)" \
  "$(pin jsonargparse)" "$(pin docstring_parser)" "$(pin typeshed_client)" "$(pin av)"
mkdir -p "$S/p" "$S/av" .whl-x
for w in "$W"/*.whl; do case $(basename "$w") in av-*) d=av ;; *) d=p ;; esac; unzip -q -o "$w" -d "$S/$d"; done
# Only the model families vidspec uses (and what their auto classes import) travel: the whole transformers
# (4.5 MB compressed) put the tree over the 64 MiB a call may carry.
KEEP=" auto qwen2 qwen2_vl qwen2_5_vl llava llava_next llava_next_video llava_onevision siglip llama gpt2 encoder_decoder __init__.py "
for m in "$S/p/transformers/models"/*; do [[ "$KEEP" == *" $(basename "$m") "* ]] || rm -rf "$m"; done
tar -C "$S/p" -cJf .whl-x/p.txz . && tar -C "$S/av" -cJf .whl-x/av.txz .
grep -qx "/.whl-x/" .git/info/exclude 2>/dev/null || echo "/.whl-x/" >> .git/info/exclude
ls -la .whl-x
