"""Write a SynthVid dataset: videos, captions, questions, facts and the tokenizer, on disk.

Layout of ``DIR`` (all video paths in the tables are relative to ``DIR``)::

    DIR/synthvid.json               manifest: format marker, resolved config, counts
    DIR/dataset_dict.json, train/, validation/, test/
                                    captions (VideoDetailCaption schema + facts, style, labels)
    DIR/mcq/                        multiple choice (Video-MME schema), same splits
    DIR/openqa/                     open questions with short answers, same splits
    DIR/videos/<split>/<videoID>.mp4
    DIR/tokenizer/                  the SynthVid tokenizer (PreTrainedTokenizerFast)

``datasets.load_from_disk(DIR)`` gives the captions, ``load_from_disk(DIR / "mcq")`` the
multiple-choice questions. Each video is its own scene and belongs to exactly one split, a
function of (seed, index) alone (:func:`split_of`): a dataset grown from N to M videos keeps the
first N videos in the splits they had.

Video i is generated from ``SeedSequence([seed, i])`` alone, so the output does not depend on the
number of workers, and the same seed gives the same text and the same mp4 bytes. Generation
goes to a temporary folder beside ``DIR`` that is renamed at the end: an interrupted run leaves no
folder that looks like a finished dataset.

Usage::

    path = generate_synthvid("data/cache/synthvid", SynthVidConfig(num_videos=100, seed=0))
    captions = datasets.load_from_disk(path)
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fsutil import replace_dir
from vidspec.evaluation.synthvid import grammar, questions
from vidspec.evaluation.synthvid.render import encode_mp4, render_video
from vidspec.evaluation.synthvid.world import PRESETS, WORLD_VERSION, WorldConfig, preset, sample_scene

FORMAT = "synthvid"
FORMAT_VERSION = 1
MANIFEST = "synthvid.json"
SPLIT_NAMES = ("train", "validation", "test")


@dataclass(frozen=True)
class SynthVidConfig:
    """What ``vidspec data synthvid`` generates.

    Attributes:
        num_videos: number of videos (scenes) over all splits.
        seed: seed of the whole dataset; the same seed gives identical output.
        preset: difficulty preset of the world (easy, default, hard, long).
        frames: frames per video; overrides the preset.
        size: frame size as WIDTHxHEIGHT (even numbers), e.g. 96x96; overrides the preset.
        fps: frame rate of the videos; overrides the preset.
        max_objects: most objects per scene (1-5); overrides the preset.
        distractors: background clutter specks per video; overrides the preset.
        split: share of videos per split, e.g. "train=0.8,validation=0.1,test=0.1", or one split
            name ("test") to put every video in that split. A video's split depends on the seed,
            its index and the shares, never on num_videos; shares hold to within about 3 videos.
        styles: caption style or mixture, e.g. "uniform" or "alpha:1,beta:1" (one style drawn per
            caption).
        captions_per_video: caption rows per video (each with its own wording).
        mcq_per_video: multiple-choice questions per video (at most one per question type).
        open_per_video: open questions per video (at most one per question type).
        workers: worker processes that render and encode videos.
    """

    num_videos: int
    seed: int = 0
    preset: str = "default"
    frames: int | None = None
    size: str | None = None
    fps: float | None = None
    max_objects: int | None = None
    distractors: int | None = None
    split: str = "train=0.8,validation=0.1,test=0.1"
    styles: str = "uniform"
    captions_per_video: int = 1
    mcq_per_video: int = 3
    open_per_video: int = 3
    workers: int = 1

    def __post_init__(self) -> None:
        if self.num_videos < 1:
            raise ConfigError(f"num_videos must be positive, got {self.num_videos}")
        if self.captions_per_video < 1:
            raise ConfigError(f"captions_per_video must be positive, got {self.captions_per_video}")
        for name in ("mcq_per_video", "open_per_video"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.workers < 1:
            raise ConfigError(f"workers must be positive, got {self.workers}")
        if self.frames is not None and self.frames < 1:
            raise ConfigError(f"frames must be positive, got {self.frames}")
        if self.fps is not None and not self.fps > 0:
            raise ConfigError(f"fps must be positive, got {self.fps}")
        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; choose from {sorted(PRESETS)}")
        self.split_shares()
        grammar.parse_style_mixture(self.styles)
        self.world()  # validates frames/size/objects against the preset

    def frame_size(self) -> tuple[int, int] | None:
        """(width, height) from ``size``, or None."""
        if self.size is None:
            return None
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(self.size))
        if not m:
            raise ConfigError(f"size must look like 96x96 (WIDTHxHEIGHT), got {self.size!r}")
        return int(m.group(1)), int(m.group(2))

    def world(self) -> WorldConfig:
        """The resolved world configuration (preset plus overrides)."""
        over: dict = {}
        if self.frames is not None:
            over["num_frames"] = self.frames
        if (wh := self.frame_size()) is not None:
            over["width"], over["height"] = wh
        if self.fps is not None:
            over["fps"] = self.fps
        if self.max_objects is not None:
            over["max_objects"] = self.max_objects
            over["min_objects"] = min(PRESETS[self.preset].min_objects, self.max_objects)
        if self.distractors is not None:
            over["distractors"] = self.distractors
        return preset(self.preset, **over)

    def split_shares(self) -> dict[str, float]:
        """Share of videos per split name (sums to 1)."""
        spec = self.split.strip()
        if spec in SPLIT_NAMES:
            return {spec: 1.0}
        shares: dict[str, float] = {}
        for part in spec.split(","):
            name, eq, value = part.partition("=")
            name = name.strip()
            if name not in SPLIT_NAMES or not eq:
                raise ConfigError(f"bad split {part!r} in {self.split!r}; use e.g. train=0.8,validation=0.1,test=0.1")
            try:
                shares[name] = float(value)
            except ValueError:
                raise ConfigError(f"bad split share {part!r}") from None
            if shares[name] < 0:
                raise ConfigError(f"split shares must be >= 0, got {part!r}")
        total = sum(shares.values())
        if not total > 0:
            raise ConfigError(f"split shares must sum to a positive number, got {self.split!r}")
        return {k: v / total for k, v in shares.items()}


#: How videos are assigned to splits; recorded in the manifest (datasets without it used the
#: earlier rule, a seeded permutation of all N indices, under which a video's split depended on N).
SPLIT_RULE = "golden-ratio-v1"
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio (odd): the Fibonacci hashing multiplier
_ONE = 1 << 64


def _split_point(seed: int, index: int) -> int:
    """Video ``index``'s point in [0, 2**64): a seeded offset plus index times 2**64 / golden ratio.

    A function of (seed, index) alone, so growing a dataset never moves a video to another split.
    The points of indices 0..N-1 are spread evenly (a golden-ratio sequence), so every split gets
    its share of any N to within about 3 videos, much closer than independent random draws.
    """
    offset = int.from_bytes(hashlib.sha256(f"synthvid-split:{seed}".encode()).digest()[:8], "little")
    return (offset + index * _GOLDEN) % _ONE


def split_of(seed: int, index: int, shares: dict[str, float]) -> str:
    """The split of video ``index`` (depends on seed, index and the shares, never on N)."""
    names = [n for n in SPLIT_NAMES if shares.get(n, 0) > 0]
    if not names:
        raise ConfigError(f"no split has a positive share: {shares}")
    point, edge = _split_point(seed, index), 0.0
    for name in names[:-1]:
        edge += shares[name]
        if point < int(edge * _ONE):
            return name
    return names[-1]


def assign_splits(num_videos: int, shares: dict[str, float], seed: int) -> dict[str, list[int]]:
    """Disjoint sets of video indices per split (every share's name present, possibly empty).

    Video i's split is :func:`split_of` ``(seed, i, shares)``: adding videos never moves one to
    another split. Shares are met to within about 3 videos at any N (not exactly).
    """
    out: dict[str, list[int]] = {n: [] for n in shares}
    for i in range(num_videos):
        out[split_of(seed, i, shares)].append(i)
    return out


def _video_id(seed: int, index: int) -> str:
    return f"sv{seed}-{index:06d}"


def _make_video(task: tuple[SynthVidConfig, WorldConfig, int, str, str]) -> dict:
    """Render, encode and describe video ``index``; runs in a worker process."""
    cfg, world, index, split, root = task
    scene_ss, text_ss = np.random.SeedSequence([cfg.seed, index]).spawn(2)
    scene = sample_scene(np.random.default_rng(scene_ss), world)
    facts = scene.facts()
    vid = _video_id(cfg.seed, index)
    rel = f"videos/{split}/{vid}.mp4"
    encode_mp4(render_video(scene), Path(root) / rel, world.fps, world.crf)
    facts_json = json.dumps(facts, sort_keys=True)
    scene_id = hashlib.sha1(facts_json.encode()).hexdigest()[:16]
    rng = np.random.default_rng(text_ss)
    mixture = grammar.parse_style_mixture(cfg.styles)
    common = {"video": rel, "videoID": vid, "scene_id": scene_id, "facts": facts_json}
    captions = []
    for _ in range(cfg.captions_per_video):
        style = mixture[int(rng.choice(len(mixture), p=[w for _, w in mixture]))][0]
        cap = grammar.sample_caption(facts, rng, style)
        captions.append({
            **common, "question": grammar.CAPTION_PROMPT, "answer": cap.text, "style": style.name,
            "pieces": list(cap.pieces), "labels": list(cap.labels), "num_frames": world.num_frames,
            "fps": float(world.fps), "width": world.width, "height": world.height,
            "duration": float(facts["duration"]), "preset": cfg.preset,
        })
    mcq = [
        {**common, "question_id": f"{vid}-mcq{k}", **q}
        for k, q in enumerate(questions.make_mcqs(facts, rng, cfg.mcq_per_video))
    ]
    openqa = [
        {**common, "question_id": f"{vid}-open{k}", **q}
        for k, q in enumerate(questions.make_open_questions(facts, rng, cfg.open_per_video))
    ]
    return {"split": split, "index": index, "captions": captions, "mcq": mcq, "openqa": openqa}


def _features():
    from datasets import Features, Sequence, Value

    common = {"video": Value("string"), "videoID": Value("string"), "scene_id": Value("string"), "facts": Value("string")}
    captions = Features({
        **common, "question": Value("string"), "answer": Value("string"), "style": Value("string"),
        "pieces": Sequence(Value("string")), "labels": Sequence(Value("string")), "num_frames": Value("int32"),
        "fps": Value("float32"), "width": Value("int32"), "height": Value("int32"), "duration": Value("float32"),
        "preset": Value("string"),
    })
    mcq = Features({
        **common, "question_id": Value("string"), "task_type": Value("string"), "question": Value("string"),
        "options": Sequence(Value("string")), "answer": Value("string"),
    })
    openqa = Features({
        **common, "question_id": Value("string"), "task_type": Value("string"), "question": Value("string"),
        "answer": Value("string"),
    })
    return {"captions": captions, "mcq": mcq, "openqa": openqa}


def _dataset(rows: list[dict], features, split: str, fingerprint: str):
    import pyarrow as pa
    from datasets import Dataset, DatasetInfo, NamedSplit
    from datasets.table import InMemoryTable

    columns = {name: [r[name] for r in rows] for name in features}
    table = InMemoryTable(pa.Table.from_pydict(columns, schema=features.arrow_schema))
    # An explicit fingerprint (instead of datasets' random one) keeps state.json identical
    # between runs with the same seed.
    info = DatasetInfo(description="SynthVid (vidspec)", features=features)
    return Dataset(table, info=info, split=NamedSplit(split), fingerprint=fingerprint)


def is_synthvid_dataset(path: str | Path) -> bool:
    """True when ``path`` holds a SynthVid manifest."""
    try:
        return json.loads((Path(path) / MANIFEST).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _check_out(out: Path) -> None:
    if out.exists():
        if out.is_dir() and not any(out.iterdir()):
            return
        if not is_synthvid_dataset(out):
            raise ConfigError(f"--out {out} exists and is not a SynthVid dataset; choose a new folder")


def generate_synthvid(out_dir: str | Path, config: SynthVidConfig, progress: bool = True) -> Path:
    """Generate a SynthVid dataset into ``out_dir`` (replacing an earlier SynthVid dataset there).

    Args:
        out_dir: the dataset folder to create.
        config: what to generate.
        progress: show a tqdm progress bar.

    Returns:
        The dataset folder.

    Raises:
        ConfigError: ``out_dir`` exists and is not a SynthVid dataset (an empty folder is fine).
    """
    import datasets
    from datasets import DatasetDict
    from tqdm.auto import tqdm

    from vidspec.evaluation.synthvid.tokenizer import build_tokenizer

    out = Path(out_dir).absolute()
    _check_out(out)
    world = config.world()
    # Only splits that receive videos are written (a split of 0 rows would only mislead loaders).
    splits = {k: v for k, v in assign_splits(config.num_videos, config.split_shares(), config.seed).items() if v}
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:  # a file where a folder should be, no permission, read-only disk
        raise ConfigError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    try:
        for name in splits:
            (tmp / "videos" / name).mkdir(parents=True)
        tasks = sorted(
            ((config, world, i, name, str(tmp)) for name, idx in splits.items() for i in idx), key=lambda t: t[2]
        )
        results: list[dict] = []
        bar = tqdm(total=len(tasks), desc="synthvid", unit="video", disable=not progress)
        if config.workers > 1:
            with ProcessPoolExecutor(config.workers) as pool:
                for r in pool.map(_make_video, tasks, chunksize=max(1, min(16, len(tasks) // (4 * config.workers)))):
                    results.append(r)
                    bar.update()
        else:
            for t in tasks:
                results.append(_make_video(t))
                bar.update()
        bar.close()

        feats = _features()
        key = json.dumps(asdict(config), sort_keys=True)
        tables = {}
        for kind in ("captions", "mcq", "openqa"):
            tables[kind] = DatasetDict({
                name: _dataset(
                    [row for r in results if r["split"] == name for row in r[kind]], feats[kind], name,
                    hashlib.sha1(f"{key}:{kind}:{name}".encode()).hexdigest()[:16],
                )
                for name in splits
            })
        # datasets' own "Saving the dataset" bars would print nine times; one bar is enough.
        bars_were_on = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            tables["captions"].save_to_disk(str(tmp))
            tables["mcq"].save_to_disk(str(tmp / "mcq"))
            tables["openqa"].save_to_disk(str(tmp / "openqa"))
        finally:
            if bars_were_on:
                datasets.enable_progress_bars()
        build_tokenizer().save_pretrained(str(tmp / "tokenizer"))
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "config": asdict(config),
            "world": asdict(world),
            "world_version": WORLD_VERSION,
            "splits": {name: len(idx) for name, idx in splits.items()},
            "split_rule": SPLIT_RULE,
            "rows": {kind: {n: len(d) for n, d in t.items()} for kind, t in tables.items()},
            "command": "vidspec data synthvid",
        }
        # The manifest is written last: a folder without it is never taken for a dataset.
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_synthvid(path: str | Path, task: str = "captions"):
    """Load one table of a SynthVid dataset (``captions``, ``mcq`` or ``openqa``) as a DatasetDict.

    Raises:
        ConfigError: ``path`` is not a SynthVid dataset or ``task`` is unknown.
    """
    from datasets import load_from_disk

    if not is_synthvid_dataset(path):
        raise ConfigError(f"{path} is not a SynthVid dataset (no {MANIFEST})")
    if task not in ("captions", "mcq", "openqa"):
        raise ConfigError(f"unknown SynthVid task {task!r}; choose captions, mcq or openqa")
    return load_from_disk(str(Path(path) if task == "captions" else Path(path) / task))

