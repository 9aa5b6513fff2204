"""``vidspec data import``: public video-instruction sets into the input of ``vidspec distill-data``.

``vidspec distill-data`` reads a dataset on disk (``datasets.save_to_disk``) with ``video`` (a path), ``question``
and optionally ``answer`` columns. This command writes one from the formats users download:

- ``conversations`` (LLaVA-style, also LLaVA-Video-178K's json and parquet files): a row has a video path under
  ``video`` and ``conversations``, a list of turns ``{"from": "human" | "user", "value": ...}`` and
  ``{"from": "gpt" | "assistant", "value": ...}``. Each question/answer pair becomes one row; the ``<image>`` /
  ``<video>`` placeholder that LLaVA puts in the first question is removed (vidspec places the video itself).
  Extra fields (``id``, ``data_source``) are kept as ``source_id`` / ``data_source``.
- ``sharegpt4video`` (the caption release, ``sharegpt4video_40k.jsonl``): a row has ``video_id``, ``video_path``,
  ``zip_folder`` (the archive its video ships in) and ``captions``, a list of ``{"idx": ..., "content": ...}``: the
  captions of the video's segments (``idx`` "0", "1", ...) and the whole-video caption (``idx`` "-1"). The
  whole-video caption becomes the reference answer of one row asking "Describe this video in detail." (a row of a
  derived set with a plain ``caption`` string is taken as well). ``video_path`` is relative to the
  folder the archives were extracted into (``--video-root``); without it, ``<video_id>.mp4``.

``--format auto`` (the default) picks per row: ``conversations`` if present, else the ShareGPT4Video fields.
Sources: a ``.json`` file (a list of rows), ``.jsonl`` (one row a line), ``.parquet``, or a folder of such files
(sorted by name). Video paths are resolved against ``--video-root`` (default: the source's folder) and written
absolute; with ``--check-videos`` (default on) a missing video is an error like any other unusable row.

A row that cannot be used stops the import with exit status 2 and one line naming the file, the row number
(0-based) and what is wrong; ``--skip-invalid`` skips such rows instead and reports how many.

Usage::

    vidspec data import --source LLaVA-Video-178K/0_30_s_academic_v0_1/0_30_s_academic_oe_v0_1_qa_processed.json \\
        --video-root LLaVA-Video-178K/0_30_s_academic_v0_1 --out data/cache/video-instruct
    vidspec data import --source sharegpt4video_40k.jsonl --video-root videos/ --out data/cache/sharegpt4video
    vidspec distill-data --target Qwen/Qwen2.5-VL-7B-Instruct --dataset data/cache/video-instruct --out ...
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from vidspec.decoding.errors import ConfigError

#: the question a ShareGPT4Video caption row is given
CAPTION_QUESTION = "Describe this video in detail."
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant"}
_PLACEHOLDER = re.compile(r"^\s*(?:<image>|<video>)\s*\n?|\n?\s*(?:<image>|<video>)\s*$")
_SUFFIXES = (".json", ".jsonl", ".parquet")


class RowError(ValueError):
    """A source row that cannot be turned into a question/answer pair (the message says why)."""


def _source_files(source: Path) -> list[Path]:
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix in _SUFFIXES)
        if not files:
            raise ConfigError(f"{source}: no .json, .jsonl or .parquet files")
        return files
    if not source.is_file():
        raise ConfigError(f"{source}: no such file or folder")
    if source.suffix not in _SUFFIXES:
        raise ConfigError(f"{source}: not a .json, .jsonl or .parquet file")
    return [source]


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of one source file, as dicts."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        for batch in table.to_batches():
            yield from batch.to_pylist()
        return
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}: row {i}: not JSON ({e.msg})") from None
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if isinstance(data, dict):  # {"data": [...]} or a single row
        data = data.get("data", [data])
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of rows")
    yield from data


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"{what} is missing or empty")
    return value.strip()


def conversation_pairs(row: dict[str, Any]) -> list[tuple[str, str]]:
    """``(question, answer)`` pairs of a ``conversations`` row, in order."""
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise RowError("'conversations' is missing or not a list of turns")
    pairs, question = [], None
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise RowError(f"turn {k} is not a {{'from', 'value'}} object")
        who = str(turn["from"]).lower()
        if who == "system":
            continue
        if who in _HUMAN:
            if question is not None:
                raise RowError(f"turn {k}: two questions in a row (turn {k - 1} has no answer)")
            question = _PLACEHOLDER.sub("", _text(turn["value"], f"turn {k}'s value")).strip()
            if not question:
                raise RowError(f"turn {k}: the question is only a video placeholder")
        elif who in _ASSISTANT:
            if question is None:
                raise RowError(f"turn {k}: an answer with no question before it")
            pairs.append((question, _text(turn["value"], f"turn {k}'s value")))
            question = None
        else:
            raise RowError(f"turn {k}: unknown speaker {turn['from']!r} (expected human/user or gpt/assistant)")
    if not pairs:
        raise RowError("no question/answer pair")
    return pairs


#: ``idx`` of the whole-video caption among a ShareGPT4Video row's ``captions`` (the others are its segments)
WHOLE_VIDEO_IDX = "-1"


def _caption_pair(row: dict[str, Any]) -> list[tuple[str, str]]:
    captions = row.get("captions")
    if isinstance(captions, list):
        whole = [c for c in captions if isinstance(c, dict) and str(c.get("idx")) == WHOLE_VIDEO_IDX]
        if not whole:
            raise RowError("'captions' has no whole-video caption (an entry with idx \"-1\"; the others caption "
                           "segments)")
        return [(CAPTION_QUESTION, _text(whole[0].get("content"), "the whole-video caption's 'content'"))]
    if "caption" in row:
        return [(CAPTION_QUESTION, _text(row["caption"], "'caption'"))]
    raise RowError("no 'captions' list (ShareGPT4Video) or 'caption'")


def _video_path(row: dict[str, Any], fmt: str) -> str:
    video = row.get("video") if fmt == "conversations" else row.get("video_path") or row.get("video")
    if video is None and fmt == "sharegpt4video" and row.get("video_id"):
        video = f"{row['video_id']}.mp4"
    if isinstance(video, list) and len(video) == 1:
        video = video[0]
    if not isinstance(video, str) or not video.strip():
        raise RowError("no video path ('video'" + (", 'video_path' or 'video_id')" if fmt != "conversations" else ")"))
    return video.strip()


def row_format(row: dict[str, Any], fmt: str) -> str:
    """The format of ``row`` under ``--format fmt`` (``auto`` picks by the fields present)."""
    if fmt != "auto":
        return fmt
    if "conversations" in row:
        return "conversations"
    if {"captions", "caption", "video_path", "video_id", "zip_folder"} & set(row):
        return "sharegpt4video"
    raise RowError(f"neither 'conversations' nor ShareGPT4Video fields (has {sorted(row)[:8]})")


def convert_row(row: Any, fmt: str, video_root: Path, check_videos: bool) -> list[dict[str, Any]]:
    """The distill-data rows of one source row.

    Raises:
        RowError: the row cannot be used (why in the message).
    """
    if not isinstance(row, dict):
        raise RowError(f"not an object ({type(row).__name__})")
    kind = row_format(row, fmt)
    if kind == "llava-video":
        kind = "conversations"
    pairs = conversation_pairs(row) if kind == "conversations" else _caption_pair(row)
    rel = _video_path(row, kind)
    video = Path(rel) if Path(rel).is_absolute() else video_root / rel
    if check_videos and not video.is_file():
        raise RowError(f"video {video} does not exist (--video-root sets the folder paths are relative to)")
    extra = {"source_id": str(row.get("id", row.get("video_id", ""))), "data_source": str(row.get("data_source", ""))}
    return [{"video": str(video.absolute()), "question": q, "answer": a, "turn": k, **extra}
            for k, (q, a) in enumerate(pairs)]


def import_dataset(
    source: str = "",
    out: str = "",
    format: Literal["auto", "conversations", "llava-video", "sharegpt4video"] = "auto",  # noqa: A002
    video_root: str | None = None,
    split: str = "train",
    limit: int | None = None,
    check_videos: bool = True,
    skip_invalid: bool = False,
) -> int:
    """Convert a video-instruction set to ``vidspec distill-data``'s input (see the module docstring).

    Args:
        source: a .json / .jsonl / .parquet file or a folder of them.
        out: the dataset folder to write (``datasets.save_to_disk``).
        format: the source schema; ``auto`` picks per row. ``llava-video`` is the conversations schema.
        video_root: folder the rows' video paths are relative to (default: the source file's folder).
        split: the split name to write.
        limit: at most this many output rows.
        check_videos: refuse rows whose video file does not exist.
        skip_invalid: skip unusable rows (and say how many) instead of stopping at the first.

    Raises:
        ConfigError: a missing source, an unreadable file, or (without ``skip_invalid``) the first unusable row,
            named by file and row number.
    """
    if not source or not out:
        raise ConfigError("--source and --out are required")
    if format not in ("auto", "conversations", "llava-video", "sharegpt4video"):
        raise ConfigError(f"--format {format!r}: expected auto, conversations, llava-video or sharegpt4video")
    rows: list[dict[str, Any]] = []
    skipped = 0
    for path in _source_files(Path(source)):
        root = Path(video_root) if video_root else path.parent
        for i, row in enumerate(read_rows(path)):
            try:
                rows += convert_row(row, format, root, check_videos)
            except RowError as e:
                if not skip_invalid:
                    raise ConfigError(f"{path}: row {i}: {e} (--skip-invalid skips such rows)") from None
                skipped += 1
            if limit is not None and len(rows) >= limit:
                break
        if limit is not None and len(rows) >= limit:
            rows = rows[:limit]
            break
    if not rows:
        raise ConfigError(f"{source}: no usable rows" + (f" ({skipped} skipped)" if skipped else ""))
    from datasets import Dataset, DatasetDict

    DatasetDict({split: Dataset.from_list(rows)}).save_to_disk(str(out))
    print(f"wrote {len(rows)} rows ({len({r['video'] for r in rows})} videos) to {out}"
          + (f"; skipped {skipped} unusable source rows" if skipped else ""))
    return 0


def import_main(argv: list[str]) -> int:
    """Turn LLaVA-Video-178K, ShareGPT4Video or conversations files into distill-data's input.

    The entry point of ``vidspec data import`` (see :func:`import_dataset`).
    """
    from vidspec.decoding.cli import run_function

    return run_function(import_dataset, "vidspec data import", argv)
