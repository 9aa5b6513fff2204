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
tar -C "$S/p" -cJf .whl-x/p.txz . && tar -C "$S/av" -cJf .whl-x/av.txz .
grep -qx "/.whl-x/" .git/info/exclude 2>/dev/null || echo "/.whl-x/" >> .git/info/exclude
ls -la .whl-x
