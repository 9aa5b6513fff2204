"""Run decoding methods side by side on a benchmark: speed and fidelity per sample, resumable.

Usage::

    from vidspec.evaluation.runner import EvalConfig, run_eval

    cfg = EvalConfig(benchmark="synthvid_captions", data="data/cache/synthvid", out="runs/sv",
                     target="tiny-qwen2.5-vl", sparrow="random", limit=3, max_new_tokens=24)
    summary = run_eval(cfg)          # writes runs/sv/{config,summary}.json, records.jsonl
    summary["methods"]["sd"]["dsr"]

For each sample, AR runs first (the baseline), then every other method, in this process on the
same hardware. Each model is loaded once and shared by all methods. Before any timing, every
method warms up untimed with the decoder's own ``warmup`` (the one ``vidspec generate`` and the Python API
use: a short decode of the first sample, then on the fast engine every CUDA graph its timed decodes can need,
see :func:`capture_fast_graphs`); records keep its seconds (``warmup_s``) apart, and ``k_history`` (what the
adaptive draft policy did in each request). Records are
appended and fsynced one by one, so a killed run loses at most the decode in flight; rerunning
with the same ``out`` skips every (sample, method) already recorded and every verdict already
judged. The metric conventions are :data:`vidspec.evaluation.records.CONVENTIONS`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import platform
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from vidspec.decoding.config import DecodeConfig
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.loops.warm import capture_graphs_around, tree_verify_sizes  # noqa: F401 - re-exported
from vidspec.decoding.methods import (
    METHODS,
    as_fast,
    build_decoder,
    default_draft,
    get_method,
    tree_fast_options,
)
from vidspec.decoding.prompts import check_prompts
from vidspec.decoding.types import GenerationResult, Request
from vidspec.evaluation.benchmarks import Sample, get_task, load_benchmark
from vidspec.evaluation.benchmarks.clips import read_sample_video
from vidspec.evaluation.records import (
    CONVENTIONS,
    SCHEMA_VERSION,
    JsonlLog,
    JudgementRecord,
    RunSummary,
    SampleRecord,
    read_jsonl,
    speedups,
    summarize,
)

log = logging.getLogger(__name__)

#: ``--sparrow`` value that builds a random-weight Sparrow draft for the target in process (CI and
#: demos without a trained release: lossless, so still token-identical to AR, but τ near 1).
RANDOM_SPARROW = "random"

#: Config fields that may change between a run and its resumption; any other change would mix
#: incomparable records in one folder, so it is refused.
RESUMABLE_CHANGES = frozenset({"out", "limit", "methods", "progress", "warmup", "judge", "judge_base_url",
                               "judge_model", "fast_max_len", "judge_workers", "judge_timeout_s",
                               "judge_keep_unparsable"})
#: Values of config fields added after runs were recorded without them (resuming such a run is allowed
#: when the new value is this default). Decode fields are compared flat (a run folder written before
#: the config nested them under ``decode`` holds them at the top level).
ADDED_DEFAULTS: dict[str, Any] = {"engine": "eager", "scorer": "cosine", "attention_heads": "mean", "probe": None,
                                  "draft_vocab": None, "eps": 0.01, "top_k": 5,
                                  "tree_total": DecodeConfig.tree_total, "tree_depth": DecodeConfig.tree_depth,
                                  "tree_top_k": DecodeConfig.tree_top_k, "device_rounds": True, "loose_device": False,
                                  "sparrow_k": None, "fast_gemv": "off", "fast_compile": True, "share_video": False,
                                  "shard": None}


@dataclass(frozen=True)
class EvalConfig:
    """What ``vidspec eval`` runs.

    Attributes:
        benchmark: a registered benchmark name (see ``vidspec.evaluation.benchmarks``) or a task YAML.
        out: the run folder; rerunning with the same folder resumes.
        data: local dataset folder/file or hub id (default: the task's dataset).
        split: dataset split (default: the task's).
        limit: evaluate only the first N samples.
        video_dir: folder holding the benchmark's videos (hub datasets).
        target: target model: built-in tiny name, release/HF folder, or hub id.
        draft: draft VLM for sd, lvspec, lvspec-pst, fly, tree-sd (default: the built-in draft of a tiny target).
        sparrow: Sparrow draft release folder for the sparrow methods, or "random" for a
            random-weight draft built in process (tests, CI).
        allow_target_mismatch: use a Sparrow draft distilled from another target.
        methods: methods to compare; AR always runs as the baseline.
        sparrow_k: draft tokens per round of the Sparrow chain methods (sparrow, sparrow-lvspec-pst),
            overriding ``k`` for them (the best K depends on the draft's cost against the target's).
        max_new_tokens: generation budget per sample (default: the task's).
        frames: frames sampled per video (default: the task's).
        device: cpu, cuda, cuda:1, ...
        dtype: float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU).
        decode: how every method decodes (K, LVSpec's knobs, the relevance scorer, the tree shape, the
            engine and its options); recorded under ``decode`` in ``config.json``. Resuming refuses a
            change of any of its fields but ``fast_max_len``.
        share_video: read each sample's video once and hand that clip to every method, each record
            counting that one read's seconds (the read does not depend on the method, so ESR stays
            comparable). For long videos, where a read takes seconds and every method would repeat it.
            Recorded; resuming refuses another.
        warmup: decode once per method, untimed, before measuring.
        judge: score open-ended outputs with the GPT judge (base URL, model and key from the
            judge flags or VIDSPEC_JUDGE_BASE_URL / VIDSPEC_JUDGE_MODEL / OPENAI_API_KEY).
        judge_base_url: judge API root (overrides the environment).
        judge_model: judge model name (overrides the environment).
        progress: show progress bars.
        shard: ``"i/n"``: run only part ``i`` (0-based) of ``n`` disjoint parts of the samples
            (:func:`shard_samples`), each part in its own ``out`` folder and resumable as any run;
            ``vidspec report`` merges the parts' folders into the table one run would give.
        judge_workers: judge requests in flight at once (each with its retries; the cache is shared).
        judge_timeout_s: seconds to wait for one judge response before the attempt counts as timed out.
        judge_keep_unparsable: on a rerun, keep the verdicts recorded as unparsable instead of asking
            the judge about them again.
    """

    benchmark: str
    out: str
    data: str | None = None
    split: str | None = None
    limit: int | None = None
    video_dir: str | None = None
    target: str = "tiny-qwen2.5-vl"
    draft: str | None = None
    sparrow: str | None = None
    allow_target_mismatch: bool = False
    methods: tuple[str, ...] = tuple(METHODS)
    sparrow_k: int | None = None
    max_new_tokens: int | None = None
    frames: int | None = None
    device: str = "cpu"
    dtype: str | None = None
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    share_video: bool = False
    warmup: bool = True
    judge: bool = False
    judge_base_url: str | None = None
    judge_model: str | None = None
    progress: bool = True
    shard: str | None = None
    judge_workers: int = 8
    judge_timeout_s: float = 60.0
    judge_keep_unparsable: bool = False

    def __post_init__(self) -> None:
        methods = tuple(self.methods.split(",")) if isinstance(self.methods, str) else tuple(self.methods)
        methods = tuple(m.strip() for m in methods if m.strip())
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ConfigError(f"unknown method(s) {', '.join(unknown)} (choose from {', '.join(METHODS)})")
        # AR is the baseline of every comparison, so it always runs, and first.
        methods = ("ar", *dict.fromkeys(m for m in methods if m != "ar"))
        object.__setattr__(self, "methods", methods)
        if isinstance(self.decode, dict):  # from a config.json or a recipe
            object.__setattr__(self, "decode", DecodeConfig(**self.decode))
        # engine auto becomes what runs (fast on CUDA, eager elsewhere), so config.json records it.
        decode = self.decode.resolve(self.device, next((m for m in methods if get_method(m).uses_relevance), None))[0]
        object.__setattr__(self, "decode", decode)
        if self.shard is not None:
            parse_shard(self.shard)
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {self.limit}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.frames is not None and self.frames < 1:
            raise ConfigError(f"--frames must be >= 1, got {self.frames}")
        if self.sparrow_k is not None and self.sparrow_k < 1:
            raise ConfigError(f"--sparrow-k must be >= 1, got {self.sparrow_k}")
        if self.judge:  # the endpoint and options are checked now, not after all the decoding
            self.judge_config()
        specs = [get_method(m) for m in methods]
        if decode.engine == "fast" and decode.scorer == "attention" and any(s.uses_relevance for s in specs):
            # Checked before config.json is written (the fast engine's decoder build would refuse it later).
            raise ConfigError("--scorer attention needs --engine eager: the fast engine does not compute "
                              "attention (attn_to_visual)")
        decode.check_device(self.device)
        needs_sparrow = [s.name for s in specs if s.drafter == "sparrow"]
        if needs_sparrow and not self.sparrow:
            raise ConfigError(f"methods {', '.join(needs_sparrow)} need --sparrow DIR "
                              f"(a Sparrow draft release, or '{RANDOM_SPARROW}' for an untrained one)")
        if decode.draft_vocab is not None:
            if self.sparrow == RANDOM_SPARROW or not self.sparrow:
                raise ConfigError("--draft-vocab needs --sparrow DIR, a release with a draft_vocab.json")
            from vidspec.decoding.drafters.sparrow import load_draft_vocab

            load_draft_vocab(self.sparrow, decode.draft_vocab)  # the file exists and reads, before any model loads

    def judge_config(self):
        """The :class:`~vidspec.evaluation.judge.JudgeConfig` of this run (flags, else the environment).

        Raises:
            ConfigError: an invalid base URL (not ``http(s)://host...``), model or timeout.
        """
        from vidspec.evaluation.judge import JudgeConfig

        if not self.judge_timeout_s > 0:
            raise ConfigError(f"--judge-timeout must be > 0 seconds, got {self.judge_timeout_s}")
        try:
            return JudgeConfig.from_env(base_url=self.judge_base_url, model=self.judge_model,
                                        timeout_s=float(self.judge_timeout_s))
        except ValueError as e:
            raise ConfigError(f"--judge-base-url / --judge-model: {e}") from None

    @classmethod
    def from_flags(cls, **options: Any) -> EvalConfig:
        """An EvalConfig from flat options: the :class:`DecodeConfig` fields among them go to ``decode``.

        A ``decode`` given too (a dict or a DecodeConfig, e.g. from :meth:`to_dict`) is the base the flat
        decode fields replace, so ``EvalConfig.from_flags(**{**cfg.to_dict(), "lam": 0.5})`` changes one knob.
        """
        base = options.pop("decode", None) or {}
        base = base.to_dict() if isinstance(base, DecodeConfig) else dict(base)
        flat = {k: options.pop(k) for k in list(options) if k in DecodeConfig.field_names()}
        return cls(**options, decode=DecodeConfig(**{**base, **flat}))

    def to_dict(self) -> dict[str, Any]:
        """The config as written to ``config.json``: flat run fields, the decode fields under ``decode``."""
        d = dataclasses.asdict(self)
        d["methods"] = list(self.methods)
        return d

    def flat(self) -> dict[str, Any]:
        """:meth:`to_dict` with the decode fields at the top level (how resumption compares configs)."""
        return _flatten(self.to_dict())


def parse_shard(shard: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``; a ConfigError otherwise."""
    try:
        i, n = (int(x) for x in str(shard).split("/"))
    except ValueError:
        raise ConfigError(f"--shard must be i/n (e.g. 0/8), got {shard!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {shard}: needs 0 <= i < n (parts are numbered from 0)")
    return i, n


def shard_samples(samples: list[Sample], shard: str | None) -> list[Sample]:
    """Part ``i`` of ``n`` of ``samples`` (``shard = "i/n"``): the samples whose id hashes to ``i`` mod ``n``.

    The part of a sample depends on its id alone (SHA-256), not on order or on the other samples: the
    parts are disjoint, together they are all samples, and a rerun (resumed, or with more samples)
    puts every sample in the same part. ``--limit`` cuts the benchmark before it is split, so the
    parts of a limited run are the parts of the same first N samples.
    """
    if shard is None:
        return samples
    i, n = parse_shard(shard)
    return [s for s in samples if int(hashlib.sha256(s.sample_id.encode()).hexdigest()[:16], 16) % n == i]


def _flatten(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k != "decode"}
    out.update(d.get("decode") or {})
    return out


@dataclass
class EvalModels:
    """Models loaded once for a run and shared by every method's decoder.

    Attributes:
        target: the target adapter.
        draft: the draft VLM adapter, or None when no drafting method needs one.
        sparrow: a loaded ``SparrowDraftModel``, or None.
        notes: what was loaded, for the summary (names, and e.g. "random Sparrow draft").
    """

    target: Any
    draft: Any = None
    sparrow: Any = None
    notes: dict[str, str] = field(default_factory=dict)


def load_models(config: EvalConfig, frames: int) -> EvalModels:
    """Load the target, the draft VLM and the Sparrow draft that ``config.methods`` need."""
    from vidspec.decoding.models import load_target

    common = dict(device=config.device, dtype=config.dtype, max_frames=frames)
    target = load_target(config.target, relevance_layer=config.decode.relevance_layer, **common)
    models = EvalModels(target=target, notes={"target": config.target})
    drafters = {get_method(m).drafter for m in config.methods}
    if "vlm" in drafters:
        name = config.draft or default_draft(getattr(target, "name", config.target))
        if name is None:
            raise ConfigError(f"methods {', '.join(config.methods[1:])} need --draft (a smaller model of the "
                              f"same family as {config.target})")
        models.draft = load_target(name, **common)
        models.notes["draft"] = name
    if "sparrow" in drafters:
        from vidspec.decoding.drafters.sparrow import SparrowDraftModel, new_sparrow_for

        if config.sparrow == RANDOM_SPARROW:
            models.sparrow = new_sparrow_for(target, seed=0)
            models.notes["sparrow"] = "random-weight Sparrow draft (seed 0), built in process"
        else:
            models.sparrow = SparrowDraftModel.from_pretrained(
                config.sparrow, target=target, allow_target_mismatch=config.allow_target_mismatch)
            models.notes["sparrow"] = str(config.sparrow)
    return models


def fast_options_of(config: EvalConfig) -> dict[str, Any] | None:
    """The FastTarget options of ``config`` (None on the eager engine); the shared target holds the verify
    tree of any tree method in the run."""
    options = config.decode.fast_options()
    if options is not None and any(get_method(m).is_tree for m in config.methods):
        options = tree_fast_options(options, config.decode.tree_total)
    return options


def build_decoders(config: EvalConfig, models: EvalModels) -> dict:
    """One decoder per method, all sharing the loaded models.

    With ``engine="fast"`` each loaded model is wrapped in one FastTarget (one static KV cache and
    one set of CUDA graphs), shared by every method's decoder: the methods run one request at a
    time, and each prefill starts the wrapper's cache afresh. The target and the draft VLM always
    get separate wrappers, even when they are one module.
    """
    target, draft_vlm = models.target, models.draft
    fast_options = fast_options_of(config)
    if fast_options is not None:
        target = as_fast(target, fast_options)  # a FastTarget in ``models`` (shared between runs) is kept
        if draft_vlm is not None:
            if draft_vlm is target:  # one FastTarget cannot be target and draft: wrap its module again
                draft_vlm = draft_vlm.adapter
            draft_vlm = as_fast(draft_vlm, fast_options)  # an eager adapter always gets a new wrapper
    out = {}
    for m in config.methods:
        spec = get_method(m)
        sparrow = spec.drafter == "sparrow"
        decode = config.decode
        if sparrow and config.sparrow_k:
            decode = decode.replace(k=config.sparrow_k)
        if not sparrow:
            decode = decode.replace(draft_vocab=None)
        out[m] = build_decoder(m, target=target, draft=models.sparrow if sparrow else draft_vlm, config=decode,
                               device=config.device, allow_target_mismatch=config.allow_target_mismatch,
                               fast_options=fast_options)
    return out


# ---- provenance ------------------------------------------------------------------------------


def git_info(cwd: str | Path | None = None) -> dict[str, Any]:
    """The checkout's commit and whether it has uncommitted changes (None outside a checkout).

    A commit given in ``VIDSPEC_GIT_SHA`` wins: a machine that receives a copy of the working tree
    (the GPU machine) may carry an older ``.git`` than the code that runs.
    """
    given = os.environ.get("VIDSPEC_GIT_SHA")
    if given:
        return {"sha": given, "dirty": None, "source": "VIDSPEC_GIT_SHA"}

    def run(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    sha = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide the numbers."""
    out = {}
    for dist in ("vidspec-decoding", "vidspec-evaluation", "torch", "transformers", "numpy", "av"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """CPU, GPU, core count and torch build: where the timings were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "cuda": torch.version.cuda,
        "gpu": None,
    }
    try:
        info["transformers"] = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        info["gpu"] = torch.cuda.get_device_name(dev)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["sm_count"] = props.multi_processor_count
    return info


# ---- one decode ------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_sample(decoder, sample: Sample, max_new_tokens: int,
                  shared: tuple[Any, float] | None = None) -> tuple[GenerationResult, float, float]:
    """Read the video and decode one sample; returns (result, video seconds, wall seconds).

    The video is read inside the timed region of every method (ESR includes it), with the device
    synchronised before each clock read; the engine synchronises around prefill and each round.
    ``shared``: the (clip, read seconds) of a read made once for every method of this sample
    (``EvalConfig.share_video``); the decode uses that clip and counts that read as its own.
    """
    clip, video_s = shared if shared is not None else read_clip(decoder, sample)
    t1 = time.perf_counter()
    result = decoder.generate(Request(prompt=sample.prompt, clip=clip), max_new_tokens=max_new_tokens)
    _sync(decoder.target.device)
    t2 = time.perf_counter()
    return result, video_s, video_s + (t2 - t1)


def read_clip(decoder, sample: Sample) -> tuple[Any, float]:
    """Read a sample's video for ``decoder``'s target; returns (clip, seconds), the device synchronised first."""
    _sync(decoder.target.device)
    t0 = time.perf_counter()
    clip = read_sample_video(decoder.target, sample)  # the sample's range (a breakpoint, a segment) if it has one
    return clip, time.perf_counter() - t0


class SharedReads:
    """One read per sample for every method (``EvalConfig.share_video``); off, it reads nothing.

    The runner goes through its work sample by sample, so only the current sample's clip is kept, unless
    ``keep_all``: then every clip stays, so that several runs over the same samples and frames in one process
    (:func:`run_eval`'s ``reads``, e.g. two drafts compared on long videos) read each video once. A clip is
    keyed by its sample and the frames its target reads.
    """

    def __init__(self, enabled: bool, keep_all: bool = False) -> None:
        self.enabled = enabled
        self.keep_all = keep_all
        self._clips: dict[tuple[str, int | None], tuple[Any, float]] = {}

    def get(self, decoder, sample: Sample) -> tuple[Any, float] | None:
        if not self.enabled:
            return None
        target = getattr(decoder.target, "adapter", decoder.target)  # a FastTarget reads through its adapter
        key = (sample.sample_id, getattr(target, "max_frames", None))
        if key not in self._clips:
            if not self.keep_all:
                self._clips.clear()
            self._clips[key] = read_clip(decoder, sample)
        return self._clips[key]


def fidelity(sample: Sample, text: str) -> dict[str, Any]:
    """Offline fidelity fields of one output: MCQ correctness or the SynthVid fact judge."""
    out: dict[str, Any] = dict(score=None, correct=None, choice=None, fact_precision=None, fact_recall=None,
                               fact_hallucinations=None, hallucinated=[])
    if sample.metric == "mcq_accuracy" and sample.extra.get("scoring"):
        from vidspec.evaluation.benchmarks.scoring import score_mcq

        # The benchmark's lmms-eval reading (lmms-eval's own functions where it is installed).
        scored = score_mcq(sample.extra["scoring"], text, sample.answer_letter, len(sample.options), sample.sample_id)
        out.update(choice=scored["choice"], correct=scored["correct"], score=scored["score"], scorer=scored["scorer"])
    elif sample.metric == "mcq_accuracy":
        from vidspec.evaluation.synthvid.mcq import extract_choice

        letters = "ABCDEFGHIJ"[: len(sample.options)] or "ABCD"
        choice = extract_choice(text, letters=letters, options=[f"{c}. {o}" for c, o in zip(letters, sample.options)])
        out.update(choice=choice, correct=choice == sample.answer_letter)
        out["score"] = float(out["correct"])
    elif sample.metric == "synthvid_facts" and "facts" in sample.extra:
        from vidspec.evaluation.synthvid.judge import judge_caption

        j = judge_caption(text, sample.extra["facts"])
        p, r = j.precision, j.recall
        out.update(fact_precision=p, fact_recall=r, fact_hallucinations=len(j.hallucinations),
                   hallucinated=[f"{c.category}: {c.text}" for c in j.hallucinations])
        out["score"] = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return out


def round_timing(result: GenerationResult) -> dict[str, Any]:
    """Where one decode's time went: the drafter's ``prepare`` (in the prefill) and ``begin``, and the mean
    draft / verify ms per round."""
    steps = result.steps
    n = len(steps)
    return dict(begin_s=result.timings.begin_s, draft_prefill_s=result.timings.draft_prefill_s,
                draft_ms_per_round=1000.0 * sum(s.draft_s for s in steps) / n if n else None,
                verify_ms_per_round=1000.0 * sum(s.verify_s for s in steps) / n if n else None)


def adaptation_fields(decoder) -> dict[str, Any]:
    """What the decoder's per-request adaptation did in its last request, for the record (as ``vidspec generate
    --json`` shows it): ``k_history`` (``[tokens emitted, K from then on]`` pairs; for a tree method, its depth)
    and ``drafting_stopped_at`` (tokens emitted when drafting stopped, or None); for a loose method, what its
    request switch did (``loose_stopped_at``, ``loose_rounds``, ``loose_helped_rounds``;
    :class:`~vidspec.decoding.verifiers.switch.LooseSwitch`). Empty when nothing adapted (AR, or the policy off)."""
    adaptation = getattr(decoder, "last_adaptation", None) or {}
    keys = ("k_history", "drafting_stopped_at", "loose_stopped_at", "loose_rounds", "loose_helped_rounds")
    return {k: adaptation[k] for k in keys if k in adaptation}


def make_record(benchmark: str, sample: Sample, method: str, k: int, result: GenerationResult, video_s: float,
                wall_s: float, ar: SampleRecord | None, drafter: str = "") -> SampleRecord:
    """The JSONL record of one decode (speedups against ``ar``, the same sample's AR record).

    ``k``: the most draft tokens a round can accept (a chain's K; a tree method's depth).
    ``drafter``: the drafter's class name (which implementation produced the timings).

    A tree method's ``drafted`` counts tree nodes, and its ``acceptance_by_position`` covers the
    ``k`` positions of a round's accepted path (a tree has more nodes than a path has positions).
    """
    steps = result.steps
    by_position = result.acceptance_by_position()
    if get_method(method).is_tree:
        by_position = by_position[:k]
    rec = SampleRecord(
        schema=SCHEMA_VERSION,
        benchmark=benchmark,
        sample_id=sample.sample_id,
        method=method,
        k=k,
        text=result.text,
        token_ids=list(result.token_ids),
        num_new_tokens=result.num_new_tokens,
        finish_reason=result.finish_reason,
        tau=result.tau,
        target_passes=result.target_passes,
        drafted=sum(s.drafted for s in steps),
        accepted=sum(s.accepted for s in steps),
        acceptance_by_position=by_position,
        loose_accepted=result.loose_accepted,
        shift_accepted=result.shift_accepted,
        video_s=video_s,
        prefill_s=result.timings.prefill_s,
        decode_s=result.timings.decode_s,
        wall_s=wall_s,
        dsr=1.0,
        esr=1.0,
        token_identical_to_ar=True,
        metric=sample.metric,
        **fidelity(sample, result.text),
        **round_timing(result),
        drafter=drafter,
        rounds=[[s.drafted, s.accepted, s.emitted] for s in steps],
    )
    if sample.extra.get("categories"):
        rec["categories"] = dict(sample.extra["categories"])
    if ar is not None and method != "ar":
        rec["dsr"], rec["esr"] = speedups(rec, ar)
        rec["token_identical_to_ar"] = rec["token_ids"] == ar["token_ids"]
    return rec


def capture_fast_graphs(decoder, max_new_tokens: int) -> int:
    """Fast engine: capture every CUDA graph a method's timed decodes can need, around the cache lengths its
    last decode reached (+ the token budget). The decoders' own warm-up does this for the runner
    (``decoder.warmup(..., request_tokens=...)``, :func:`vidspec.decoding.loops.warm.capture_graphs_around`,
    which documents the plan); kept for callers that decode first and capture after.

    Returns:
        The number of graphs captured.
    """
    return capture_graphs_around(decoder, max_new_tokens)


# ---- the run ---------------------------------------------------------------------------------


def _check_resume(out: Path, config: EvalConfig) -> None:
    path = out / "config.json"
    if not path.exists():
        return
    old = {**ADDED_DEFAULTS, **_flatten(json.loads(path.read_text()))}
    new = config.flat()
    diff = sorted(k for k in set(old) | set(new) if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k))
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:4])
        raise ConfigError(f"{out} holds a run with another config ({shown}); use a new --out to compare those")


