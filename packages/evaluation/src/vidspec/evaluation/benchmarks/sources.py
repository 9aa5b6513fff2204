"""Read a benchmark's rows from a local path or a hub id.

Local forms, tried in this order:

- a folder written by ``datasets.save_to_disk`` (a ``DatasetDict``: ``dataset_dict.json``; or one
  ``Dataset``: ``state.json``);
- a single ``.parquet``, ``.json`` (a list of objects) or ``.jsonl`` file;
- a folder of such files (a downloaded hub repository): files whose path names the split (or, for
  several sub-tasks, the configuration) are preferred.

Anything else that looks like ``owner/name`` is loaded with ``datasets.load_dataset``; without a
reachable hub that fails with a :class:`BenchmarkError` that says what to do instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidspec.evaluation.benchmarks.types import BenchmarkError

DATA_SUFFIXES = (".parquet", ".json", ".jsonl")
# Files that datasets.save_to_disk and the hub put beside the data.
_METADATA = {"dataset_info.json", "state.json", "dataset_dict.json", "synthvid.json"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Rows:
    """Rows read from one dataset.

    Attributes:
        rows: ``(row, source)`` pairs; ``source`` is the split or the file stem the row came from.
        root: the local folder the dataset was read from (default root of relative video paths),
            or ``None`` for hub datasets.
        description: where the rows came from, for messages.
    """

    rows: list[tuple[dict[str, Any], str]]
    root: Path | None
    description: str


def read_rows(path_or_id: str | Path, *, split: str, config: str | None = None, subdir: str | None = None,
              data_files: dict[str, str] | None = None) -> Rows:
    """The rows of ``split`` of the dataset at ``path_or_id``.

    Args:
        path_or_id: a local path (see the module docstring) or a hub dataset id.
        split: the split to read (ignored for a single file or a single saved ``Dataset``).
        config: hub configuration name; for a folder of files, the file stem to prefer.
        subdir: sub-folder of a local dataset folder to read instead, when it exists.
        data_files: for a local folder, the file (glob) of each split; a split named there reads only
            the files that match (none matching is an error naming the pattern).

    Raises:
        BenchmarkError: the path does not exist, holds no readable table, lacks the split, or the
            hub cannot be reached.
    """
    path = Path(path_or_id).expanduser()
    if path.exists():
        if subdir and (path / subdir).is_dir():
            path = path / subdir
        return _read_local(path, split=split, config=config, data_files=data_files)
    if isinstance(path_or_id, str) and _HUB_ID.match(path_or_id):
        return _read_hub(path_or_id, split=split, config=config)
    raise BenchmarkError(f"no such dataset file or folder: {path}")


def _read_local(path: Path, *, split: str, config: str | None, data_files: dict[str, str] | None = None) -> Rows:
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        return _read_saved(path, split)
    if path.is_file():
        return Rows([(row, path.stem) for row in _read_file(path)], path.parent, str(path))
    if data_files and split in data_files:
        named = sorted(p for p in path.glob(data_files[split]) if p.is_file())
        if named:
            rows = [(row, f.stem) for f in named for row in _read_file(f)]
            return Rows(rows, path, f"{path} ({', '.join(f.name for f in named)})")
    # Files another split names (e.g. a test set without answers beside the validation set) are not rows
    # of this split.
    others = {p for s, pattern in (data_files or {}).items() if s != split for p in path.glob(pattern)}
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix in DATA_SUFFIXES
        and p.name not in _METADATA
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and p not in others
    )
    if not files:
        if data_files and split in data_files:
            raise BenchmarkError(f"{path}: missing {data_files[split]} (the {split!r} split of this benchmark)")
        raise BenchmarkError(
            f"{path} holds no dataset: expected a datasets.save_to_disk folder or "
            f"{'/'.join(DATA_SUFFIXES)} files"
        )
    files = _prefer(files, path, config) if config else _prefer(files, path, split)
    rows = [(row, f.stem) for f in files for row in _read_file(f)]
    return Rows(rows, path, f"{path} ({len(files)} file(s))")


def _prefer(files: list[Path], root: Path, token: str) -> list[Path]:
    """The files whose relative path names ``token`` as a word, or all files if none does."""
    word = re.compile(rf"(^|[^a-z0-9]){re.escape(token.lower())}([^a-z0-9]|$)")
    chosen = [f for f in files if word.search(str(f.relative_to(root)).lower())]
    return chosen or files


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except Exception as e:  # pyarrow and json raise many types; all mean "not a readable table"
        raise BenchmarkError(f"cannot read {path}: {type(e).__name__}: {e}") from None
    if isinstance(data, dict):
        # {"data": [...]} or {"split": [...]}: a single list of rows inside an object.
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) == 1:
            data = lists[0]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise BenchmarkError(f"{path} is not a list of JSON objects")
    return data


def _read_saved(path: Path, split: str) -> Rows:
    import datasets  # imported here: it is slow to import and only needed for these folders

    folder, description = path, str(path)
    if (path / "dataset_dict.json").is_file():
        # Load only the split asked for: faster, and an empty sibling split (which
        # load_from_disk cannot read back) does not break it.
        try:
            splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        except (ValueError, KeyError, TypeError):
            raise BenchmarkError(f"{path}/dataset_dict.json is not a datasets split list") from None
        if split not in splits:
            raise BenchmarkError(f"{path} has no split {split!r}; it has {sorted(splits)}")
        folder, description = path / split, f"{path} [{split}]"
    try:
        if not json.loads((folder / "state.json").read_text()).get("_data_files"):
            return Rows([], path, description)  # an empty split is saved without data files
        data = datasets.load_from_disk(str(folder))
    except Exception as e:
        raise BenchmarkError(f"cannot load the saved dataset {folder}: {type(e).__name__}: {e}") from None
    return Rows([(row, split) for row in data], path, description)


def _read_hub(dataset_id: str, *, split: str, config: str | None) -> Rows:
    import datasets

    try:
        data = datasets.load_dataset(dataset_id, config, split=split)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BenchmarkError(
            f"cannot load {dataset_id!r} (split {split!r}) from the Hugging Face hub: "
            f"{type(e).__name__}: {first[:200]}. Without network access (or with HF_HUB_OFFLINE / "
            "HF_DATASETS_OFFLINE set), download the dataset elsewhere and pass its local folder or files."
        ) from None
    # A hub configuration names the subset (e.g. an MVBench sub-task); rows carry it as source.
    return Rows([(row, config or split) for row in data], None, f"{dataset_id} [{split}]")
