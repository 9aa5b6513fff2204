"""Self-distilled training data: the target writes the answers (``vidspec distill-data``).

Sparrow trains on what the target itself says (ALGORITHMS.md section 3, training data). This
command reads a dataset on disk with ``video``, ``question`` (and ``answer``) columns, e.g.
SynthVid, lets the target answer every question greedily, and writes the same rows with
``answer`` replaced by the target's text (the original is kept as ``reference_answer``) as a
``datasets`` DatasetDict that ``VideoTextDataModule`` reads directly. Video paths are written
absolute.

Resumable: answers go to ``OUT/.work/<split>/shard-NNNNN.jsonl`` (each written beside and
renamed), finished shards are skipped on a rerun, and the dataset is assembled at the end.

Usage::

    vidspec distill-data --target runs/synthvid-target/release --dataset data/cache/synthvid \\
        --out data/cache/synthvid-distilled --max-new-tokens 256
    vidspec distill-data ... --prompt-suffix "Please answer with at least 1000 words."   # the paper's
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from vidspec.decoding.errors import ConfigError

WORK = ".work"
MANIFEST = "distill.json"


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

    from vidspec.decoding.engine import SpeculativeDecoder
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
    cfg_file = work / "config.json"
    if cfg_file.is_file() and json.loads(cfg_file.read_text()) != config:
        raise ConfigError(f"{out} holds an unfinished run with other options; use another --out or the same options")
    cfg_file.write_text(json.dumps(config, indent=2) + "\n")
    tgt = load_target(target, device=device, dtype=dtype, max_frames=max_frames)
    decoder = SpeculativeDecoder(tgt)
    tables = {}
    for name in names:
        table = data[name]
        n = len(table) if limit is None else min(limit, len(table))
        (work / name).mkdir(exist_ok=True)
        rows: list[dict] = []
        for start in tqdm(range(0, n, shard_size), desc=f"distill {name}", unit="shard"):
            shard = work / name / f"shard-{start // shard_size:05d}.jsonl"
            if not shard.is_file():
                lines = []
                for r in table.select(range(start, min(n, start + shard_size))).to_list():
                    video = Path(r["video"])
                    video = video if video.is_absolute() else src / video
                    question = r["question"] + (f" {prompt_suffix}" if prompt_suffix else "")
                    res = decoder.generate(Request(question, tgt.read_video(str(video))), max_new_tokens=max_new_tokens)
                    text = res.text.strip()
                    lines.append(json.dumps({**r, "video": str(video), "question": question,
                                             "reference_answer": r.get("answer"), "answer": text,
                                             "answer_tokens": res.num_new_tokens}))
                tmp = shard.with_name(f".{shard.name}.{uuid.uuid4().hex[:8]}")
                tmp.write_text("\n".join(lines) + "\n")
                os.replace(tmp, shard)
            rows += [json.loads(x) for x in shard.read_text().splitlines() if x.strip()]
        tables[name] = Dataset.from_list(rows)
    DatasetDict(tables).save_to_disk(str(dst))
    (dst / MANIFEST).write_text(json.dumps({**config, "rows": {k: len(v) for k, v in tables.items()},
                                            "target_family": tgt.family}, indent=2) + "\n")
    print(f"wrote {sum(len(v) for v in tables.values())} distilled rows to {dst}")
    return 0


def distill_data_main(argv: list[str]) -> int:
    """Entry point of ``vidspec distill-data`` (see :func:`distill_data`)."""
    from jsonargparse import ArgumentParser

    from vidspec.decoding.cli import normalize_flags

    parser = ArgumentParser(prog="vidspec distill-data", description=distill_data.__doc__.splitlines()[0])
    parser.add_function_arguments(distill_data, as_positional=False)
    cfg = parser.parse_args(normalize_flags(argv))
    return distill_data(**{k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"})
