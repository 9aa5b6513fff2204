"""Issue 9's long-video bar from two `vidspec eval` runs of the same videos at two frame counts.

The bar: Sparrow's τ at ~25k visual tokens within 10% of its τ at ~1k. A τ that falls can be the draft's
fault or the target's: when the target's own caption of the long reading degenerates (misspelt words,
repeated clauses), no draft predicts it. So besides τ over every video this splits the videos by whether
the target's (AR) caption uses only words of the SynthVid grammar (``vocabulary_words``: "clipe" or
"disappearse" fail), and compares τ on the videos whose caption is spelt right at both lengths. A second
split keeps the videos whose AR caption is the same text at every length: there the draft is asked for the
same tokens at both readings, so a τ that falls on them is the draft's alone; where the target's caption
changes with the length (a motion read differently at 26k tokens), the draft distilled on short readings
has to follow a caption it was not taught. The bar is judged on all videos; the splits say where a miss
comes from.

τ also has a ceiling that depends only on the caption's length: a round emits at most K + 1 tokens, so a
caption of n tokens after the prefill's first needs at least ceil(n / (K + 1)) passes (19 tokens at K = 16:
2 passes, τ at most 9.0). A target that ends its long captions earlier moves that ceiling. So each video
also gets its ceiling and whether it reached it (the draft matched every token the rounds allowed), and
each length the passes it took over the fewest possible (1.00: the draft was never wrong).

Where records carry each round (``rounds``, recorded since 2026-12-02), each video also gets the tokens its draft
missed (``misses``: index in the caption and the SynthVid token), and the videos whose caption is the same at both
lengths get the misses the long reading adds (``extra_misses``), counted by token and by label (colour, shape,
motion, filler, ...): which words the draft loses at 26k visual tokens.

On ten videos one caption can move the ratio by several points, so the bar also gets a paired bootstrap
over the videos (``bootstrap``: the same videos drawn with replacement at both lengths, 10,000 draws, a fixed
seed): a 95% interval of the ratio and the share of draws that meet the bar. A run whose interval straddles
0.9 does not settle the bar either way.

    python benchmarks/long_tau.py benchmarks/results/gpu_session12/eval/eval-long64 \\
        benchmarks/results/gpu_session12/eval/eval-long1536 --out benchmarks/results/gpu_session12/long_tau.json

Reads each run's config.json (frames) and records.jsonl[.gz]; prints a table, writes JSON (``--out``) and a
τ-by-length plot (``--plot``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import platform
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from vidspec.evaluation.records import read_jsonl, run_file
from vidspec.evaluation.synthvid.tokenizer import vocabulary_words

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import bootstrap_ratio_of_sums  # noqa: E402

BAR = 0.9  # τ at the long reading >= 90% of τ at the short one


def run_records(run: Path) -> tuple[int, list[dict]]:
    """``(frames, records)`` of a `vidspec eval` run folder (plain or gzipped records)."""
    cfg = json.loads((run / "config.json").read_text())
    recs = read_jsonl(run_file(run, "records.jsonl"))
    if not recs:
        raise SystemExit(f"{run}: no records")
    return int(cfg["frames"]), recs


def spelt_right(text: str, vocab: set[str]) -> bool:
    """Whether every word of ``text`` is a SynthVid grammar word."""
    words = re.findall(r"[a-z']+", text.lower())
    return bool(words) and all(w in vocab for w in words)


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def ceiling(tokens: int, k: int | None) -> tuple[int, float] | None:
    """``(fewest passes, highest τ)`` for a caption of ``tokens`` new tokens (the first from the prefill) at
    chain length ``k``; None without a ``k`` or with nothing after the first token."""
    if not k or tokens <= 1:
        return None
    passes = math.ceil((tokens - 1) / (k + 1))
    return passes, (tokens - 1) / passes


def misses(r: dict) -> list[int] | None:
    """Indices in ``token_ids`` of the tokens a chain method's draft missed: in each round with ``accepted <
    drafted``, the target's token after the accepted ones. None for a record without ``rounds``."""
    if "rounds" not in r:
        return None
    out, pos = [], 1  # the first token comes from the prefill
    for drafted, accepted, emitted in r["rounds"]:
        if accepted < drafted and pos + accepted < len(r["token_ids"]):
            out.append(pos + accepted)
        pos += emitted
    return out


