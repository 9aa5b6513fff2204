"""Two Sparrow drafts of one target on issue 9's long-video bar, side by side in one process.

The long-video bar (Sparrow's τ at ~26k visual tokens within 10% of τ at ~1k) moves by more than its margin between
retrainings of one recipe (RESULTS 25.5), so a draft recipe is best judged against another on the same target and
videos. This runs two `vidspec eval` runs per video length in one process: draft A with ``--methods-a`` (AR first,
the baseline), then draft B with ``sparrow`` alone, against A's AR records (copied into B's run folder, so B's
DSRs are against the same AR decodes). Both runs share the loaded target (on the fast engine one FastTarget, so
its CUDA graphs are captured once) and one read of each video (``share_video``), which at 1536 frames is most of a
run's time. Each run folder is an ordinary, resumable eval run:
a call cut short resumes where it stopped.

Then ``long_tau.py``'s analysis for each draft (ratio, bootstrap, the same-caption split, the misses the long reading
adds), a paired bootstrap over the videos of B's ratio minus A's (the same videos drawn for both drafts), and the
same for B's mean τ minus A's at each length (a ratio also rises when τ falls at the short reading), and the ratio
difference again on the videos whose AR caption is the same text at both lengths (``same_caption``: there the ratio
measures the draft alone, RESULTS 32.1).

    python benchmarks/long_ab.py --target runs/h17/releases/long-target --sparrow-a runs/h17/releases/long-sparrow \\
        --sparrow-b runs/h17/releases/long-sparrow-aug --data runs/h17/synthvid-long1536 --frames 64,1536 \\
        --limit 30 --device cuda --engine fast --out runs/h17/long-ab

Writes ``OUT/{a,b}/eval-long<F>/`` (the runs), ``OUT/{a,b}/long_tau.png`` and ``OUT/long_ab.json`` (both analyses,
the differences, the machine). ``--analyse-only`` reads the runs already in ``--out`` (committed results too) and
writes ``OUT/long_ab_analysis.json`` without loading a model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from long_tau import BAR, analyse, plot, run_records  # noqa: E402

from vidspec.decoding.methods import as_fast  # noqa: E402
from vidspec.decoding.sparrow import SparrowDraftModel  # noqa: E402
from vidspec.evaluation.records import JsonlLog, read_jsonl  # noqa: E402
from vidspec.evaluation.runner import (  # noqa: E402
    EvalConfig,
    SharedReads,
    fast_options_of,
    git_info,
    load_models,
    machine_info,
    run_eval,
)


def seed_baseline(src: Path, dst: Path) -> int:
    """Copy the AR records of run ``src`` that run ``dst`` lacks into ``dst``'s records; returns how many."""
    dst.mkdir(parents=True, exist_ok=True)
    log = JsonlLog(dst / "records.jsonl")
    try:
        added = 0
        for r in read_jsonl(src / "records.jsonl"):
            if r["method"] == "ar" and (r["sample_id"], "ar") not in log:
                log.append(r)
                added += 1
        return added
    finally:
        log.close()


def _paired(a: dict, b: dict, only: set[str] | None = None) -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    """The videos both analyses hold (of ``only``, if given), and each draft's per-video τ at each length, in that
    order."""
    lengths = list(a["lengths"])
    videos = sorted(set(a["lengths"][lengths[0]]["per_video"]) & set(b["lengths"][lengths[0]]["per_video"]))
    if only is not None:
        videos = [v for v in videos if v in only]
    tau = {d: {n: [doc["lengths"][n]["per_video"][v]["tau"] for v in videos] for n in lengths}
           for d, doc in (("a", a), ("b", b))}
    return videos, tau


def _bootstrap(stat, n: int, draws: int, seed: int) -> dict:
    """``stat(indices)`` on all ``n`` videos, and its 95% interval and share of draws above 0 over ``draws``
    resamples of the videos (the same videos for both drafts: a paired bootstrap)."""
    rng = random.Random(seed)
    values = sorted(stat([rng.randrange(n) for _ in range(n)]) for _ in range(draws))
    return {"videos": n, "difference": stat(list(range(n))),
            "ci95": [values[int(0.025 * draws)], values[int(0.975 * draws) - 1]],
            "share_b_higher": sum(v > 0 for v in values) / draws, "draws": draws, "seed": seed}


