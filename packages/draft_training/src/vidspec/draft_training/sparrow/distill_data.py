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

Sharded over processes or machines: ``--shard i/n`` (0 <= i < n) answers only the row chunks c (``shard_size`` rows
each) with c % n == i, into the same ``OUT/.work`` files, and stops without assembling: the shards are disjoint,
their union is every chunk, the assignment depends only on (row count, ``shard_size``, n), and each shard resumes
like a whole run. When every shard has finished, ``--merge true`` assembles the dataset from the chunk files (exit 2,
naming the missing chunks, while any is unfinished). All shards and the merge take the same options.

Batched (``--batch-size B`` > 1): B requests of a chunk go through transformers' ``generate`` at once (left
padding, greedy), the GPU path for large sets; ``--batch-size 1`` (the default) decodes one request at a time
with vidspec's own decoder. Greedy answers are the same either way up to the numerics of padded batches
(tested on the tiny targets in float32).

Usage::

    vidspec distill-data --target runs/synthvid-target/release --dataset data/cache/synthvid \\
        --out data/cache/synthvid-distilled --max-new-tokens 256
    vidspec distill-data ... --prompt-suffix "Please answer with at least 1000 words."   # the paper's
    vidspec distill-data ... --shard 0/8      # on each of 8 GPUs / nodes: --shard 1/8, ..., --shard 7/8
    vidspec distill-data ... --merge true     # once all 8 have finished
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
_TEMP = re.compile(r"\.(?:shard-\d{5,}\.jsonl|config\.json|target\.json|distill\.json)\.[0-9a-f]{8}")


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


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` -> ``(i, n)`` with 0 <= i < n; None stays None.

    Raises:
        ConfigError: not of that form.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise ConfigError(f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/4")
    return int(m[1]), int(m[2])


def chunks_of_shard(n_rows: int, shard_size: int, shard: tuple[int, int] | None) -> list[int]:
    """The chunk numbers (``shard_size`` rows each) a shard answers: c % n == i; every chunk without a shard."""
    n_chunks = -(-n_rows // shard_size)
    if shard is None:
        return list(range(n_chunks))
    i, n = shard
    return [c for c in range(n_chunks) if c % n == i]


def batched_answers(tgt, requests: list, max_new_tokens: int) -> list[tuple[str, int]]:
    """Greedy answers of ``requests`` in one transformers ``generate`` call (left-padded prompts).

    Returns:
        ``(text, new tokens)`` per request, the EOS not counted, in order.
    """
    import torch

    kws = [tgt.generate_inputs(*tgt.build_prompt(r)) for r in requests]
    n = max(kw["input_ids"].shape[1] for kw in kws)
    pad = tgt.tokenizer.pad_token_id if tgt.tokenizer.pad_token_id is not None else min(tgt.eos_token_ids)
    ids = torch.full((len(kws), n), pad, dtype=torch.long, device=tgt.device)
    mask = torch.zeros_like(ids)
    for b, kw in enumerate(kws):
        k = kw["input_ids"].shape[1]
        ids[b, n - k:] = kw["input_ids"][0]
        mask[b, n - k:] = 1
    batch = {"input_ids": ids, "attention_mask": mask}
    for key in kws[0]:
        if key not in batch and isinstance(kws[0][key], torch.Tensor):
            batch[key] = torch.cat([kw[key] for kw in kws]).to(tgt.device)
    with torch.inference_mode():
        out = tgt.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad,
                                 eos_token_id=sorted(tgt.eos_token_ids))
    answers = []
    for row in out[:, n:].tolist():
        stop = next((i for i, t in enumerate(row) if t in tgt.eos_token_ids), len(row))
        answers.append((tgt.tokenizer.decode(row[:stop], skip_special_tokens=True).strip(), stop))
    return answers


def _device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def distill_data(
    target: str = "tiny-qwen2.5-vl",
    dataset: str = "",
    out: str = "",
    splits: list[str] | None = None,
    prompt_suffix: str | None = None,
    max_new_tokens: int = 256,
    limit: int | None = None,
    shard_size: int = 16,
    device: str = "auto",
    dtype: str | None = None,
    max_frames: int | None = None,
    shard: str | None = None,
    merge: bool = False,
    progress: bool = True,
    batch_size: int = 1,
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
        shard_size: rows per resumable chunk file.
        device: cpu, cuda, ...; "auto" is CUDA when present, else the CPU.
        dtype: model dtype (default: bf16 on CUDA, fp32 on CPU).
        max_frames: frames per video (default: the target's).
        shard: ``i/n``: answer only this process's disjoint share of the chunks and do not assemble (see the
            module docstring).
        merge: assemble the dataset from the chunks all shards wrote (no model is loaded).
        progress: show a progress bar (rows answered, per split).
        batch_size: requests per transformers ``generate`` call (1: vidspec's decoder, one request at a time).
    """
    from datasets import Dataset, DatasetDict, load_from_disk
    from tqdm.auto import tqdm

    from vidspec.decoding.loops.chain import SpeculativeDecoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    if not dataset or not out:
        raise ConfigError("--dataset and --out are required")
    part = parse_shard(shard)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    if part is not None and merge:
        raise ConfigError("--shard and --merge go to separate runs: first every shard, then one --merge")
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
    if merge:
        return _merge(data, names, limit, shard_size, work, dst, config)
    tgt = load_target(target, device=_device(device), dtype=dtype, max_frames=max_frames)
    decoder = SpeculativeDecoder(tgt)
    _write_atomic(work / "target.json", json.dumps({"target_family": tgt.family}) + "\n")  # for --merge
    tables = {}
    for name in names:
        table = data[name]
        n = len(table) if limit is None else min(limit, len(table))
        (work / name).mkdir(exist_ok=True)
        _remove_temps(work / name)
        rows: list[dict] = []
        mine = chunks_of_shard(n, shard_size, part)
        bar = tqdm(total=sum(min(n, (c + 1) * shard_size) - c * shard_size for c in mine), disable=not progress,
                   desc=f"distill {name}" + (f" shard {part[0]}/{part[1]}" if part else ""), unit="row")
        for c in mine:
            start, stop = c * shard_size, min(n, (c + 1) * shard_size)
            shard_file = work / name / f"shard-{c:05d}.jsonl"
            done = _read_shard(shard_file, stop - start)
            if done is None:
                lines = []
                chunk = table.select(range(start, stop)).to_list()
                for g in range(0, len(chunk), batch_size):
                    group, requests, videos = chunk[g:g + batch_size], [], []
                    for r in group:
                        video = Path(r["video"])
                        videos.append(video if video.is_absolute() else src / video)
                        question = r["question"] + (f" {prompt_suffix}" if prompt_suffix else "")
                        requests.append(Request(question, tgt.read_video(str(videos[-1]))))
                    if batch_size == 1:
                        res = decoder.generate(requests[0], max_new_tokens=max_new_tokens)
                        answers = [(res.text.strip(), res.num_new_tokens)]
                    else:
                        answers = batched_answers(tgt, requests, max_new_tokens)
                    for r, video, req, (text, n_new) in zip(group, videos, requests, answers):
                        lines.append(json.dumps({**r, "video": str(video), "question": req.prompt,
                                                 "reference_answer": r.get("answer"), "answer": text,
                                                 "answer_tokens": n_new}))
                    bar.update(len(group))
                _write_atomic(shard_file, "\n".join(lines) + "\n")
                done = [json.loads(x) for x in lines]
            else:
                bar.update(stop - start)  # a finished chunk of an earlier run
            rows += done
        bar.close()
        tables[name] = Dataset.from_list(rows)
    if part is not None:
        print(f"shard {part[0]}/{part[1]} done: {sum(len(t) for t in tables.values())} rows in {work}; "
              "run the same command with --merge once every shard has finished")
        return 0
    # The manifest marks a finished dataset: gone while the dataset is (re)written, written last.
    (dst / MANIFEST).unlink(missing_ok=True)
    DatasetDict(tables).save_to_disk(str(dst))
    _write_atomic(dst / MANIFEST, json.dumps({**config, "rows": {k: len(v) for k, v in tables.items()},
                                              "target_family": tgt.family}, indent=2) + "\n")
    print(f"wrote {sum(len(v) for v in tables.values())} distilled rows to {dst}")
    return 0


def _merge(data, names: list[str], limit: int | None, shard_size: int, work: Path, dst: Path, config: dict) -> int:
    """Assemble the dataset from the chunk files of every shard; refuses while any chunk is missing."""
    from datasets import Dataset, DatasetDict

    tables, missing = {}, []
    for name in names:
        n = len(data[name]) if limit is None else min(limit, len(data[name]))
        rows: list[dict] = []
        for c in chunks_of_shard(n, shard_size, None):
            done = _read_shard(work / name / f"shard-{c:05d}.jsonl", min(n, (c + 1) * shard_size) - c * shard_size)
            if done is None:
                missing.append(f"{name}/shard-{c:05d}")
            else:
                rows += done
        tables[name] = rows
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ConfigError(f"cannot merge {dst}: {len(missing)} chunks unfinished ({', '.join(missing[:5])}{more}); "
                          "rerun their shards")
    (dst / MANIFEST).unlink(missing_ok=True)
    DatasetDict({k: Dataset.from_list(v) for k, v in tables.items()}).save_to_disk(str(dst))
    family = json.loads((work / "target.json").read_text())["target_family"] if (work / "target.json").is_file() else None
    _write_atomic(dst / MANIFEST, json.dumps({**config, "rows": {k: len(v) for k, v in tables.items()},
                                              "target_family": family}, indent=2) + "\n")
    print(f"merged {sum(len(v) for v in tables.values())} distilled rows into {dst}")
    return 0


def distill_data_main(argv: list[str]) -> int:
    """Entry point of ``vidspec distill-data`` (see :func:`distill_data`)."""
    from vidspec.decoding.cli import run_function

    return run_function(distill_data, "vidspec distill-data", argv)