def token_pieces(token_ids: list[int]) -> tuple[list[str], list[str]]:
    """``(text pieces, labels)`` of SynthVid token ids (the long pass's targets use the SynthVid tokenizer); a
    caption with an id outside that vocabulary (another target's tokenizer) gets ``"?"`` and ``"unknown"``."""
    from vidspec.evaluation.synthvid.tokenizer import token_labels

    tok = _synthvid_tokenizer()
    if any(not 0 <= t < len(tok) for t in token_ids):
        return ["?"] * len(token_ids), ["unknown"] * len(token_ids)
    return [tok.decode([t]) for t in token_ids], token_labels(token_ids, tok)


@functools.cache
def _synthvid_tokenizer():
    from vidspec.evaluation.synthvid.tokenizer import build_tokenizer

    return build_tokenizer()


def bootstrap_ratio(short: list[float], long_: list[float], draws: int = 10_000, seed: int = 0) -> dict:
    """Paired bootstrap of ``mean(long_) / mean(short)`` over the videos (``short[i]`` and ``long_[i]`` are one
    video's τ at the two lengths): the 95% percentile interval and the share of draws at or above the bar."""
    b = bootstrap_ratio_of_sums(long_, short, bars=(BAR,), draws=draws, seed=seed)
    return {"draws": draws, "seed": seed, "ci95": b["ci95"], "share_met": b["share_at_or_above"][str(BAR)]}


