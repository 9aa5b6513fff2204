"""What the SynthVid testbed benchmarks share: the committed releases and the held-out set as
defaults, and the caption prompts they decode (the first caption row of each video)."""

from __future__ import annotations

import argparse
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
