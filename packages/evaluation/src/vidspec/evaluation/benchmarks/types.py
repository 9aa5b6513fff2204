"""What a benchmark is (a :class:`TaskSpec`, read from YAML) and what it yields (:class:`Sample`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from vidspec.decoding.errors import VidspecError

#: How a sample's output is scored: the GPT judge (0-5 against the reference), multiple-choice
#: accuracy (the output's option letter against ``answer_letter``), or the SynthVid fact judge.
Metric = Literal["gpt_judge", "mcq_accuracy", "synthvid_facts"]
METRICS: tuple[str, ...] = get_args(Metric)


class BenchmarkError(VidspecError):
    """A benchmark cannot be loaded: unknown name, unreadable dataset, or rows not in its schema."""


@dataclass(frozen=True)
class Sample:
    """One evaluation item in the form every benchmark is mapped to.

    Attributes:
        sample_id: unique within the benchmark split; stable across runs (results are keyed by it).
        video_path: absolute path of an existing video file.
        prompt: the full text prompt given to the Video-LLM (task template applied).
        reference: the reference answer: the human caption/answer for open-ended tasks, the text
            of the correct option for multiple choice.
        options: option texts without their letters, in order (``()`` for open-ended tasks).
        answer_letter: the correct option's letter (``"A"`` for ``options[0]``), or ``None``.
        metric: how the output is scored (:data:`Metric`).
        extra: benchmark-specific fields kept for reports (``question`` always; e.g. duration,
            domain, task type, SynthVid ``facts``). Not part of the hash.
    """

    sample_id: str
    video_path: str
    prompt: str
    reference: str
    options: tuple[str, ...]
    answer_letter: str | None
    metric: Metric
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def question(self) -> str:
        """The benchmark's question without the task template (what the GPT judge is shown)."""
        return str(self.extra.get("question", self.prompt))


@dataclass(frozen=True)
class TaskSpec:
    """A benchmark task, read from ``benchmarks/tasks/<name>.yaml``.

    Attributes:
        name: registry name (the YAML file's stem).
        description: one line for listings.
        dataset: the dataset's hub id, used when no local path is given.
        dataset_config: hub configuration (subset) name, or ``None``; for local folders of
            several files, the file stem to prefer (e.g. an MVBench sub-task).
        split: the split evaluated by default.
        subdir: a sub-folder of a local dataset folder that holds this task's table (SynthVid
            keeps multiple choice in ``mcq/``), used when it exists.
        row_fn: name of the function in :mod:`vidspec.evaluation.benchmarks.rows` that maps one
            row to a sample.
        prompt: template of the model prompt; fields ``{question}`` and ``{options}`` (options
            one per line as ``A. text``).
        frames: frames sampled per video (64 or 128 as in the papers that report the benchmark).
        max_new_tokens: generation budget per sample.
        metric: how outputs are scored.
        video_dirs: sub-folders of the video root searched for a row's video, in order ("" is
            the root itself), mirroring where each dataset's archives unpack.
        video_extensions: other extensions tried when the named file is missing (some datasets
            name ``.mp4`` files that are really ``.mkv`` or ``.MP4``).
        one_per_prompt: keep only the first row of each (video, question) pair. A dataset with
            several reference wordings per video (SynthVid built with ``--captions-per-video 2``)
            would otherwise decode the same prompt several times, each time alike, and count it
            as several samples.
        option_format: how one option is written in ``{options}``; fields ``{letter}`` and ``{text}``
            (``"{letter}. {text}"``; MVBench's lmms-eval prompt uses ``"({letter}) {text}"``).
        scoring: the multiple-choice reading of :mod:`~vidspec.evaluation.benchmarks.scoring`
            (``videomme``, ``mvbench``, ``longvideobench``), or None for vidspec's general one.
            A task with a scoring protocol keeps its prompt exactly (no whitespace is trimmed).
        judge: the judge protocol of a ``gpt_judge`` task (:mod:`vidspec.evaluation.judge.protocols`):
            ``detail``, ``correctness`` or ``vdcscore`` (:mod:`vidspec.evaluation.judge.vdc`); None for
            vidspec's earlier 0-5 score.
        data_files: for a local dataset folder, the file (a glob relative to the folder) that holds each
            split, e.g. ``{validation: lvb_val.json}``, so that files beside it (other splits,
            subtitles) are not read as rows.
        categories: the ``extra`` fields a report breaks the score down by (e.g. Video-MME's
            ``duration``, ``domain``, ``task_type``).
        video_cache: for a dataset loaded from the hub, the folder under ``$HF_HOME`` its videos are
            unpacked into, named as lmms-eval names it (:mod:`~vidspec.evaluation.benchmarks.hub`).
        video_revision: the hub revision that holds the video archives (MVBench keeps them on ``video``).
    """

    name: str
    description: str
    dataset: str
    split: str
    row_fn: str
    prompt: str
    frames: int
    max_new_tokens: int
    metric: Metric
    dataset_config: str | None = None
    subdir: str | None = None
    video_dirs: tuple[str, ...] = ("",)
    video_extensions: tuple[str, ...] = ()
    one_per_prompt: bool = False
    option_format: str = "{letter}. {text}"
    scoring: str | None = None
    judge: str | None = None
    data_files: dict[str, str] | None = None
    categories: tuple[str, ...] = ()
    video_cache: str | None = None
    video_revision: str | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise BenchmarkError(f"task {self.name}: metric must be one of {METRICS}, got {self.metric!r}")
        if self.frames < 1 or self.max_new_tokens < 1:
            raise BenchmarkError(f"task {self.name}: frames and max_new_tokens must be positive")
        try:
            self.prompt.format(question="", options="")
        except (KeyError, IndexError, ValueError) as e:
            raise BenchmarkError(
                f"task {self.name}: prompt may only use {{question}} and {{options}} ({e!r})"
            ) from None
        object.__setattr__(self, "video_dirs", tuple(self.video_dirs))
        object.__setattr__(self, "video_extensions", tuple(self.video_extensions))
        object.__setattr__(self, "categories", tuple(self.categories))
        try:
            self.option_format.format(letter="A", text="")
        except (KeyError, IndexError, ValueError) as e:
            raise BenchmarkError(
                f"task {self.name}: option_format may only use {{letter}} and {{text}} ({e!r})") from None
        from vidspec.evaluation.benchmarks.scoring import PROTOCOLS

        if self.scoring is not None and self.scoring not in PROTOCOLS:
            raise BenchmarkError(f"task {self.name}: scoring must be one of {PROTOCOLS}, got {self.scoring!r}")
        if self.judge is not None and self.judge not in ("detail", "correctness", "vdcscore"):
            raise BenchmarkError(f"task {self.name}: judge must be detail, correctness or vdcscore, got {self.judge!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, name: str) -> TaskSpec:
        """A spec from parsed YAML; unknown keys are errors, so typos do not pass silently."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BenchmarkError(f"task {name}: unknown key(s) {unknown}; known: {sorted(known)}")
        data = {**data, "name": data.get("name", name)}
        missing = sorted(k for k in ("description", "dataset", "split", "row_fn", "prompt", "frames",
                                     "max_new_tokens", "metric") if k not in data)
        if missing:
            raise BenchmarkError(f"task {name}: missing key(s) {missing}")
        return cls(**data)