def ratio_difference(a: dict, b: dict, draws: int = 10_000, seed: int = 0, only: set[str] | None = None) -> dict:
    """Paired bootstrap over the videos (those in ``only``, if given) of ``ratio_b - ratio_a`` (each ratio: mean τ at
    the longest reading over mean τ at the shortest): the 95% interval and the share of draws where B's ratio is the
    higher."""
    videos, tau = _paired(a, b, only)
    first, last = list(a["lengths"])[0], list(a["lengths"])[-1]

    def ratio(d: str, idx: list[int]) -> float:
        return sum(tau[d][last][i] for i in idx) / sum(tau[d][first][i] for i in idx)

    return _bootstrap(lambda idx: ratio("b", idx) - ratio("a", idx), len(videos), draws, seed)


def tau_differences(a: dict, b: dict, draws: int = 10_000, seed: int = 0) -> dict[str, dict]:
    """At each length, a paired bootstrap of B's mean τ minus A's: a ratio can rise because τ fell at the short
    reading (RESULTS 30.1), and these say at which length a draft gained or lost."""
    videos, tau = _paired(a, b)

    def diff(n: str, idx: list[int]) -> float:
        return sum(tau["b"][n][i] - tau["a"][n][i] for i in idx) / len(idx)

    return {n: _bootstrap(lambda idx, n=n: diff(n, idx), len(videos), draws, seed) for n in a["lengths"]}


def report(docs: dict, paths: dict, frames: list[int]) -> dict:
    """Print both drafts' bar, the ratio difference and the τ differences; return ``b_minus_a``."""
    diff = ratio_difference(docs["a"], docs["b"])
    diff["tau"] = tau_differences(docs["a"], docs["b"])
    # the videos whose AR caption is the same text at every length (long_tau's split): the target asked the same tokens
    # of both drafts at both readings, so there a ratio below 1 is the draft's alone
    same_videos = set(docs["a"]["same_text_videos"]) & set(docs["b"]["same_text_videos"])
    if same_videos:
        diff["same_caption"] = ratio_difference(docs["a"], docs["b"], only=same_videos)
    print(f"| draft | tau at {frames[0]} | tau at {frames[-1]} | ratio (bar {BAR}) | 95% interval | "
          "ratio, same caption at both lengths |")
    print("|---|---|---|---|---|---|")
    for d in ("a", "b"):
        doc, bar = docs[d], docs[d]["bar"]
        same = bar.get("ratio_same_text_at_every_length")
        print(f"| {d}: {paths[d]} | {doc['lengths'][str(frames[0])]['tau']:.2f} | "
              f"{doc['lengths'][str(frames[-1])]['tau']:.2f} | {bar['ratio']:.3f} ({'met' if bar['met'] else 'missed'})"
              f" | {bar['bootstrap']['ci95'][0]:.3f}-{bar['bootstrap']['ci95'][1]:.3f} | "
              f"{'n/a' if same is None else f'{same:.3f}'} |")
    print(f"B - A: {diff['difference']:+.3f} (95% interval {diff['ci95'][0]:+.3f} to {diff['ci95'][1]:+.3f}; "
          f"B higher in {diff['share_b_higher']:.0%} of {diff['draws']} draws over the {diff['videos']} videos)")
    if "same_caption" in diff:
        sc = diff["same_caption"]
        print(f"B - A on the {sc['videos']} videos whose AR caption is the same at both lengths: "
              f"{sc['difference']:+.3f} (95% interval {sc['ci95'][0]:+.3f} to {sc['ci95'][1]:+.3f}; "
              f"B higher in {sc['share_b_higher']:.0%} of draws)")
    for n, t in diff["tau"].items():
        print(f"B - A, mean tau at {n} frames: {t['difference']:+.2f} (95% interval {t['ci95'][0]:+.2f} to "
              f"{t['ci95'][1]:+.2f}; B higher in {t['share_b_higher']:.0%} of draws)")
    for d in ("a", "b"):
        extra = docs[d].get("extra_misses")
        if extra and extra["videos"]:
            print(f"{d}: misses only at {frames[-1]} frames on same-caption videos, by label {extra['by_label']}")
    return diff


def analyse_ab(out: Path, frames: list[int], paths: dict[str, str], plots: bool = False) -> dict:
    """Both drafts' runs in ``out`` analysed (``long_tau.analyse``; with ``plots``, each draft's τ plot beside its
    runs), the comparison printed (:func:`report`), and the document ``long_ab.json`` holds: each draft's analysis
    under its release path, and ``b_minus_a``."""
    docs = {}
    for d in ("a", "b"):
        docs[d] = analyse([run_records(out / d / f"eval-long{f}") for f in frames], "sparrow")
        if plots:
            plot(docs[d], out / d / "long_tau.png")
    diff = report(docs, paths, frames)
    return {"a": {"sparrow": paths["a"], **docs["a"]}, "b": {"sparrow": paths["b"], **docs["b"]}, "b_minus_a": diff,
            "frames": frames}


