"""Which loose settings keep every fact? The sweep behind DecodeConfig's loose defaults.

For each loose method (lvspec, lvspec-pst, fly, sparrow-lvspec-pst) and each setting of the loose knobs
(predicate, ε, λ, PST window; FLy's θ), decode every caption and MCQ of a SynthVid set with a committed
release set, greedy, on CPU, and compare with AR on the same samples: fact-F1 retention (mean F1 over AR's),
MCQ retention (accuracy over AR's), how many samples lost a fact or an answer, and τ (tokens per target
pass). Models load once; AR runs once per sample; every setting reuses it.

The defaults were tuned on one seed and checked on seeds never used for tuning (docs/results.md, section 5).

Usage::

    vidspec data synthvid --out data/cache/sv-seed2 --num_videos 60 --seed 2 --preset easy --frames 8 \\
        --size 64x64 --styles alpha:1,beta:1 --split validation --mcq_per_video 1 --open_per_video 0
    .venv/bin/python benchmarks/loose_defaults.py --data data/cache/sv-seed2 --grid full \\
        --out benchmarks/results/loose_defaults_llava_ov_cpu_seed2.json
    .venv/bin/python benchmarks/loose_defaults.py --data data/cache/sv-seed3 --grid check \\
        --releases data/releases/qwen2.5-vl --out ...   # strict, the defaults and the paper rule only
    .venv/bin/python benchmarks/loose_defaults.py merge OUT.json NAME:tune:A.json+B.json NAME2:check:C.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from vidspec.decoding.config import DecodeConfig

LOOSE_METHODS = ("lvspec", "lvspec-pst", "fly", "sparrow-lvspec-pst")
#: The tuning sweep's label of the setting chosen as DecodeConfig's defaults (the one a check run calls "defaults";
#: the full grid ran with PST window 3, the defaults have PST off, so a tuning run adds a "defaults" row).
DEFAULTS_LABEL = "defaults"
#: The strict twins, run once per sweep as the τ reference (label "strict").
STRICT_METHODS = ("sd", "sparrow")


def grid(name: str) -> list[tuple[str, dict, dict]]:
    """``(label, DecodeConfig changes, FLy options)`` of each setting the sweep runs."""
    paper = DecodeConfig.paper().to_dict()
    paper_changes = {k: paper[k] for k in ("lam", "predicate", "eps", "pst_window")}
    if name == "strict":
        return [("strict", {}, {})]
    if name == "pst":  # PST's reach at the probability gate (lvspec-pst's one extra knob)
        return [(f"prob eps {eps} lam 1 pst {w}", {"lam": 1.0, "predicate": "prob", "eps": eps, "pst_window": w}, {})
                for eps, w in ((0.3, 1), (0.3, 2), (0.4, 1))]
    if name == "defaults":
        return [("defaults", {}, {})]
    if name == "check":
        return [("strict", {}, {}), ("defaults", {}, {}), ("paper", paper_changes, {})]
    out: list[tuple[str, dict, dict]] = [("paper", paper_changes, {})]
    for eps in (0.2, 0.3, 0.4, 0.5):
        out.append((f"prob eps {eps} lam 1", {"lam": 1.0, "predicate": "prob", "eps": eps, "pst_window": 3}, {}))
    out.append(("prob eps 0.3 lam 0.7", {"lam": 0.7, "predicate": "prob", "eps": 0.3, "pst_window": 3}, {}))
    for lam in (0.5, 0.9):
        out.append((f"always lam {lam}", {"lam": lam, "predicate": "always", "pst_window": 3}, {}))
    out.append(("prob eps 0.3 lam 1 pst 1", {"lam": 1.0, "predicate": "prob", "eps": 0.3, "pst_window": 1}, {}))
    for theta in (0.3, 0.7):
        out.append((f"fly theta {theta}", {}, {"theta": theta}))
    return out


def merge(out: str, parts: list[str]) -> int:
    """Combine sweep files into the one result file docs/results.md names.

    Each part is ``NAME:ROLE:FILE[+FILE...]`` (ROLE ``tune`` or ``check``); the files of one part (say a
    full grid, its PST rows and its strict rows on the same data) are merged setting by setting.
    """
    runs: dict = {}
    for part in parts:
        name, role, files = part.split(":", 2)
        run: dict = {"role": role, "settings": {}, "ar": {}, "parts": []}
        for f in files.split("+"):
            data = json.loads(Path(f).read_text())
            for label, row in data["settings"].items():
                run["settings"].setdefault(label, {"changes": row["changes"], "fly": row["fly"], "methods": {}})
                run["settings"][label]["methods"].update(row["methods"])
            run["ar"].update(data["ar"])
            run["parts"].append({k: data[k] for k in ("command", "data", "releases", "grid", "limit", "seconds",
                                                       "machine", "git", "defaults")})
        run["defaults_label"] = "defaults" if "defaults" in run["settings"] else DEFAULTS_LABEL
        runs[name] = run
    Path(out).write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        return merge(argv[1], argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="SynthVid folder (captions at the top, MCQ under mcq/)")
    ap.add_argument("--releases", default="data/releases", help="folder with synthvid-target, -draft, sparrow-")
    ap.add_argument("--grid", default="full", choices=("full", "check", "strict", "pst", "defaults"),
                    help="full: the tuning sweep; pst: PST's window; check: strict, the defaults and the paper rule; "
                         "strict: sd and sparrow")
    ap.add_argument("--limit", type=int, default=60, help="videos (one caption and one MCQ each)")
    ap.add_argument("--methods", default=",".join(STRICT_METHODS + LOOSE_METHODS))
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: each task's")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from vidspec.decoding.drafters.sparrow import SparrowDraftModel
    from vidspec.decoding.methods import build_decoder, get_method
    from vidspec.decoding.models import load_target
    from vidspec.evaluation.benchmarks import get_task, load_benchmark
    from vidspec.evaluation.runner import decode_sample, fidelity, git_info, machine_info

    rel = Path(args.releases)
    target = load_target(str(rel / "synthvid-target"), device="cpu", max_frames=16)
    draft = load_target(str(rel / "synthvid-draft"), device="cpu", max_frames=16)
    sparrow = SparrowDraftModel.from_pretrained(str(rel / "sparrow-synthvid"), target=target)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    settings = grid(args.grid)

    results: dict = {"settings": {}, "ar": {}}
    t_start = time.perf_counter()
    for bench in ("synthvid_captions", "synthvid_mcq"):
        task = get_task(bench)
        max_new = args.max_new_tokens or task.max_new_tokens
        samples = load_benchmark(bench, args.data, None, args.limit)
        ar = build_decoder("ar", target=target, config=DecodeConfig())
        ar_out = []
        for s in samples:
            res, _, _ = decode_sample(ar, s, max_new)
            ar_out.append((res.token_ids, fidelity(s, res.text)["score"]))
        ar_mean = sum(sc for _, sc in ar_out) / len(ar_out)
        results["ar"][bench] = {"n": len(samples), "score": ar_mean, "max_new_tokens": max_new}
        for label, changes, fly in settings:
            for m in methods:
                if (get_method(m).verifier == "strict") != (label == "strict"):
                    continue  # the strict twins (sd, sparrow) run once, as the τ reference
                is_fly = get_method(m).verifier == "fly"
                if is_fly != bool(fly) and label not in ("defaults", "paper"):
                    continue  # FLy's rows vary FLy's knobs; the others vary LVSpec's
                if is_fly and label == "paper":
                    continue  # FLy has no paper rule of LVSpec's
                cfg = DecodeConfig(**changes)
                dec = build_decoder(m, target=target, draft=sparrow if m.startswith("sparrow") else draft,
                                    config=cfg, loose=fly or None)
                scores, lost, identical, tokens, passes = [], 0, 0, 0, 0
                for s, (ar_ids, ar_sc) in zip(samples, ar_out):
                    res, _, _ = decode_sample(dec, s, max_new)
                    sc = fidelity(s, res.text)["score"]
                    scores.append(sc)
                    lost += sc < ar_sc - 1e-9
                    identical += res.token_ids == ar_ids
                    tokens += res.num_new_tokens
                    passes += 1 + len(res.steps)
                mean = sum(scores) / len(scores)
                row = results["settings"].setdefault(label, {"changes": changes, "fly": fly, "methods": {}})
                row["methods"].setdefault(m, {})[bench] = {
                    "retention": mean / ar_mean if ar_mean else None, "score": mean, "samples_worse": lost,
                    "token_identical": identical, "tau": tokens / passes, "n": len(samples)}
                print(f"{bench:18s} {label:28s} {m:20s} ret {mean / ar_mean:.4f} worse {lost:2d} "
                      f"ident {identical:2d}/{len(samples)} tau {tokens / passes:.2f}", flush=True)
    results.update(
        data=args.data, releases=args.releases, grid=args.grid, limit=args.limit, defaults=DecodeConfig().to_dict(),
        seconds=time.perf_counter() - t_start, machine=machine_info("cpu"), git=git_info(),
        command="python benchmarks/loose_defaults.py " + " ".join(argv))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out} in {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
