# Rebuilds .whl-x/{p,av}.txz for .gpu/setup.sh (run here, where pip reaches the registry), and checks that the
# stripped PyAV still writes and reads an mp4.
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
# PyAV's bundled FFmpeg libraries carry their symbol tables; stripped, av.txz is ~20 MB instead of 25 (session 28: the
# stripped copy wrote and read back SynthVid mp4s here). That room is what a second release family needs in the carry.
# STRIP=0 keeps them as the wheel has them (27.7 MB of wheels: the tree must then stay under ~38.4 MB).
if [[ "${STRIP:-1}" != 0 ]]; then
  command -v strip > /dev/null || { echo "wheels.sh: needs strip (binutils) to trim PyAV's libraries (or STRIP=0)" >&2; exit 2; }
  find "$S/av" -name "*.so*" -type f -exec strip --strip-unneeded {} +
fi
tar -C "$S/p" -cJf .whl-x/p.txz . && tar -C "$S/av" -cJf .whl-x/av.txz .
grep -qx "/.whl-x/" .git/info/exclude 2>/dev/null || echo "/.whl-x/" >> .git/info/exclude
ls -la .whl-x
# The trimmed PyAV must still do what SynthVid and the video reader need (abi3 libraries: this Python loads them).
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
        frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 30 * i, np.uint8), format="rgb24")
        out.mux(stream.encode(frame))
    out.mux(stream.encode())
with av.open(path) as f:
    n = sum(1 for _ in f.decode(video=0))
assert n == 8, n
print("wheels.sh: the stripped PyAV", av.__version__, "wrote and read back an 8-frame mp4")
PY
rm -rf "$T" "$W" "$S"
