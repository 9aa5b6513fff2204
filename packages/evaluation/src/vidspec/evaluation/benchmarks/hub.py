"""A benchmark's videos from its hub repository, fetched and unpacked where lmms-eval puts them.

lmms-eval downloads a video benchmark's dataset repository with ``huggingface_hub.snapshot_download``,
unpacks every ``.zip`` and every ``.tar`` (split ``name_1.tar``, ``name_2.tar`` parts concatenated first)
into ``$HF_HOME/<cache_dir>``, and skips all of that when the folder is already there. vidspec does the
same with the same folder names (a task's ``video_cache``), so a machine that ran lmms-eval, or this,
once has the videos for both, and a folder put there by hand is used as it is.
"""

from __future__ import annotations

import logging
import os
import re
import tarfile
import zipfile
from pathlib import Path

from vidspec.evaluation.benchmarks.types import BenchmarkError, TaskSpec

log = logging.getLogger(__name__)


def hf_home() -> Path:
    """``$HF_HOME``, else ``~/.cache/huggingface`` (where lmms-eval resolves its video caches)."""
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface/")).expanduser()


def video_cache_dir(task: TaskSpec) -> Path | None:
    """Where ``task``'s videos are unpacked (``$HF_HOME/<video_cache>``), or None for a task without one."""
    return hf_home() / task.video_cache if task.video_cache else None


def _tar_groups(tars: list[Path]) -> dict[str, list[Path]]:
    """Tar files grouped by archive: ``videos_1.tar``, ``videos_2.tar`` are parts of ``videos.tar``."""
    groups: dict[str, list[Path]] = {}
    for t in sorted(tars):
        base = re.sub(r"_\d+$", "", str(t).split(".tar")[0])
        groups.setdefault(base, []).append(t)
    return groups


def unpack_archives(snapshot: Path, dest: Path) -> int:
    """Unpack every zip and tar archive under ``snapshot`` into ``dest``; returns how many were unpacked."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for z in sorted(snapshot.rglob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            zf.extractall(dest)
        count += 1
    for base, parts in _tar_groups([p for p in snapshot.rglob("*.tar*") if p.is_file()]).items():
        if len(parts) == 1:
            archive = parts[0]
        else:  # split parts: joined in name order beside the snapshot's files, as one archive
            archive = dest / (Path(base).name + ".tar")
            with open(archive, "wb") as out:
                for part in parts:
                    out.write(part.read_bytes())
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")
        if len(parts) > 1:
            archive.unlink()
        count += 1
    return count


def fetch_videos(task: TaskSpec) -> Path:
    """The folder holding ``task``'s videos: ``$HF_HOME/<video_cache>``, downloaded and unpacked if missing.

    Raises:
        BenchmarkError: the task names no video cache, or the hub cannot be reached (one line saying
            where to put the videos instead).
    """
    dest = video_cache_dir(task)
    if dest is None:
        raise BenchmarkError(f"{task.name}: the task names no video_cache; pass video_dir (the folder with its videos)")
    if dest.exists():
        return dest
    try:
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(repo_id=task.dataset, repo_type="dataset",
                                          revision=task.video_revision or None))
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise BenchmarkError(
            f"{task.name}: cannot download the videos of {task.dataset!r} ({type(e).__name__}: {first}); "
            f"unpack them into {dest} or pass video_dir"
        ) from None
    n = unpack_archives(snapshot, dest)
    if n == 0:  # videos stored unpacked in the repository: use the snapshot itself
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(snapshot, target_is_directory=True)
    log.info("%s: %d archive(s) of %s unpacked into %s", task.name, n, task.dataset, dest)
    return dest
