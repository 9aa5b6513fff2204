"""Self-distilled training data: the target writes the answers (``vidspec distill-data``).

Sparrow trains on what the target itself says (docs/algorithms.md, "Training: IVSB and MTP"). This
command reads a dataset on disk with ``video``, ``question`` (and ``answer``) columns, e.g.
SynthVid, lets the target answer every question greedily, and writes the same rows with
``answer`` replaced by the target's text (the original is kept as ``reference_answer``) as a
``datasets`` DatasetDict that ``VideoTextDataModule`` reads directly. Video paths are written
absolute.

Resumable and crash-safe: answers go to ``OUT/.work/<split>/shard-NNNNN.jsonl``, each written to
``.shard-NNNNN.jsonl.<8 hex>`` beside it, synced and renamed, so a shard under its final name is
whole even after a kill or a power loss. A rerun removes such leftover temporary files, skips the
finished shards (redoing any with a wrong row count or a bad line) and assembles the dataset at the
end; ``distill.json`` is written last and marks a finished dataset.

Usage::

    vidspec distill-data --target runs/synthvid-target/release --dataset data/cache/synthvid \\
        --out data/cache/synthvid-distilled --max-new-tokens 256
    vidspec distill-data ... --prompt-suffix "Please answer with at least 1000 words."   # the paper's
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fsutil import atomic_path, remove_temps

log = logging.getLogger(__name__)

WORK = ".work"
MANIFEST = "distill.json"
# The temporary names _write_atomic gives this command's files (".<name>.<8 hex>"); only these are
# removed on a rerun, never anything else in the output folder.
_TEMP = re.compile(r"\.(?:shard-\d{5,}\.jsonl|config\.json|distill\.json)\.[0-9a-f]{8}")


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all, even across a kill or a power loss.

    Through :func:`~vidspec.decoding.fsutil.atomic_path`: a synced temporary ``.<name>.<8 hex>``
    beside it and an atomic rename; a kill mid-write leaves only the temporary, which
    :func:`_remove_temps` deletes.
    """
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def _remove_temps(folder: Path) -> None:
    """Delete the temporary files a killed run of this command left in ``folder``."""
    remove_temps(folder, _TEMP)


def _read_shard(shard: Path, rows: int) -> list[dict] | None:
    """The rows of a finished shard, or None if it is not one (missing, wrong row count, bad line)."""
    if not shard.is_file():
        return None
    try:
        out = [json.loads(x) for x in shard.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError):
        out = None
    if out is None or len(out) != rows:
        log.warning("%s is not a whole shard of %d rows; answering its rows again", shard, rows)
        return None
    return out


def distill_data(
    target: str = "tiny-qwen2.5-vl",
    dataset: str = "",
    out: str = "",
    splits: list[str] | None = None,
    prompt_suffix: str | None = None,
    max_new_tokens: int = 256,
    limit: int | None = None,
    shard_size: int = 16,
    device: str = "cpu",
    dtype: str | None = None,
    max_frames: int | None = None,
) -> int:
    """Let the target answer a dataset's questions and store them as a dataset on disk.

    Args:
        target: the target model (tiny name, folder or hub id).
        dataset: dataset folder (``datasets.load_from_disk``) with video, question columns.
        out: output dataset folder.
        splits: splits to process (default: all).
        prompt_suffix: appended to every question, e.g. the paper's "Please answer with at least
            1000 words." to get long answers.
        max_new_tokens: most tokens per answer.
        limit: at most this many rows per split.
        shard_size: rows per resumable shard.
        device: cpu, cuda, ...
        dtype: model dtype (default: bf16 on CUDA, fp32 on CPU).
        max_frames: frames per video (default: the target's).
    """
    from datasets import Dataset, DatasetDict, load_from_disk
    from tqdm.auto import tqdm

    from vidspec.decoding.loops.chain import SpeculativeDecoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    if not dataset or not out:
        raise ConfigError("--dataset and --out are required")
    src = Path(dataset).absolute()
    try:
        data = load_from_disk(str(src))
    except FileNotFoundError as e:
        raise ConfigError(f"cannot load dataset {dataset}: {e}") from None
    if isinstance(data, Dataset):
        data = DatasetDict({"train": data})
    names = splits or list(data)
    for name in names:
        if name not in data:
            raise ConfigError(f"{dataset} has no split {name!r} (has {list(data)})")
        missing = {"video", "question"} - set(data[name].column_names)
        if missing:
            raise ConfigError(f"split {name!r} of {dataset} lacks columns {sorted(missing)}")
    dst = Path(out).absolute()
    work = dst / WORK
    config = {"target": target, "dataset": str(src), "splits": names, "prompt_suffix": prompt_suffix,
              "max_new_tokens": max_new_tokens, "limit": limit, "shard_size": shard_size, "max_frames": max_frames}
    work.mkdir(parents=True, exist_ok=True)
    _remove_temps(dst)
    _remove_temps(work)
    cfg_file = work / "config.json"
    if cfg_file.is_file() and json.loads(cfg_file.read_text()) != config:
        raise ConfigError(f"{out} holds an unfinished run with other options; use another --out or the same options")
    _write_atomic(cfg_file, json.dumps(config, indent=2) + "\n")
    tgt = load_target(target, device=device, dtype=dtype, max_frames=max_frames)
    decoder = SpeculativeDecoder(tgt)
    tables = {}
    for name in names:
        table = data[name]
        n = len(table) if limit is None else min(limit, len(table))
        (work / name).mkdir(exist_ok=True)
        _remove_temps(work / name)
        rows: list[dict] = []
        for start in tqdm(range(0, n, shard_size), desc=f"distill {name}", unit="shard"):
            stop = min(n, start + shard_size)
            shard = work / name / f"shard-{start // shard_size:05d}.jsonl"
            done = _read_shard(shard, stop - start)
            if done is None:
                lines = []
                for r in table.select(range(start, stop)).to_list():
                    video = Path(r["video"])
                    video = video if video.is_absolute() else src / video
                    question = r["question"] + (f" {prompt_suffix}" if prompt_suffix else "")
                    res = decoder.generate(Request(question, tgt.read_video(str(video))), max_new_tokens=max_new_tokens)
                    text = res.text.strip()
                    lines.append(json.dumps({**r, "video": str(video), "question": question,
                                             "reference_answer": r.get("answer"), "answer": text,
                                             "answer_tokens": res.num_new_tokens}))
                _write_atomic(shard, "\n".join(lines) + "\n")
                done = [json.loads(x) for x in lines]
            rows += done
        tables[name] = Dataset.from_list(rows)
    # The manifest marks a finished dataset: gone while the dataset is (re)written, written last.
    (dst / MANIFEST).unlink(missing_ok=True)
    DatasetDict(tables).save_to_disk(str(dst))
    _write_atomic(dst / MANIFEST, json.dumps({**config, "rows": {k: len(v) for k, v in tables.items()},
                                              "target_family": tgt.family}, indent=2) + "\n")
    print(f"wrote {sum(len(v) for v in tables.values())} distilled rows to {dst}")
    return 0


def distill_data_main(argv: list[str]) -> int:
    """Entry point of ``vidspec distill-data`` (see :func:`distill_data`)."""
    from vidspec.decoding.cli import run_function

    return run_function(distill_data, "vidspec distill-data", argv)
