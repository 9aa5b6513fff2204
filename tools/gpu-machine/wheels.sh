#!/usr/bin/env bash
# Packs what a rented GPU machine without a package registry lacks for vidspec, from the pins in
# constraints/gpu.txt, into the ignored folder .whl-x (run here, where pip reaches the registry):
#   .whl-x/p.txz   transformers (only the model families vidspec uses), datasets, dill, multiprocess,
#                  jsonargparse, docstring_parser, typeshed_client: unpacked py3 wheels, a few MB
#   .whl-x/av.txz  PyAV (its FFmpeg libraries stripped, ~20 MB), checked to write and read back an mp4
# A machine image that already has CUDA torch, lightning, safetensors and tokenizers needs only these. Carry .whl-x
# into the machine and source tools/gpu-machine/setup.sh there.
#   PYVER=3.12 (the machine's Python), STRIP=0 keeps PyAV's libraries unstripped, NO_AV=1 skips PyAV
#   (vidspec then cannot read videos; the training benchmark does not need it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER=${PYVER:-3.12}
pin() { grep -i "^$1==" constraints/gpu.txt || { echo "wheels.sh: $1 is not pinned in constraints/gpu.txt" >&2; exit 2; }; }
W=$(mktemp -d); S=$(mktemp -d)
trap 'rm -rf "$W" "$S"' EXIT
P="--no-deps --only-binary=:all: --python-version $PYVER --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any"
PKGS="$(pin transformers) $(pin datasets) $(pin dill) $(pin multiprocess) $(pin jsonargparse) $(pin docstring_parser) $(pin typeshed_client)"
[[ "${NO_AV:-0}" == 1 ]] || PKGS="$PKGS $(pin av)"
# shellcheck disable=SC2086
python3 -m pip download -q $P -d "$W" $PKGS
mkdir -p "$S/p" "$S/av" .whl-x
for w in "$W"/*.whl; do case $(basename "$w") in av-*) d=av ;; *) d=p ;; esac; unzip -q -o "$w" -d "$S/$d"; done
# Only the model families vidspec loads (and what their auto classes import): the whole of transformers would take
# a large part of what one call may carry.
KEEP=" auto qwen2 qwen2_vl qwen2_5_vl llava llava_next llava_next_video llava_onevision siglip llama gpt2 encoder_decoder __init__.py "
for m in "$S/p/transformers/models"/*; do [[ "$KEEP" == *" $(basename "$m") "* ]] || rm -rf "$m"; done
if [[ "${STRIP:-1}" != 0 && -d "$S/av/av" ]]; then
  command -v strip > /dev/null || { echo "wheels.sh: needs strip (binutils) to trim PyAV's libraries (or STRIP=0)" >&2; exit 2; }
  find "$S/av" -name "*.so*" -type f -exec strip --strip-unneeded {} +
fi
tar -C "$S/p" -cJf .whl-x/p.txz .
if [[ -d "$S/av/av" ]]; then tar -C "$S/av" -cJf .whl-x/av.txz .; else rm -f .whl-x/av.txz; fi
grep -qx "/.whl-x/" .git/info/exclude 2>/dev/null || echo "/.whl-x/" >> .git/info/exclude
ls -la .whl-x
if [[ -f .whl-x/av.txz ]]; then  # the trimmed PyAV must still write and read an mp4 (abi3 libraries: this Python loads them)
  T=$(mktemp -d); tar -C "$T" -xJf .whl-x/av.txz
  PYTHONPATH="$T" python3 - "$T" <<'PY'
import sys

import av
import numpy as np

assert av.__file__.startswith(sys.argv[1]), av.__file__
path = sys.argv[1] + "/check.mp4"
with av.open(path, mode="w", format="mp4") as out:
    stream = out.add_stream("libx264", rate=8)
    stream.width = stream.height = 64
    stream.pix_fmt = "yuv420p"
    for i in range(8):
        out.mux(stream.encode(av.VideoFrame.from_ndarray(np.full((64, 64, 3), 30 * i, np.uint8), format="rgb24")))
    out.mux(stream.encode())
with av.open(path) as f:
    n = sum(1 for _ in f.decode(video=0))
assert n == 8, n
print("wheels.sh: the stripped PyAV", av.__version__, "wrote and read back an 8-frame mp4")
PY
  rm -rf "$T"
fi
