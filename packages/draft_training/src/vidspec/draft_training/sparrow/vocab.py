"""``vidspec sparrow-vocab``: the draft vocabulary of a Sparrow release, by token frequency in the data.

A Sparrow draft's step at 7B widths is dominated by its LM head (the target's, 152k rows: 1.09 GB
read per step). A *draft vocabulary* (EAGLE-3's reduced head, applied at inference) lets the draft
score only the tokens that matter: ``SparrowDrafter(head_ids=...)``, or ``--draft-vocab N`` in
``vidspec generate`` / ``vidspec eval``, which take the release's ``N`` most frequent tokens from the
``draft_vocab.json`` this command writes. Verification is unchanged, so outputs stay lossless;
acceptance drops only where the target's token is outside the set.

Usage::

    vidspec sparrow-vocab --data data/synthvid --target data/releases/synthvid-target \\
        --out data/releases/sparrow-synthvid            # writes .../draft_vocab.json

The file lists every token id seen in the answers of the split, by descending count (ties by id),
after the target's end-of-sequence ids (always proposable), with the counts and where they came from.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from vidspec.decoding.drafters.sparrow import DRAFT_VOCAB_FILE
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fsutil import atomic_path


def count_tokens(texts: Iterable[str], tokenizer) -> Counter:
    """Token id counts of ``texts`` (no special tokens added)."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    return counts


def rank_tokens(counts: Counter, always: Sequence[int] = ()) -> list[int]:
    """``always`` first (in order), then every counted id by descending count, ties by id."""
    ranked = sorted(counts, key=lambda i: (-counts[i], i))
    return list(dict.fromkeys([*always, *ranked]))


def sparrow_vocab(data: str, target: str, out: str, split: str = "train", column: str = "answer",
                  max_size: int | None = None) -> int:
    """Write a Sparrow release's draft vocabulary (``draft_vocab.json``) from a dataset's answers.

    Args:
        data: a dataset folder saved with ``datasets`` (SynthVid or any dataset in that schema).
        target: the target the release drafts for (its tokenizer and end-of-sequence ids).
        out: the Sparrow release folder to write ``draft_vocab.json`` into.
        split: the dataset split to count.
        column: the text column to count (the answers the target generates).
        max_size: keep at most this many ids (default: every id seen).
    """
    from datasets import DatasetDict, load_from_disk

    from vidspec.decoding.models import load_target

    out_dir = Path(out)
    if not out_dir.is_dir():
        raise ConfigError(f"--out {out} is not a folder (give the Sparrow release folder)")
    if max_size is not None and max_size < 1:
        raise ConfigError(f"--max-size must be >= 1, got {max_size}")
    try:
        ds = load_from_disk(data)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"--data {data}: not a saved dataset ({e})") from None
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise ConfigError(f"--data {data} has no split {split!r} (it has {', '.join(ds)})")
        ds = ds[split]
    if column not in ds.column_names:
        raise ConfigError(f"--data {data} has no column {column!r} (it has {', '.join(ds.column_names)})")
    tgt = load_target(target, device="cpu")
    counts = count_tokens(ds[column], tgt.tokenizer)
    eos = sorted(int(i) for i in tgt.eos_token_ids)
    ids = rank_tokens(counts, eos)[:max_size]
    record = {"token_ids": ids, "counts": [int(counts.get(i, 0)) for i in ids],
              "source": {"data": str(data), "split": split, "column": column, "texts": len(ds), "target": str(target)}}
    with atomic_path(out_dir / DRAFT_VOCAB_FILE) as tmp:
        tmp.write_text(json.dumps(record) + "\n")
    print(f"wrote {out_dir / DRAFT_VOCAB_FILE}: {len(ids)} token ids ({sum(counts.values())} tokens in "
          f"{len(ds)} texts; the top {min(len(ids), 10)}: {ids[:10]})")
    return 0


def sparrow_vocab_main(argv: list[str]) -> int:
    """Entry point of ``vidspec sparrow-vocab`` (see :func:`sparrow_vocab`)."""
    from vidspec.decoding.cli import run_function

    return run_function(sparrow_vocab, "vidspec sparrow-vocab", argv)