def analyse(runs: list[tuple[int, list[dict]]], method: str = "sparrow") -> dict:
    """τ per run (the summary's mean over samples, and pooled: tokens / target passes), the split by the AR
    caption's spelling, and the bar (last run against the first)."""
    vocab = set(vocabulary_words())
    per: dict[int, dict[str, dict]] = {}
    for frames, recs in runs:
        ar = {r["sample_id"]: r for r in recs if r["method"] == "ar"}
        sp = {r["sample_id"]: r for r in recs if r["method"] == method}
        if not sp:
            raise SystemExit(f"no {method!r} records at {frames} frames")
        per[frames] = {}
        for sid, r in sp.items():
            row = {"tau": r["tau"], "tokens": r["num_new_tokens"], "passes": r["target_passes"],
                   "clean": spelt_right(ar[sid]["text"], vocab) if sid in ar else None,
                   "ar_text": ar[sid]["text"] if sid in ar else None}
            missed = misses(r)
            if missed is not None:
                pieces, labels = token_pieces(r["token_ids"])
                row["misses"] = [{"index": i, "token": pieces[i], "label": labels[i]} for i in missed]
            top = ceiling(r["num_new_tokens"], r.get("k"))
            if top is not None:
                row["min_passes"], row["tau_ceiling"] = top
                row["at_ceiling"] = r["target_passes"] <= top[0]
            per[frames][sid] = row
    lengths = [f for f, _ in runs]
    common = sorted(set.intersection(*(set(per[f]) for f in lengths)))
    clean_both = [s for s in common if all(per[f][s]["clean"] for f in lengths)]
    same_text = [s for s in common if per[lengths[0]][s]["ar_text"] is not None
                 and len({per[f][s]["ar_text"] for f in lengths}) == 1]
    out: dict = {"method": method, "videos": len(common), "clean_at_every_length": len(clean_both),
                 "same_text_at_every_length": len(same_text), "same_text_videos": same_text, "lengths": {}}
    for f in lengths:
        rows = [per[f][s] for s in common]
        out["lengths"][str(f)] = {
            "frames": f,
            "tau": mean([r["tau"] for r in rows]),
            "tau_pooled": sum(r["tokens"] for r in rows) / max(1, sum(r["passes"] for r in rows)),
            "clean_captions": sum(bool(r["clean"]) for r in rows),
            "tau_clean": mean([r["tau"] for r in rows if r["clean"]]),
            "tau_not_clean": mean([r["tau"] for r in rows if r["clean"] is False]),
            "tau_clean_at_every_length": mean([per[f][s]["tau"] for s in clean_both]),
            "tau_same_text_at_every_length": mean([per[f][s]["tau"] for s in same_text]),
            "per_video": {s: per[f][s] for s in common},
        }
        capped = [r for r in rows if "min_passes" in r]
        if capped:
            out["lengths"][str(f)].update({
                "tau_ceiling": mean([r["tau_ceiling"] for r in capped]),
                "at_ceiling": sum(r["at_ceiling"] for r in capped),
                "passes_over_fewest": sum(r["passes"] for r in capped) / max(1, sum(r["min_passes"] for r in capped)),
                "mean_tokens": mean([r["tokens"] for r in capped]),
            })
    short, long_ = (out["lengths"][str(f)] for f in (lengths[0], lengths[-1]))
    ratio = long_["tau"] / short["tau"]
    out["bar"] = {"what": f"{method} tau at {lengths[-1]} frames >= {BAR:.0%} of tau at {lengths[0]} frames",
                  "ratio": ratio, "met": ratio >= BAR,
                  "bootstrap": bootstrap_ratio([per[lengths[0]][s]["tau"] for s in common],
                                               [per[lengths[-1]][s]["tau"] for s in common])}
    if clean_both:
        out["bar"]["ratio_clean_at_every_length"] = (long_["tau_clean_at_every_length"]
                                                     / short["tau_clean_at_every_length"])
    if same_text:
        out["bar"]["ratio_same_text_at_every_length"] = (long_["tau_same_text_at_every_length"]
                                                         / short["tau_same_text_at_every_length"])
    first, last = per[lengths[0]], per[lengths[-1]]
    if same_text:  # the same caption asked for at both lengths: passes more, fewer or equal at the long reading
        signs = [(last[s]["passes"] > first[s]["passes"]) - (last[s]["passes"] < first[s]["passes"]) for s in same_text]
        out["same_text_passes"] = {"more": signs.count(1), "fewer": signs.count(-1), "equal": signs.count(0)}
    if same_text and all("misses" in first[s] and "misses" in last[s] for s in same_text):
        # the same tokens asked for at both lengths: a miss only at the long reading is the draft's loss there
        extra = {}
        for s in same_text:
            known = {m["index"] for m in first[s]["misses"]}
            added = [m for m in last[s]["misses"] if m["index"] not in known]
            if added:
                extra[s] = added
        out["extra_misses"] = {
            "videos": extra,
            "by_token": dict(Counter(m["token"] for v in extra.values() for m in v).most_common()),
            "by_label": dict(Counter(m["label"] for v in extra.values() for m in v).most_common()),
            "misses_at_each_length": {str(f): sum(len(per[f][s]["misses"]) for s in same_text) for f in lengths},
        }
    return out