def analyse_only(out: Path, frames: list[int]) -> int:
    """The analysis of the runs already in ``out`` (no models loaded), written to ``out/long_ab_analysis.json``."""
    earlier = json.loads((out / "long_ab.json").read_text()) if (out / "long_ab.json").is_file() else {}
    paths = {d: earlier.get(d, {}).get("sparrow", d) for d in ("a", "b")}
    doc = {**analyse_ab(out, frames, paths), "note": "an analysis of recorded runs (benchmarks/long_ab.py --analyse-only)"}
    (out / "long_ab_analysis.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'long_ab_analysis.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("--sparrow-a", help="the reference draft (its run also holds the AR baseline)")
    ap.add_argument("--sparrow-b", help="the draft compared with it")
    ap.add_argument("--data", help="the long set (a SynthVid folder)")
    ap.add_argument("--frames", default="64,1536", help="video lengths read, shortest first")
    ap.add_argument("--limit", type=int, default=30)
    ap.add_argument("--methods-a", default="ar,sparrow", help="draft A's methods (sparrow-lvspec-pst too, if wanted)")
    ap.add_argument("--benchmark", default="synthvid_captions")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default="fast")
    ap.add_argument("--fast-compile", action="store_true", help="torch.compile the fast steps (off: τ runs)")
    ap.add_argument("--sparrow-k", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--predicate", default="prob")
    ap.add_argument("--eps", type=float, default=0.3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--analyse-only", action="store_true",
                    help="decode nothing: analyse the run folders already in --out (plain or gzipped records, as "
                         "committed) and write OUT/long_ab_analysis.json")
    args = ap.parse_args(argv)
    frames = [int(f) for f in args.frames.split(",")]
    if len(frames) < 2 or frames != sorted(frames):
        ap.error("--frames: at least two lengths, shortest first")
    if args.analyse_only:
        return analyse_only(args.out, frames)
    for name in ("target", "sparrow_a", "sparrow_b", "data"):
        if not getattr(args, name):
            ap.error(f"--{name.replace('_', '-')} is required (unless --analyse-only)")
    for name in ("sparrow_a", "sparrow_b"):
        if not (Path(getattr(args, name)) / "manifest.json").is_file():
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: not a Sparrow release (no manifest.json)")

    for f in frames:
        reads = SharedReads(True, keep_all=True)  # each video read once at this length, for both runs
        cfg_a = EvalConfig(benchmark=args.benchmark, out=str(args.out / "a" / f"eval-long{f}"), data=args.data,
                           split=args.split, limit=args.limit, target=args.target, sparrow=args.sparrow_a,
                           methods=args.methods_a, sparrow_k=args.sparrow_k, max_new_tokens=args.max_new_tokens,
                           frames=f, device=args.device, lam=args.lam, predicate=args.predicate, eps=args.eps,
                           engine=args.engine, fast_max_len=f * 17 + 1024, fast_compile=args.fast_compile,
                           share_video=True, progress=args.progress)
        cfg_b = dataclasses.replace(cfg_a, out=str(args.out / "b" / f"eval-long{f}"), sparrow=args.sparrow_b,
                                    methods=("ar", "sparrow"))
        models = load_models(cfg_a, f)
        sparrow_b = SparrowDraftModel.from_pretrained(args.sparrow_b, target=models.target)
        options = fast_options_of(cfg_a)
        if options is not None:  # one FastTarget (its KV cache and CUDA graphs) serves both runs
            models = dataclasses.replace(models, target=as_fast(models.target, options))
        run_eval(cfg_a, models, reads=reads)
        print(f"{f} frames: A done; {seed_baseline(Path(cfg_a.out), Path(cfg_b.out))} AR records given to B",
              flush=True)
        models_b = dataclasses.replace(models, sparrow=sparrow_b, notes={
            **models.notes, "sparrow": args.sparrow_b, "ar": f"AR records copied from {cfg_a.out} (same process)"})
        run_eval(cfg_b, models_b, reads=reads)
        del models, models_b, reads  # free this length's target, caches and clips before the next

    doc = {**analyse_ab(args.out, frames, {"a": args.sparrow_a, "b": args.sparrow_b}, plots=True),
           "target": args.target, "machine": machine_info(args.device), "git": git_info()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long_ab.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out / 'long_ab.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
