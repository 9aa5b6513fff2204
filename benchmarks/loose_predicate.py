"""Which loose mismatches keep the facts? The LVSpec acceptance predicate, swept side by side.

The session-4 headline run on the H200 (docs/RESULTS.md section 11) showed the loose methods
changing facts: with the spec's default predicate ``always``, every loose position accepts the
draft's token, and the cosine relevance score lets colour, shape and direction words through
("white" -> "medium blue", "right" -> "left"), so lvspec-pst kept 65% and sparrow-lvspec-pst 53% of
AR's fact F1. ALGORITHMS.md section 2 makes the predicate pluggable: ``topk`` (the draft's token is
among the target's top k at that position) and ``prob`` (the target gives it probability >= eps).
A grounded target is confident about a visual word, so a wrong colour gets almost no probability,
while fillers ("the" / "a", "slides" / "drifts") split theirs: the predicate can tell them apart
where the relevance score does not. This script measures that.

One process, CPU, the committed releases (target, draft VLM, Sparrow draft), greedy, batch 1,
K = 4, SynthVid held-out captions (one per video, the target's caption style). Every method decodes
the same requests. Per method: τ (tokens per target pass, bonus included), fact-judge precision /
recall / F1 and retention (F1 and precision, method / AR on the same samples), share of outputs
token-identical to AR, loose and shift accepted shares. Writes JSON with machine info and a plot of
τ against F1 retention (the speed/fidelity trade-off; on CPU τ, not wall time, is the speed axis:
the H200 DSR of each point needs a GPU run).

Usage::

    .venv/bin/python benchmarks/loose_predicate.py                      # ~6 min on 2 CPU cores
    .venv/bin/python benchmarks/loose_predicate.py --limit 2 --variants always,prob:0.1 --out /tmp/lp
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

#: predicate variants: "always", "prob:EPS", "topk:K"; "...@LAM" sets λ (default the spec's 0.7)
VARIANTS = "always,prob:0.3,prob:0.1,prob:0.03,prob:0.01,topk:2,topk:3,prob:0.1@1.0,prob:0.3@1.0"


def parse_variant(spec: str) -> tuple[str, dict]:
    """``prob:0.1@0.9`` -> (name, loose options). Raises ValueError on a bad spec."""
    head, _, lam = spec.partition("@")
    kind, _, arg = head.partition(":")
    opts: dict = {"lam": float(lam) if lam else 0.7}
    if kind == "always" and not arg:
        opts["predicate"] = "always"
    elif kind == "prob" and arg:
        opts.update(predicate="prob", eps=float(arg))
    elif kind == "topk" and arg:
        opts.update(predicate="topk", top_k=int(arg))
    else:
        raise ValueError(f"bad variant {spec!r}: use always, prob:EPS or topk:K, optionally @LAMBDA")
    return spec, opts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_testbed_args(ap, limit=30)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--variants", default=VARIANTS, help=f"comma list (default {VARIANTS})")
    ap.add_argument("--methods", default="lvspec-pst,sparrow-lvspec-pst")
    ap.add_argument("--out", default="benchmarks/results/loose_predicate")
    args = ap.parse_args()

    from tqdm import tqdm

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.evaluation.synthvid.judge import judge_caption

    variants = [parse_variant(v) for v in args.variants.split(",") if v]
    data = Path(args.data)
    t_start = time.perf_counter()
    target = load_target(args.target, device="cpu")
    draft = load_target(args.draft, device="cpu")
    decs = {"ar": build_decoder("ar", target=target),
            "sd": build_decoder("sd", target=target, draft=draft, k=args.k),
            "sparrow": build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k)}
    for method in args.methods.split(","):
        d = args.sparrow if method.startswith("sparrow") else draft
        for name, opts in variants:
            decs[f"{method} {name}"] = build_decoder(method, target=target, draft=d, k=args.k, loose=opts)

    rows = caption_rows(data, args.split, args.limit, style=args.style)

    keys = ("emitted", "passes", "claims", "true", "found", "facts", "identical", "loose", "shift", "tokens")
    acc = {n: dict.fromkeys(keys, 0) for n in decs}
    examples = []
    for i, r in enumerate(tqdm(rows, desc="captions", unit="video")):
        req = Request(prompt=r["question"], clip=target.read_video(str(data / r["video"])))
        facts = json.loads(r["facts"])
        ar_ids, ex = None, {"reference": r["answer"]}
        for name, d in decs.items():
            res = d.generate(req, max_new_tokens=args.max_new_tokens)
            a = acc[name]
            if name == "ar":
                ar_ids = res.token_ids
            j = judge_caption(res.text, facts)
            a["identical"] += int(res.token_ids == ar_ids)
            a["emitted"] += sum(s.emitted for s in res.steps)
            a["passes"] += len(res.steps)
            a["loose"] += res.loose_accepted
            a["shift"] += res.shift_accepted
            a["tokens"] += res.num_new_tokens
            a["claims"] += len(j.claims)
            a["true"] += sum(c.true for c in j.claims)
            a["found"] += sum(j.facts_found.values())
            a["facts"] += sum(j.facts_total.values())
            if i < 4:
                ex[name] = res.text
        if i < 4:
            examples.append(ex)

    def f1(a: dict) -> tuple[float | None, float | None, float]:
        p = a["true"] / a["claims"] if a["claims"] else None
        r = a["found"] / a["facts"] if a["facts"] else None
        return p, r, (2 * p * r / (p + r) if p and r else 0.0)

    ar_p, _, ar_f1 = f1(acc["ar"])
    results = {}
    for name, a in acc.items():
        p, r, f = f1(a)
        results[name] = {
            "tau": a["emitted"] / a["passes"] if a["passes"] else None, "precision": p, "recall": r, "f1": f,
            "retention_f1": f / ar_f1 if ar_f1 else None,
            "retention_precision": p / ar_p if p is not None and ar_p else None,
            "identical_to_ar": a["identical"] / len(rows),
            "loose_accepted_share": a["loose"] / a["tokens"] if a["tokens"] else 0.0,
            "shift_accepted_share": a["shift"] / a["tokens"] if a["tokens"] else 0.0,
        }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python " + " ".join(sys.argv), "machine": machine_info(), "git": git_info(), "samples": len(rows),
           "k": args.k, "max_new_tokens": args.max_new_tokens, "variants": dict(variants),
           "seconds": time.perf_counter() - t_start, "results": results, "examples": examples,
           "models": {"target": args.target, "draft": args.draft, "sparrow": args.sparrow, "data": args.data}}
    (out / "loose_predicate.json").write_text(json.dumps(doc, indent=1) + "\n")

    print(f"\n{len(rows)} held-out captions, K = {args.k}, CPU\n")
    print("| method | τ | precision | recall | retention (F1) | retention (precision) | identical | loose / shift |")
    print("|---|---|---|---|---|---|---|---|")
    for name, v in results.items():
        print(f"| {name} | {v['tau']:.2f} | {v['precision'] or 0:.3f} | {v['recall'] or 0:.3f} | "
              f"{v['retention_f1'] or 0:.1%} | {v['retention_precision'] or 0:.1%} | {v['identical_to_ar']:.0%} | "
              f"{v['loose_accepted_share']:.0%} / {v['shift_accepted_share']:.0%} |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, marker in ((m, mk) for m, mk in zip(args.methods.split(","), "os^")):
        pts = [(results[f"{method} {n}"]["tau"], results[f"{method} {n}"]["retention_f1"] or 0, n) for n, _ in variants]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=method)
        for x, y, n in pts:
            ax.annotate(n, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for name in ("sd", "sparrow"):
        ax.scatter([results[name]["tau"]], [results[name]["retention_f1"] or 0], marker="x", label=f"{name} (strict)")
    ax.axhline(0.995, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("τ (tokens per target pass)")
    ax.set_ylabel("retention (fact F1 / AR's)")
    ax.set_title(f"Loose acceptance predicate, {len(rows)} SynthVid captions (CPU, K = {args.k})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loose_predicate.png", dpi=120)
    print(f"\nwrote {out / 'loose_predicate.json'} and loose_predicate.png")


if __name__ == "__main__":
    main()