def plot(doc: dict, path: Path) -> Path:
    """τ by video length: one grey line per video (a cross where the target's caption is misspelt), the mean,
    and the mean ceiling (the most τ the captions' lengths allow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(doc["lengths"].values())
    frames = [r["frames"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for sid in rows[0]["per_video"]:
        taus = [r["per_video"][sid]["tau"] for r in rows]
        ax.plot(frames, taus, color="lightgrey", lw=0.8, zorder=1)
        for f, r in zip(frames, rows):
            v = r["per_video"][sid]
            ax.scatter([f], [v["tau"]], s=18, zorder=2, color="tab:blue" if v["clean"] else "tab:red",
                       marker="o" if v["clean"] else "x")
    ax.plot(frames, [r["tau"] for r in rows], color="black", lw=2, marker="s", label="mean τ", zorder=3)
    if all("tau_ceiling" in r for r in rows):
        ax.plot(frames, [r["tau_ceiling"] for r in rows], color="black", ls="--", lw=1,
                label="mean ceiling (caption length, K)", zorder=3)
    bar = doc["bar"]
    ax.axhline(rows[0]["tau"] * BAR, color="tab:green", ls=":", lw=1, label=f"bar: {BAR:.0%} of τ at {frames[0]} frames")
    ax.set_xscale("log", base=2)
    ax.set_xticks(frames, [str(f) for f in frames])
    ax.set_xlabel("frames read (17 visual tokens each)")
    ax.set_ylabel(f"{doc['method']} τ per video")
    ax.set_title(f"τ by video length: ratio {bar['ratio']:.3f} ({'met' if bar['met'] else 'missed'})\n"
                 "blue: the target's caption spelt right; red x: misspelt", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="eval run folders, shortest reading first")
    ap.add_argument("--method", default="sparrow")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--plot", type=Path, help="write the τ-by-length PNG here")
    args = ap.parse_args(argv)
    if len(args.runs) < 2:
        ap.error("give at least two run folders (the short reading first)")
    runs = [run_records(r) for r in args.runs]
    doc = analyse(runs, args.method)
    print(f"{args.method}: {doc['videos']} videos, {doc['clean_at_every_length']} with a caption spelt right at every length")
    print("| frames | tau (mean) | tau (pooled) | AR captions spelt right | tau, spelt right | tau, not | "
          "tau, spelt right at every length |")
    print("|---|---|---|---|---|---|---|")
    for row in doc["lengths"].values():
        print(f"| {row['frames']} | {_fmt(row['tau'])} | {_fmt(row['tau_pooled'])} | {row['clean_captions']} | "
              f"{_fmt(row['tau_clean'])} | {_fmt(row['tau_not_clean'])} | {_fmt(row['tau_clean_at_every_length'])} |")
    if all("tau_ceiling" in row for row in doc["lengths"].values()):
        print("| frames | new tokens (mean) | tau ceiling (mean) | videos at the ceiling | passes / fewest possible |")
        print("|---|---|---|---|---|")
        for row in doc["lengths"].values():
            print(f"| {row['frames']} | {row['mean_tokens']:.1f} | {row['tau_ceiling']:.2f} | {row['at_ceiling']} | "
                  f"{row['passes_over_fewest']:.2f} |")
    bar = doc["bar"]
    print(f"bar: {bar['what']}: ratio {bar['ratio']:.3f} -> {'met' if bar['met'] else 'missed'}"
          + (f" (on the videos spelt right at every length: {bar['ratio_clean_at_every_length']:.3f})"
             if "ratio_clean_at_every_length" in bar else ""))
    boot = bar["bootstrap"]
    print(f"paired bootstrap over the {doc['videos']} videos ({boot['draws']} draws): ratio 95% interval "
          f"{boot['ci95'][0]:.3f}-{boot['ci95'][1]:.3f}, {boot['share_met']:.0%} of draws meet the bar")
    if "ratio_same_text_at_every_length" in bar:
        print(f"on the {doc['same_text_at_every_length']} videos whose AR caption is the same text at every length: "
              f"tau {' / '.join(_fmt(r['tau_same_text_at_every_length']) for r in doc['lengths'].values())}, "
              f"ratio {bar['ratio_same_text_at_every_length']:.3f}; target passes at {list(doc['lengths'])[-1]} frames: "
              f"{doc['same_text_passes']['more']} more, {doc['same_text_passes']['fewer']} fewer, "
              f"{doc['same_text_passes']['equal']} the same")
    extra = doc.get("extra_misses")
    if extra:
        at = extra["misses_at_each_length"]
        print(f"draft misses on those videos: {' / '.join(str(at[f]) for f in at)}; only at {list(doc['lengths'])[-1]} frames: "
              f"{sum(len(v) for v in extra['videos'].values())} on {len(extra['videos'])} videos, by label "
              f"{extra['by_label']}, by token {extra['by_token']}")
    if args.out:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        doc["runs"] = [str(r) for r in args.runs]
        doc["machine"] = {"platform": platform.platform(), "python": sys.version.split()[0], "git": sha or None,
                          "note": "an analysis of recorded runs; the runs' own machine is in their summary.json"}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    if args.plot:
        print(f"wrote {plot(doc, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