def _lock(out: Path):
    fh = open(out / ".lock", "w")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise ConfigError(f"{out} is in use by another vidspec eval") from None
    return fh


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="decode", disable=not enabled, dynamic_ncols=True, leave=False)


def run_eval(config: EvalConfig, models: EvalModels | None = None, samples: list[Sample] | None = None,
             reads: SharedReads | None = None) -> RunSummary:
    """Run (or resume) an evaluation and write its summary.

    Args:
        config: what to run.
        models: already loaded models (default: loaded from ``config``).
        samples: the samples (default: loaded from the benchmark in ``config``).
        reads: a clip cache shared with other runs of this process (``SharedReads(True, keep_all=True)``;
            needs ``config.share_video``); default: this run's own.

    Returns:
        The summary, also written to ``OUT/summary.json``.
    """
    out = Path(config.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # --out names a file, or a folder that cannot be created
        raise ConfigError(f"--out {out}: cannot create the run folder ({e.strerror or e})") from None
    lock = _lock(out)
    try:
        return _run(config, out, models, samples, reads)
    finally:
        lock.close()


def _run(config: EvalConfig, out: Path, models: EvalModels | None, samples: list[Sample] | None,
         shared_reads: SharedReads | None) -> RunSummary:
    task = get_task(config.benchmark)
    max_new = config.max_new_tokens or task.max_new_tokens
    frames = config.frames or task.frames
    _check_resume(out, config)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    if samples is None:
        samples = load_benchmark(config.benchmark, config.data, config.split, config.limit, video_dir=config.video_dir)
    elif config.limit is not None:
        samples = samples[: config.limit]
    samples = shard_samples(samples, config.shard)

    records = JsonlLog(out / "records.jsonl")
    todo = [(s, m) for s in samples for m in config.methods if (s.sample_id, m) not in records]
    notes: dict[str, str] = {}
    try:
        if todo:
            t0 = time.perf_counter()
            models = models or load_models(config, frames)
            notes = models.notes
            # Control tokens in a question would be read as chat markup: refuse the run before any decode.
            check_prompts(models.target, [(s.sample_id, s.prompt) for s, _ in todo], f"{task.name} sample")
            decoders = build_decoders(config, models)
            load_s = time.perf_counter() - t0
            warmup_s = dict.fromkeys(config.methods, 0.0)
            log.info("%s: models loaded and decoders built in %.1f s", out.name, load_s)
            if shared_reads is not None and not config.share_video:
                raise ConfigError("a clip cache shared between runs needs share_video (each record counts its read)")
            reads = shared_reads if shared_reads is not None else SharedReads(config.share_video)
            if config.warmup:
                # Untimed: the first decode of each method pays one-off costs (compilation, graph capture,
                # allocator growth, kernel autotuning, lazy imports) that are not what a user waits for per
                # request. The decoders' own warm-up, as `vidspec generate` and the Python API use it: a short
                # decode of the first sample, then the graphs of requests like it of up to max_new tokens.
                for m in dict.fromkeys(m for _, m in todo):
                    sample = todo[0][0]
                    shared = reads.get(decoders[m], sample)
                    clip = shared[0] if shared is not None else read_clip(decoders[m], sample)[0]
                    w = decoders[m].warmup(request=Request(prompt=sample.prompt, clip=clip),
                                           max_new_tokens=min(8, max_new), request_tokens=max_new)
                    warmup_s[m] = float(w["warmup_s"])
                    detail = w.get("detail") or {}
                    log.info("%s: %s warm-up decode %.1f s, %d graphs captured in %.1f s (%.1f s in all)", out.name, m,
                             detail.get("decode_s", 0.0), w["graphs"], detail.get("graphs_s", 0.0), warmup_s[m])
            bar = _progress(len(todo), task.name, config.progress)
            for sample, method in todo:
                bar.set_postfix_str(method)
                dec = decoders[method]
                result, video_s, wall_s = decode_sample(dec, sample, max_new, reads.get(dec, sample))
                ar = records.get(sample.sample_id, "ar")
                rec = make_record(task.name, sample, method, dec.k, result, video_s, wall_s, ar,
                                  drafter=type(dec.drafter).__name__)
                # One-time costs of this process, apart from the request's own times.
                rec["load_s"], rec["warmup_s"] = load_s, warmup_s[method]
                rec.update(adaptation_fields(dec))
                records.append(rec)
                log.info("%s: %s %s: %d tokens, video %.2f s, decode %.2f s, wall %.2f s", out.name, sample.sample_id,
                         method, result.num_new_tokens, video_s, result.timings.decode_s, wall_s)
                bar.update(1)
            bar.close()
    finally:
        records.close()

    if config.judge:
        judge_run(config, out, samples)
    summary = write_summary(out, config, task.name, notes)
    return summary


def judge_run(config: EvalConfig, out: Path, samples: list[Sample]) -> None:
    """Ask the GPT judge about every open-ended record not judged yet (``judgements.jsonl``).

    Judging happens after decoding so the network never sits between timed decodes; the verdict
    cache (``judge_cache.jsonl``) also keeps a rerun from asking the same question twice.
    """
    from vidspec.evaluation.judge import GPTJudge

    by_id = {s.sample_id: s for s in samples}
    records = [r for r in read_jsonl(out / "records.jsonl") if r["sample_id"] in by_id
               and by_id[r["sample_id"]].metric in ("gpt_judge", "synthvid_facts")]
    jcfg = config.judge_config()
    reask = not config.judge_keep_unparsable
    if reask:
        _drop_unparsable(out / "judgements.jsonl")  # asked again below (the cache's copy is bypassed too)
    with JsonlLog(out / "judgements.jsonl") as log_, GPTJudge(jcfg, cache=out / "judge_cache.jsonl") as judge:
        todo = [r for r in records if (r["sample_id"], r["method"]) not in log_]
        # One request per distinct question (identical outputs, e.g. the strict methods repeating AR,
        # share it), at most judge_workers in flight; each keeps the client's retries and the cache.
        asks: dict[tuple, list[dict]] = {}
        for r in todo:
            s = by_id[r["sample_id"]]
            asks.setdefault((s.sample_id if s.extra.get("judge_protocol") == "vdcscore" else s.question, r["text"],
                             s.reference, s.extra.get("judge_protocol")), []).append(r)
        bar = _progress(len(todo), "judge", config.progress)
        with ThreadPoolExecutor(max_workers=max(1, config.judge_workers)) as pool:
            futures = {pool.submit(_judge_one, judge, by_id[rs[0]["sample_id"]], rs[0]["text"], reask): key
                       for key, rs in asks.items()}
            for fut in as_completed(futures):
                fields = fut.result()  # a JudgeError ends the phase; verdicts logged so far stay
                for r in asks[futures[fut]]:
                    log_.append(JudgementRecord(schema=SCHEMA_VERSION, sample_id=r["sample_id"], method=r["method"],
                                                **fields))
                    bar.update(1)
        bar.close()


def _drop_unparsable(path: Path) -> None:
    """Rewrite a judgements file without its unparsable verdicts (atomically), so a rerun asks about them again."""
    from vidspec.decoding.fsutil import atomic_path

    if not path.exists():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    keep = []
    for line in lines:
        try:
            unparsable = json.loads(line).get("judge_status") == "unparsable"
        except (ValueError, AttributeError):
            unparsable = False  # a torn last line: JsonlLog drops it as before
        if not unparsable:
            keep.append(line)
    if len(keep) == len(lines):
        return
    log.info("%s: asking the judge again about %d unparsable verdict(s)", path, len(lines) - len(keep))
    with atomic_path(path) as tmp:
        tmp.write_bytes(b"".join(keep))


def _judge_one(judge, sample: Sample, text: str, reask_unparsable: bool = False) -> dict[str, Any]:
    """The judgement fields of one output: one verdict, or VDCscore's question answering for a VDC sample."""
    protocol = sample.extra.get("judge_protocol")
    if protocol == "vdcscore":
        from vidspec.evaluation.judge.vdc import vdc_score

        v = vdc_score(judge, text, sample.extra.get("qa_list") or [])
        return dict(judge_score=v.score, judge_status="ok" if not v.unparsable else "unparsable",
                    judge_model=v.model, judge_reply=f"{v.n_pairs} pairs, {v.unparsable} unreadable",
                    judge_protocol="vdcscore", judge_prompt_version=v.prompt_version, judge_correct=None,
                    judge_acc=v.accuracy)
    v = judge.judge(sample.question, answer=text, reference=sample.reference, protocol=protocol,
                    reask_unparsable=reask_unparsable)
    return dict(judge_score=v.score, judge_status=v.status, judge_model=v.model, judge_reply=v.reply[:300],
                judge_protocol=v.protocol, judge_prompt_version=v.prompt_version, judge_correct=v.correct)


def write_summary(out: Path, config: EvalConfig, benchmark: str, notes: dict[str, str] | None = None) -> RunSummary:
    """Aggregate ``OUT/records.jsonl`` (and judgements) into ``OUT/summary.json``."""
    records = read_jsonl(out / "records.jsonl")
    judgements = read_jsonl(out / "judgements.jsonl")
    old = {}
    if (out / "summary.json").exists():
        old = json.loads((out / "summary.json").read_text())
    summary = RunSummary(
        schema=SCHEMA_VERSION,
        conventions=CONVENTIONS,
        benchmark=benchmark,
        config={**config.to_dict(), "models": notes or old.get("config", {}).get("models", {})},
        git=git_info(),
        versions=package_versions(),
        machine=machine_info(config.device),
        n_samples=len({r["sample_id"] for r in records}),
        methods=summarize(records, [m for m in METHODS if any(r["method"] == m for r in records)], judgements),
    )
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, out / "summary.json")
    return summary
