"""End to end against transformers' own ``generate`` on the same target: tokens per second.

Issue 9 asks for the end-to-end tokens/s ratio against HF ``generate`` on the same target. For each
held-out SynthVid caption prompt (the first caption row of each video), three decoders produce the caption
from the video file, side by side in one process, in turn per sample (so load drift hits them alike):

- ``hf-generate``: ``target.hf_generate`` (``model.generate``, greedy, transformers' dynamic cache),
  after reading the video and building the prompt with the same adapter;
- ``ar``: our autoregressive decoding on the chosen engine (``--engine fast``: static KV cache and
  CUDA graphs on CUDA);
- ``sparrow``: our strict speculative decoding with the Sparrow draft (``--k``), lossless.

Each sample's clock runs from reading the video to the last token (CUDA synchronised), so video
reading, preprocessing, prefill and decoding are all in it. One untimed warm-up run per decoder (on the first sample),
then, on the fast engine, the CUDA graphs of every step length and cache bucket are captured as `vidspec eval`
captures them. Session 5's H200 run did not, and there Sparrow ran 3.8x slower end to end than our AR, most
likely from graph captures inside timed samples (not re-measured).
Reported per decoder: new tokens, seconds, tokens/s (sum of tokens / sum of seconds), the ratio to
``hf-generate``, and the share of samples whose tokens equal ``hf-generate``'s (ours are tested to be
token-identical to it; bf16 on a GPU may differ in rare near-ties). Writes ``hf_generate_e2e.json``
with machine info to ``--out`` and prints a table.

Usage::

    python benchmarks/hf_generate_e2e.py --device cuda --engine fast --limit 20 --out DIR   # the H200
    .venv/bin/python benchmarks/hf_generate_e2e.py --limit 4 --out /tmp/hfg                  # CPU, eager
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from testbed_common import add_testbed_args, caption_rows  # noqa: E402

from vidspec.evaluation.runner import git_info, machine_info  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_testbed_args(ap, ("target", "sparrow"), style=False, limit=20)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default="eager", choices=("eager", "fast"))
    ap.add_argument("--out", default="benchmarks/results/hf_generate_e2e")
    args = ap.parse_args()

    import torch
    from tqdm import tqdm

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.evaluation.runner import capture_fast_graphs

    data = Path(args.data)
    dev = torch.device(args.device)
    target = load_target(args.target, device=args.device)
    decs = {"ar": build_decoder("ar", target=target, engine=args.engine),
            "sparrow": build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k, engine=args.engine)}

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def run(name: str, row) -> tuple[list[int], float]:
        sync()
        t = time.perf_counter()
        clip = target.read_video(str(data / row["video"]))
        req = Request(prompt=row["question"], clip=clip)
        if name == "hf-generate":
            ids = target.hf_generate(req, args.max_new_tokens)
        else:
            ids = list(decs[name].generate(req, max_new_tokens=args.max_new_tokens).token_ids)
        sync()
        return ids, time.perf_counter() - t

    rows = caption_rows(data, args.split, args.limit)
    if not rows:
        raise SystemExit(f"{data}: no caption rows in split {args.split!r}")
    names = ("hf-generate", "ar", "sparrow")
    for name in names:  # warm-up (untimed): the first sample, measured again below
        run(name, rows[0])
        if name in decs:
            # As `vidspec eval` does: capture the CUDA graphs every later decode can meet (step
            # lengths, cache buckets), so no capture lands inside a timed sample (none off CUDA).
            capture_fast_graphs(decs[name], args.max_new_tokens)

    acc = {n: {"tokens": 0, "seconds": 0.0, "identical": 0} for n in names}
    for row in tqdm(rows, desc="videos", unit="video"):
        ref = None
        for name in names:
            ids, sec = run(name, row)
            ref = ids if name == "hf-generate" else ref
            a = acc[name]
            a["tokens"] += len(ids)
            a["seconds"] += sec
            a["identical"] += int(ids == ref)

    hf_tps = acc["hf-generate"]["tokens"] / acc["hf-generate"]["seconds"]
    results = {n: {**a, "tokens_per_s": a["tokens"] / a["seconds"],
                   "ratio_to_hf_generate": a["tokens"] / a["seconds"] / hf_tps,
                   "identical_to_hf_generate": a["identical"] / len(rows)} for n, a in acc.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python " + " ".join(sys.argv), "machine": machine_info(str(args.device)), "git": git_info(), "samples": len(rows),
           "engine": args.engine, "device": args.device, "k": args.k, "max_new_tokens": args.max_new_tokens,
           "target": args.target, "sparrow": args.sparrow, "data": args.data,
           "conventions": "end to end per sample (video reading, preprocessing, prefill, decode), batch 1, greedy; "
                          "tokens/s = sum of new tokens / sum of seconds; one untimed warm-up run per decoder, then "
                          "the fast engine's CUDA graphs captured before timing",
           "results": results}
    (out / "hf_generate_e2e.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{len(rows)} videos, {args.device}, engine {args.engine}, end to end\n")
    print("| decoder | tokens | seconds | tokens/s | vs HF generate | identical to HF generate |\n|---|---|---|---|---|---|")
    for n, v in results.items():
        print(f"| {n} | {v['tokens']} | {v['seconds']:.2f} | {v['tokens_per_s']:.1f} | {v['ratio_to_hf_generate']:.2f}x | "
              f"{v['identical_to_hf_generate']:.0%} |")
    print(f"\nwrote {out / 'hf_generate_e2e.json'}")


if __name__ == "__main__":
    main()
