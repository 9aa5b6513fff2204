"""The benchmark registry: task YAMLs (package data) plus row functions.

Usage::

    from vidspec.evaluation.benchmarks import load_benchmark, get_task

    samples = load_benchmark("videomme", "/data/Video-MME", limit=10)   # local copy
    samples = load_benchmark("videomme", "lmms-lab/Video-MME")           # hub id: rows and videos fetched
    task = get_task("videomme")          # frames, max_new_tokens, metric, prompt template

Add a benchmark by adding ``tasks/<name>.yaml`` (and, for a new schema, a function in
:mod:`~vidspec.evaluation.benchmarks.rows`).
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from vidspec.decoding.errors import VideoError
from vidspec.evaluation.benchmarks.rows import LETTERS, ROW_FUNCTIONS, MappedRow
from vidspec.evaluation.benchmarks.sources import read_rows
from vidspec.evaluation.benchmarks.types import BenchmarkError, Sample, TaskSpec

#: Missing video files named in an error before the rest are only counted.
_MAX_LISTED = 10


def _tasks_dir():
    return resources.files("vidspec.evaluation.benchmarks") / "tasks"


def list_benchmarks() -> list[str]:
    """Names of the registered benchmarks (the task YAMLs' stems), sorted."""
    return sorted(p.name[: -len(".yaml")] for p in _tasks_dir().iterdir() if p.name.endswith(".yaml"))


@cache
def _registered(name: str) -> TaskSpec:
    data = yaml.safe_load((_tasks_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise BenchmarkError(f"task {name}: the YAML must be a mapping")
    return TaskSpec.from_dict(data, name=name)


def get_task(name: str | Path) -> TaskSpec:
    """The task spec of a registered benchmark, or of a task YAML file at ``name``.

    Names are matched case-insensitively, with ``-`` read as ``_`` (``Video-MME`` is not
    ``videomme``: use the listed names).

    Raises:
        BenchmarkError: unknown name, or an invalid YAML.
    """
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise BenchmarkError(f"{path}: a task YAML must be a mapping")
        return TaskSpec.from_dict(data, name=path.stem)
    key = str(name).lower().replace("-", "_")
    if key not in list_benchmarks():
        raise BenchmarkError(f"unknown benchmark {str(name)!r}; choose from {', '.join(list_benchmarks())}")
    spec = _registered(key)
    if spec.row_fn not in ROW_FUNCTIONS:
        raise BenchmarkError(f"task {key}: unknown row_fn {spec.row_fn!r}; known: {sorted(ROW_FUNCTIONS)}")
    return spec


def render_prompt(task: TaskSpec, question: str, options: tuple[str, ...]) -> str:
    """The model prompt of a sample: the task's template with the question and lettered options.

    A task that follows an lmms-eval protocol (``scoring``) gets its template exactly as written, so
    that the prompt is character for character lmms-eval's; others are trimmed.
    """
    lines = "\n".join(task.option_format.format(letter=LETTERS[i], text=text) for i, text in enumerate(options))
    prompt = task.prompt.format(question=question, options=lines)
    return prompt if task.scoring else prompt.strip()


def _protocol_fields(task: TaskSpec, extra: dict | None = None) -> dict:
    """What travels with a sample from its task: the MCQ reading and the judge protocol (when the task names
    them) and its ``categories`` (name -> value, for per-category tables)."""
    out: dict = {}
    if task.scoring:
        out["scoring"] = task.scoring
    if task.judge:
        out["judge_protocol"] = task.judge
    if task.categories:
        out["categories"] = {c: str((extra or {}).get(c, "")) for c in task.categories}
    return out


def _video_roots(root: Path | None, video_dir: str | Path | None) -> list[Path]:
    if video_dir is not None:
        return [Path(video_dir).expanduser()]
    if root is None:
        return []
    # SynthVid's mcq/ table names videos relative to the dataset folder above it.
    return [root, root.parent]


def _locate(video: str, roots: list[Path], task: TaskSpec) -> Path | None:
    names = [video] + [str(Path(video).with_suffix(ext)) for ext in task.video_extensions]
    if Path(video).is_absolute():
        return next((Path(n) for n in names if Path(n).is_file()), None)
    for root in roots:
        for sub in task.video_dirs:
            for name in names:
                candidate = root / sub / name
                if candidate.is_file():
                    # Absolute but not resolved: a linked video keeps the name the dataset uses.
                    return Path(os.path.abspath(candidate))
    return None


def load_benchmark(
    name: str | Path,
    path_or_id: str | Path | None = None,
    split: str | None = None,
    limit: int | None = None,
    *,
    video_dir: str | Path | None = None,
    check_videos: bool = True,
) -> list[Sample]:
    """The samples of a benchmark, mapped to :class:`Sample` with their video files located.

    Args:
        name: a registered benchmark (:func:`list_benchmarks`) or a task YAML path.
        path_or_id: a local dataset (folder or file) or a hub id; default the task's hub id.
        split: default the task's split.
        limit: keep only the first ``limit`` rows (before videos are looked for; with the task's
            ``one_per_prompt``, the first ``limit`` distinct (video, question) rows).
        video_dir: the folder that holds the videos (searched with the task's ``video_dirs``);
            default the dataset's folder and its parent; for a hub dataset, its videos fetched and
            unpacked into ``$HF_HOME/<video_cache>`` as lmms-eval does (:func:`~vidspec.evaluation.benchmarks.hub.fetch_videos`).
        check_videos: look for every video file and fail on missing ones; with ``False``,
            ``video_path`` is the row's path joined to the first root, unchecked.

    Returns:
        The samples, in dataset order.

    Raises:
        BenchmarkError: unknown benchmark, unreadable dataset, rows not in the schema, duplicate
            sample ids, or no video folder for a hub dataset.
        VideoError: video files are missing (the error names them and the folders searched).
    """
    task = get_task(name)
    if limit is not None and limit < 0:
        raise BenchmarkError(f"limit must be >= 0, got {limit}")
    split = split or task.split
    data = read_rows(path_or_id or task.dataset, split=split, config=task.dataset_config, subdir=task.subdir,
                     data_files=task.data_files)
    row_fn = ROW_FUNCTIONS[task.row_fn]
    mapped: list[MappedRow] = []
    prompts: set[tuple[str, str]] = set()
    for index, (row, source) in enumerate(data.rows):
        if limit is not None and len(mapped) >= limit:  # counts kept samples (one_per_prompt skips some rows)
            break
        try:
            m = row_fn(row, index, source)
        except BenchmarkError as e:
            raise BenchmarkError(f"{task.name} ({data.description}): {e}") from None
        if task.one_per_prompt:
            if (m.video, m.question) in prompts:
                continue
            prompts.add((m.video, m.question))
        mapped.append(m)
    seen: set[str] = set()
    for m in mapped:
        if m.sample_id in seen:
            raise BenchmarkError(f"{task.name} ({data.description}): duplicate sample id {m.sample_id!r}")
        seen.add(m.sample_id)

    roots = _video_roots(data.root, video_dir)
    if not roots and mapped and check_videos:
        # Rows from the hub: the videos come from the same repository, unpacked as lmms-eval unpacks them.
        from vidspec.evaluation.benchmarks.hub import fetch_videos

        roots = [fetch_videos(task)]
    if not roots and mapped:
        raise BenchmarkError(
            f"{task.name}: the dataset came from the hub, which does not hold the videos here; "
            "pass video_dir (the folder with the benchmark's video files)"
        )
    samples: list[Sample] = []
    missing: list[str] = []
    for m in mapped:
        found = _locate(m.video, roots, task) if check_videos else None
        if found is None:
            if check_videos:
                missing.append(m.video)
                continue
            found = Path(m.video) if Path(m.video).is_absolute() else roots[0] / task.video_dirs[0] / m.video
        samples.append(
            Sample(
                sample_id=m.sample_id,
                video_path=str(found),
                prompt=render_prompt(task, m.question, m.options),
                reference=m.reference,
                options=m.options,
                answer_letter=m.answer_letter,
                metric=task.metric,
                extra={"question": m.question, **m.extra, **_protocol_fields(task, m.extra)},
            )
        )
    if missing:
        listed = ", ".join(missing[:_MAX_LISTED])
        more = f" and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else ""
        searched = ", ".join(str(r / s) if s else str(r) for r in roots for s in task.video_dirs)
        raise VideoError(
            f"{task.name}: {len(missing)} of {len(mapped)} video file(s) not found: {listed}{more} "
            f"(searched {searched}; pass video_dir= to point elsewhere)"
        )
    return samples
