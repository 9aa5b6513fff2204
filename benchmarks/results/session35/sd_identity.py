"""Are strict speculative captions token-identical to the target's greedy ones, in a given dtype? (CPU)

Session 34's and 35's 24-layer Qwen2.5-VL targets wrote, on the H100 in bfloat16 (train_testbed.py --device cuda), at
least one draft-VLM caption that differs from the target's own greedy caption ("lossless": false), while the 16-layer
ones did not. This decodes the first ``--limit`` validation captions with ``ar`` and ``sd`` (K = 4) on the CPU in
``--dtype`` and counts the captions whose tokens differ, with the first position that does. A float32 run with none
and a bfloat16 run with some would put the difference on the dtype's rounding (a verify pass over K + 1 positions
and a one-token step round differently), not on the speculative path.

    python benchmarks/results/session35/sd_identity.py --data DATA --target T --draft D --dtype float32 --out F
"""

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for testbed_common
from testbed_common import caption_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--limit", type=int, default=90)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    data = Path(a.data)
    target = load_target(a.target, device="cpu", dtype=a.dtype)
    draft = load_target(a.draft, device="cpu", dtype=a.dtype)
    ar = build_decoder("ar", target=target)
    sd = build_decoder("sd", target=target, draft=draft, k=a.k)
    differ = []
    rows = caption_rows(data, "validation", a.limit)
    for r in rows:
        request = Request(prompt=r["question"], clip=target.read_video(str(data / r["video"])))
        x = ar.generate(request, max_new_tokens=64)
        y = sd.generate(request, max_new_tokens=64)
        if x.token_ids != y.token_ids:
            at = next((i for i, (p, q) in enumerate(zip(x.token_ids, y.token_ids)) if p != q),
                      min(len(x.token_ids), len(y.token_ids)))
            differ.append({"video": r["video"], "position": at, "ar": x.text, "sd": y.text})
    doc = {"args": vars(a), "captions": len(rows), "differ": len(differ), "examples": differ[:5],
           "machine": {"python": platform.python_version(), "torch": torch.__version__,
                       "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()}}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print(f"{a.dtype}: {len(differ)} of {len(rows)} captions differ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
