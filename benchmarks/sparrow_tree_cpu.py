"""How much does a tree raise Sparrow's τ? Chain vs EAGLE-2 tree drafting on the committed releases, CPU.

On the H200 a target verify pass is launch-bound (about 0.85 ms whatever the number of tokens, up
to a few dozen), so verifying a tree of 16-48 draft tokens costs about what a 5-token chain does,
and τ (tokens emitted per target pass, bonus token included) is the speed that a tree can buy.
This script measures that τ; wall time on 2 CPU cores says nothing about the H200 and is recorded
only for completeness.

One process, CPU, greedy, batch 1, strict (lossless) verification: the committed target
(``data/releases/synthvid-target``) and Sparrow draft (``data/releases/sparrow-synthvid``),
SynthVid held-out captions (one caption row per video, the target's caption style). Methods: AR,
chain Sparrow (``sparrow`` method, K = 4, 6 and 8 by default) and tree Sparrow
(:class:`~vidspec.decoding.fast.TreeSpeculativeDecoder` with a :class:`~vidspec.decoding.fast.TreeSparrowDrafter`) at the ``total-depth-top_k`` settings given.
Per method: τ, mean accepted draft tokens per round, target-pass tokens per round (drafted + 1:
what the verify pass runs), share of outputs token-identical to AR (must be 100%: strict
verification is lossless), draft and verify seconds. Writes ``sparrow_tree_cpu.json`` with machine
info to ``--out`` and prints a markdown table.

Usage::

    .venv/bin/python benchmarks/sparrow_tree_cpu.py                        # a few minutes on 2 CPU cores
    .venv/bin/python benchmarks/sparrow_tree_cpu.py --limit 2 --trees 8-3-2 --out /tmp/st
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

#: tree settings "total-depth-top_k" (the Sparrow paper uses 30-4-8 and 48-5-10)
TREES = "8-4-2,16-5-4,30-4-8,30-6-8,48-5-10,30-8-4,48-8-8,64-10-8"


def parse_tree(spec: str) -> dict[str, int]:
    """``30-4-8`` -> ``{"total_tokens": 30, "depth": 4, "top_k": 8}``. Raises ValueError on a bad spec."""
    parts = spec.split("-")
    try:
        total, depth, top_k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"bad tree {spec!r}: use TOTAL-DEPTH-TOPK, e.g. 30-4-8") from None
    if min(total, depth, top_k) < 1:
        raise ValueError(f"bad tree {spec!r}: every number must be >= 1")
    return {"total_tokens": total, "depth": depth, "top_k": top_k}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_testbed_args(ap, ("target", "sparrow"))
    ap.add_argument("--ks", default="4,6,8", help="chain K values (comma list)")
    ap.add_argument("--trees", default=TREES, help=f"tree settings TOTAL-DEPTH-TOPK, comma list (default {TREES})")
    ap.add_argument("--out", default="benchmarks/results/sparrow_tree_cpu")
    args = ap.parse_args()

    from tqdm import tqdm

    from vidspec.decoding.fast import TreeSparrowDrafter, TreeSpeculativeDecoder
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    trees = {f"tree {t}": parse_tree(t) for t in args.trees.split(",") if t}
    ks = [int(k) for k in args.ks.split(",") if k]
    data = Path(args.data)
    t_start = time.perf_counter()
    target = load_target(args.target, device="cpu")
    decs = {"ar": build_decoder("ar", target=target)}
    for k in ks:
        decs[f"chain K={k}"] = build_decoder("sparrow", target=target, draft=args.sparrow, k=k)
    drafter = TreeSparrowDrafter.from_pretrained(args.sparrow, target)  # one drafter serves every tree shape
    for name, shape in trees.items():
        decs[name] = TreeSpeculativeDecoder(target, drafter, method="tree-sparrow", **shape)

    rows = caption_rows(data, args.split, args.limit, style=args.style)

    keys = ("emitted", "passes", "accepted", "pass_tokens", "identical", "tokens", "draft_s", "verify_s")
    acc = {n: dict.fromkeys(keys, 0) for n in decs}
    for r in tqdm(rows, desc="captions", unit="video"):
        req = Request(prompt=r["question"], clip=target.read_video(str(data / r["video"])))
        ar_ids = None
        for name, d in decs.items():
            res = d.generate(req, max_new_tokens=args.max_new_tokens)
            if name == "ar":
                ar_ids = res.token_ids
            a = acc[name]
            a["identical"] += int(res.token_ids == ar_ids)
            a["tokens"] += res.num_new_tokens
            for s in res.steps:
                a["emitted"] += s.emitted
                a["passes"] += 1
                a["accepted"] += s.accepted
                a["pass_tokens"] += s.drafted + 1
                a["draft_s"] += s.draft_s
                a["verify_s"] += s.verify_s

    results = {}
    for name, a in acc.items():
        n = a["passes"]
        results[name] = {
            "tau": a["emitted"] / n if n else None,
            "accepted_per_round": a["accepted"] / n if n else None,
            "target_pass_tokens": a["pass_tokens"] / n if n else None,
            "identical_to_ar": a["identical"] / len(rows) if rows else None,
            "rounds": n, "tokens": a["tokens"],
            "draft_ms_per_round": 1e3 * a["draft_s"] / n if n else None,
            "verify_ms_per_round": 1e3 * a["verify_s"] / n if n else None,
            **({"tree": trees[name]} if name in trees else {}),
            **({"k": int(name.split("=")[1])} if name.startswith("chain") else {}),
        }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python " + " ".join(sys.argv), "machine": machine_info(), "git": git_info(), "samples": len(rows),
           "max_new_tokens": args.max_new_tokens, "split": args.split, "style": args.style,
           "seconds": time.perf_counter() - t_start, "results": results,
           "models": {"target": args.target, "sparrow": args.sparrow, "data": args.data},
           "notes": "strict greedy verification; tau = tokens emitted per target pass (bonus included, AR = 1.0); "
                    "target_pass_tokens = draft tokens + 1 per verify pass; CPU times are not the H200's"}
    (out / "sparrow_tree_cpu.json").write_text(json.dumps(doc, indent=1) + "\n")

    print(f"\n{len(rows)} held-out captions, max {args.max_new_tokens} new tokens, strict greedy, CPU\n")
    print("| method | τ | accepted / round | target-pass tokens / round | identical to AR | draft ms / round "
          "| verify ms / round |")
    print("|---|---|---|---|---|---|---|")
    for name, v in results.items():
        print(f"| {name} | {v['tau']:.2f} | {v['accepted_per_round']:.2f} | {v['target_pass_tokens']:.1f} | "
              f"{v['identical_to_ar']:.0%} | {v['draft_ms_per_round']:.1f} | {v['verify_ms_per_round']:.1f} |")
    print(f"\nwrote {out / 'sparrow_tree_cpu.json'}")


if __name__ == "__main__":
    main()
