"""What the SynthVid testbed benchmarks share: the committed releases and the held-out set as
defaults, and the caption prompts they decode (the first caption row of each video)."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

#: the committed releases and the held-out SynthVid set (data/releases/README.md)
DEFAULTS = {"data": "data/cache/synthvid-heldout", "target": "data/releases/synthvid-target",
            "draft": "data/releases/synthvid-draft", "sparrow": "data/releases/sparrow-synthvid"}


def add_testbed_args(ap: argparse.ArgumentParser, models: tuple[str, ...] = ("target", "draft", "sparrow"), *,
                     style: bool = True, limit: int = 25, max_new_tokens: int = 64) -> None:
    """``--data``, the model flags in ``models``, ``--split``, ``--style`` (optional), ``--limit``, ``--max-new-tokens``."""
    ap.add_argument("--data", default=DEFAULTS["data"])
    for m in models:
        ap.add_argument(f"--{m}", default=DEFAULTS[m])
    ap.add_argument("--split", default="validation")
    if style:
        ap.add_argument("--style", default="alpha", help="caption rows of this style (the target's); one per video")
    ap.add_argument("--limit", type=int, default=limit, help="caption prompts (one per video)")
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)


def caption_rows(data: str | Path, split: str, limit: int, style: str | None = None) -> list[dict]:
    """The first caption row of each video (of ``style``, if given) in ``split``, for up to ``limit`` videos."""
    from datasets import load_from_disk

    rows, seen = [], set()
    for r in load_from_disk(str(data))[split]:
        if len(rows) >= limit:
            break
        if (style is None or r["style"] == style) and r["video"] not in seen:
            seen.add(r["video"])
            rows.append(r)
    return rows


def add_round_args(ap: argparse.ArgumentParser, *, limit: int, k: str, out: str) -> None:
    """The flags of the round benchmarks: the releases, the data, ``--k`` chain lengths, ``--trees`` shapes."""
    ap.add_argument("--target", required=True)
    ap.add_argument("--sparrow", required=True)
    ap.add_argument("--data", required=True, help="a SynthVid-format dataset folder")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--limit", type=int, default=limit)
    ap.add_argument("--k", default=k, help="chain K values, comma-separated (one Sparrow decoder each)")
    ap.add_argument("--trees", default="", help="tree-sparrow shapes total-depth-top_k, comma-separated (e.g. 48-8-8)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=out)


def tree_shape(text: str) -> dict[str, int]:
    """A tree shape ``TOTAL-DEPTH-TOPK`` (e.g. ``48-8-8``) as ``build_decoder``'s ``tree`` argument."""
    total, depth, top_k = (int(x) for x in text.split("-"))
    return {"total_tokens": total, "depth": depth, "top_k": top_k}


def round_decoders(target: str, sparrow: str, device: str, ks: list[int], trees: list[str]) -> dict:
    """``ar``, ``sparrow_k<K>`` per K and ``tree_<shape>`` per tree shape on one fast-engine target.

    The target's tree options fit the largest tree. Returns the decoders by name.
    """
    from vidspec.decoding.methods import as_fast, build_decoder, tree_fast_options
    from vidspec.decoding.models import load_target

    opts = tree_fast_options({}, max(tree_shape(t)["total_tokens"] for t in trees)) if trees else None
    tgt = as_fast(load_target(target, device=device), opts)
    decs = {"ar": build_decoder("ar", target=tgt, engine="fast", device=device)}
    for k in ks:
        decs[f"sparrow_k{k}"] = build_decoder("sparrow", target=tgt, draft=sparrow, engine="fast", device=device, k=k)
    for t in trees:
        decs[f"tree_{t}"] = build_decoder("tree-sparrow", target=tgt, draft=sparrow, engine="fast", device=device,
                                          tree=tree_shape(t))
    return decs


def warm_up(decs: dict, sample, max_new_tokens: int) -> None:
    """Each decoder's untimed warm-up decode, then every graph its timed decodes can meet (as ``vidspec eval``)."""
    from vidspec.evaluation.runner import capture_fast_graphs, decode_sample

    for dec in decs.values():
        decode_sample(dec, sample, max_new_tokens)
        capture_fast_graphs(dec, max_new_tokens)
        decode_sample(dec, sample, max_new_tokens)


def bootstrap_ratio_of_sums(num: list[float], den: list[float], bars: tuple[float, ...] = (), draws: int = 10_000,
                            seed: int = 0) -> dict:
    """Bootstrap over units (videos, captions) of ``sum(num) / sum(den)``, where unit ``i`` contributes ``num[i]`` and
    ``den[i]``: the units are resampled with replacement, so what is correlated within a unit (the claims of one
    caption, one video's τ at two lengths) moves together. Returns the 95% percentile interval and, per bar, the share
    of draws at or above it."""
    rng = random.Random(seed)
    n = len(num)
    ratios = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(sum(num[i] for i in idx) / sum(den[i] for i in idx))
    ratios.sort()
    return {"units": n, "draws": draws, "seed": seed, "ci95": [ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]],
            "share_at_or_above": {str(b): sum(r >= b for r in ratios) / draws for b in bars}}


def emit_json(report: dict, out: str | Path | None, echo: bool = True) -> None:
    """Print ``report`` as indented JSON (``echo=False``: only the path it went to), and write it to ``out`` (parents
    made) when given."""
    text = json.dumps(report, indent=2)
    if echo:
        print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
        if not echo:
            print(f"wrote {out}")
