"""Video + text training data: a LightningDataModule that feeds caption and QA rows to a Video-LLM.

It reads a dataset saved with ``datasets`` (``load_from_disk``): SynthVid, or any dataset whose rows
have ``video`` (a path, relative to the dataset folder or absolute), ``question`` and ``answer``.
Rows that also have ``options`` (Video-MME style multiple choice, e.g. SynthVid's ``mcq`` table)
become a prompt with one option per line and the instruction to answer with the letter; their
answer is the letter. Several tables (sub-folders) can be mixed, e.g. SynthVid's captions, ``mcq``
and ``openqa``.

Inputs are built by the decoding adapter of the model's family (``build_prompt``: the chat prompt
with video placeholders expanded, and the family's pixel tensors), from frames read with the
adapter's own frame budget, so a trained model sees at decode time exactly what it saw in
training. Videos are decoded (decord, PyAV fallback) inside the DataLoader's worker processes.

Batch contract
==============

Every batch is a ``dict`` (the Sparrow distillation module consumes the same batches; keep it)::

    input_ids        (B, L) int64   prompt + answer + eos, right-padded with the tokenizer's pad id
    attention_mask   (B, L) int64   1 on real tokens, 0 on padding
    labels           (B, L) int64   = input_ids on answer tokens (and the closing eos), -100
                                    elsewhere; unshifted: the logits at t-1 predict labels[t]
    answer_mask      (B, L) bool    labels != -100
    family           str            "qwen2.5-vl" or "llava-ov"
    kinds            list[str]      per row: a multiple-choice row's question type ("colour", ...;
                                    "mcq" when its table has no ``task_type``), "" otherwise

plus the family's vision tensors (float32 on CPU; the model casts them):

    Qwen2.5-VL   pixel_values_videos  (sum_b patches_b, 3 * 2 * 14 * 14) float32, videos concatenated
                 video_grid_thw       (B, 3) int64   (t, h, w) patch grid of each video
                 second_per_grid_ts   (B,) float32   seconds per temporal patch
                 mm_token_type_ids    (B, L) int32   0 text, 2 video placeholder (M-RoPE needs it)
    LLaVA-OV     pixel_values_videos  (B, T, 3, H, W) float32 (every video must have T frames)
                 frame_repeat         int            each frame comes this many times in a row (``frame_repeat``'s
                                                     factor for the batch; 1 without): the modules run the vision
                                                     tower once per distinct frame (``sft.llava_video_kwargs``)
                 position_ids         (B, L) int64   only with ``position_stretch`` (1-D RoPE positions)

Length augmentation (training only by default)
==============================================

``frame_repeat`` repeats each clip's frames by a factor drawn per batch (LLaVA-OV batches need equal
frame counts) from the list, so a model trained on 8-frame clips also reads the same 8 frames spread
over 16..64+ frame slots, as a long video read at a large frame budget looks. ``position_stretch``
(LLaVA-OV only) spaces the frames' 1-D RoPE positions by a factor drawn per example: frame t starts
at ``t * s * tokens_per_frame`` after the first, so a short video spans the relative distances of an
``s`` times longer one (RoPE sees only relative positions, so a constant offset would change
nothing). Both draws depend only on (seed, epoch, dataset index), so a resumed run sees the same
augmentation.

With a fixed batch size, a batch at a large factor holds ``batch_size * max_frames * r`` frames (16 x
1536 at r = 192 and 8-frame clips), far more memory and time than a batch at r = 1. ``frame_budget``
caps the frames of a batch instead: a batch at factor r holds ``max(1, min(batch_size, frame_budget //
(max_frames * r)))`` clips, so batches at large factors hold few clips and those at r = 1 are full.
The factors are then not drawn per batch but taken in turn from ``frame_repeat`` (every factor gets an
equal share of an epoch's batches; repeat a factor in the list to weight it), and the order of the
batches is shuffled per epoch from (seed, epoch). So every epoch and every rank has the same number of
batches, as it must: Lightning reads the length once, and DDP ranks must step together. A resumed run
skips the batches it has done and sees the same remaining ones. Validation keeps its fixed batch size
(``augment_val`` ignores the budget).

Example transforms (training only)
==================================

``transforms`` takes augmentations that implement :class:`~vidspec.draft_training.transforms.ExampleTransform`:
each annotates the rows it can change when the tables are read (from whatever columns it needs) and changes
an example's frames and/or answer in the workers, from a generator seeded by (seed, epoch, example index,
transform). This module knows nothing of the datasets they come from; SynthVid's time reversal and time crop are
``vidspec.evaluation.synthvid.augment.ReverseTime`` and ``TimeCrop``, selected in a recipe by class path.

Usage::

    dm = VideoTextDataModule(path="data/cache/synthvid", tables=[".", "mcq"], batch_size=8,
                             caption_styles=["alpha"], num_workers=4)
    dm.attach(module.input_spec())          # or let the Trainer do it: setup() asks the module
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))

The LightningModule provides the preprocessing contract by a method ``input_spec() ->
InputSpec`` (its HF config, tokenizer, frame budget and adapter options).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import Request, VideoClip
from vidspec.draft_training.transforms import Example, ExampleTransform, transform_name

log = logging.getLogger(__name__)

#: Video-MME's instruction after the options (the wording SynthVid's MCQ prompts use too).
MCQ_INSTRUCTION = "Answer with the option's letter from the given choices directly."


@dataclass(frozen=True)
class InputSpec:
    """What fixes a model's inputs: the preprocessing half of a release.

    Attributes:
        hf_config: the transformers config of the model (family and vision geometry).
        tokenizer: its tokenizer.
        max_frames: frames sampled per video.
        adapter_options: options of the decoding adapter (Qwen2.5-VL: ``min_pixels``,
            ``max_pixels``); written to the release's ``vidspec.json``.
    """

    hf_config: Any
    tokenizer: Any
    max_frames: int = 8
    adapter_options: dict[str, Any] = field(default_factory=dict)


class _ConfigOnlyModel:
    """Stands in for the HF model where an adapter only reads its config (preprocessing).

    The adapters take a model because decoding needs one; data workers need only the prompt and
    pixel code, and must never touch the (possibly CUDA) training weights.
    """

    def __init__(self, config, vocab_size: int):
        self.config = config
        self.lm_head = SimpleNamespace(out_features=vocab_size, weight=torch.empty(0))
        cpu = SimpleNamespace(dtype=torch.float32)
        self.model = SimpleNamespace(visual=cpu, vision_tower=cpu)
        self.generation_config = None


def preprocessing_adapter(spec: InputSpec):
    """The decoding adapter of ``spec``'s family around a config-only model (CPU, float32)."""
    from vidspec.decoding.models import FAMILIES

    model_type = spec.hf_config.model_type
    if model_type not in FAMILIES:
        raise ConfigError(f"model type {model_type!r} has no decoding adapter ({sorted(FAMILIES)})")
    cls, _ = FAMILIES[model_type]
    vocab = spec.hf_config.get_text_config().vocab_size
    return cls(_ConfigOnlyModel(spec.hf_config, vocab), spec.tokenizer, "training",
               max_frames=spec.max_frames, **dict(spec.adapter_options))


@dataclass(frozen=True)
class Row:
    """One training example before tokenization: prompt text, answer text, absolute video path, and for a
    multiple-choice row its question type (``task_type``, e.g. "colour"; "mcq" when the table has none;
    empty for captions and open questions).

    ``notes`` holds, per transform of the DataModule (in its order), what that transform's ``annotate``
    returned for this row (None: the transform leaves the row alone).
    """

    prompt: str
    answer: str
    video: str
    kind: str = ""
    notes: tuple[Mapping[str, Any] | None, ...] = ()


#: Columns every table may have that rows are built from (``video``, ``question``, ``answer`` are required).
STANDARD_COLUMNS = ("video", "question", "answer", "options", "style", "task_type")


def rows_from_table(table, video_root: Path, styles: set[str] | None, mcq_instruction: str,
                    transforms: Sequence[ExampleTransform] = ()) -> list[Row]:
    """Turn a ``datasets.Dataset`` into :class:`Row` s (style filter applied to captions); each transform
    annotates each row (:meth:`~vidspec.draft_training.transforms.ExampleTransform.annotate`).

    Raises:
        ConfigError: a required column is missing.
    """
    cols = set(table.column_names)
    missing = {"video", "question", "answer"} - cols
    if missing:
        raise ConfigError(f"dataset table lacks columns {sorted(missing)} (has {sorted(cols)})")
    extra = [c for t in transforms for c in t.columns if c not in STANDARD_COLUMNS]
    wanted = [c for c in dict.fromkeys([*STANDARD_COLUMNS, *extra]) if c in cols]
    rows = []
    for r in table.select_columns(wanted).to_list():
        if styles is not None and r.get("style") is not None and r["style"] not in styles:
            continue
        kind = ""
        if r.get("options"):
            prompt = "\n".join([r["question"], *r["options"], mcq_instruction])
            kind = r.get("task_type") or "mcq"
        else:
            prompt = r["question"]
        video = Path(r["video"])
        notes = tuple(t.annotate(r) for t in transforms)
        rows.append(Row(prompt, str(r["answer"]), str(video if video.is_absolute() else video_root / video), kind,
                        notes))
    return rows


class VideoTextDataset(Dataset):
    """Rows -> tokenized examples with pixels; runs in DataLoader workers.

    Args:
        rows: the examples.
        spec: the model's input spec.
        max_length: most tokens per example (answers are cut to fit; a prompt longer than this
            is an error). None: no limit.
        frame_cache: folder for decoded frames (``.npz`` per video and frame budget); later
            epochs read them instead of decoding the mp4 again. None: always decode.
        position_stretch: LLaVA-OV only: stretch factors of the frames' positions, one drawn per
            example and epoch (see the module doc); None: positions 0..L-1 (no ``position_ids``).
        seed: seed of the ``position_stretch`` draws and of the transforms' generators.
        transforms: example transforms applied in this order (see :mod:`vidspec.draft_training.transforms`);
            ``rows`` must carry their notes (:func:`rows_from_table` with the same transforms).

    Items are indexed by ``i`` or, from :class:`LengthAugmentSampler`, by ``(i, epoch, repeat)``:
    the clip's frames are then repeated ``repeat`` times each.
    """

    def __init__(self, rows: list[Row], spec: InputSpec, max_length: int | None = None,
                 frame_cache: str | None = None, position_stretch: list[int] | None = None, seed: int = 0,
                 transforms: Sequence[ExampleTransform] = ()):
        self.rows = rows
        self.spec = spec
        self.max_length = max_length
        self.frame_cache = Path(frame_cache) if frame_cache else None
        self.position_stretch = list(position_stretch) if position_stretch else None
        self.seed = seed
        self.transforms = tuple(transforms)
        self._adapter = None  # built lazily, once per worker process

    def __len__(self) -> int:
        return len(self.rows)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_adapter"] = None
        return state

    @property
    def adapter(self):
        if self._adapter is None:
            self._adapter = preprocessing_adapter(self.spec)
        return self._adapter

    def _read(self, path: str) -> VideoClip:
        ad = self.adapter
        if self.frame_cache is None:
            return ad.read_video(path)
        st = os.stat(path)
        key = hashlib.sha1(
            f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}:{ad.max_frames}:{ad.max_read_pixels}".encode()
        ).hexdigest()
        file = self.frame_cache / f"{key}.npz"
        if file.is_file():
            z = np.load(file)
            return VideoClip(frames=z["frames"], fps=float(z["fps"]), source=path,
                             timestamps=tuple(z["timestamps"].tolist()), source_num_frames=int(z["n"]),
                             source_fps=float(z["source_fps"]))
        clip = ad.read_video(path)
        self.frame_cache.mkdir(parents=True, exist_ok=True)
        # Written beside and renamed: a worker killed mid-write leaves no half file behind.
        tmp = self.frame_cache / f".{key}.{uuid.uuid4().hex[:8]}.npz"
        np.savez(tmp, frames=clip.frames, fps=clip.fps, timestamps=np.asarray(clip.timestamps, np.float64),
                 n=clip.source_num_frames, source_fps=clip.source_fps)
        os.replace(tmp, file)
        return clip

    def __getitem__(self, key: int | tuple[int, int, int]) -> dict[str, Any]:
        i, epoch, repeat = key if isinstance(key, tuple) else (key, 0, 1)
        row = self.rows[i]
        ad = self.adapter
        tok = self.spec.tokenizer
        clip = self._read(row.video)
        answer_text = row.answer
        if self.transforms:
            example = Example(clip=clip, prompt=row.prompt, answer=row.answer, kind=row.kind)
            for k, (transform, notes) in enumerate(zip(self.transforms, row.notes)):
                if notes is not None:
                    example = transform(replace(example, notes=notes), _rng(self.seed, epoch, i, _TRANSFORM + k))
            clip, answer_text = example.clip, example.answer
        # the clip's frames repeated (the adapter repeats processed frames where that equals processing repeated ones)
        visual = ad.repeated_visual_inputs(clip, repeat) if repeat > 1 else None
        prompt_ids, visual = ad.build_prompt(Request(prompt=row.prompt, clip=clip), visual=visual)
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        answer = tok(answer_text, add_special_tokens=False)["input_ids"] + [eos]
        if self.max_length is not None:
            room = self.max_length - len(prompt_ids)
            if room < 1:
                raise ConfigError(f"prompt of {len(prompt_ids)} tokens exceeds max_length {self.max_length} ({row.video})")
            answer = answer[:room]
        ids = torch.cat([prompt_ids, torch.tensor(answer, dtype=torch.long)])
        labels = torch.full_like(ids, -100)
        labels[len(prompt_ids):] = ids[len(prompt_ids):]
        sample = {"input_ids": ids, "labels": labels, "kind": row.kind}
        if ad.family == "qwen2.5-vl":
            sample["pixel_values_videos"] = visual.tensors["pixel_values_videos"]
            sample["video_grid_thw"] = visual.extra["video_grid_thw"].cpu()
            sample["second_per_grid_ts"] = visual.extra["second_per_grid_ts"].float()
            sample["mm_token_type_ids"] = (ids == ad.video_token_id).to(torch.int32) * 2
        else:
            sample["pixel_values_videos"] = visual.tensors["pixel_values_videos"]
            sample["frame_repeat"] = repeat  # each frame `repeat` times in a row: the tower runs once per distinct frame
            if self.position_stretch:
                stretch = self.position_stretch[int(_rng(self.seed, epoch, i, _STRETCH).integers(
                    len(self.position_stretch)))]
                sample["position_ids"] = stretched_positions(ids, ad.video_token_id, ad.tokens_per_frame,
                                                             clip.num_frames * repeat, stretch)
        return sample


# Streams of the per-sample / per-batch draws (so repeat and stretch draws are independent), and of the
# per-epoch order of frame-budget batches; transform k of the DataModule draws from stream _TRANSFORM + k.
_REPEAT, _STRETCH, _BUDGET_ORDER, _TRANSFORM = 1, 2, 3, 16


def _rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, index, stream])


def stretched_positions(ids: torch.Tensor, video_token_id: int, tokens_per_frame: int, num_frames: int,
                        stretch: int) -> torch.Tensor:
    """1-D positions of a LLaVA-OV example whose frames are ``stretch`` times further apart.

    Tokens advance by one position, except the first token of each frame after the first, which
    jumps ``(stretch - 1) * tokens_per_frame`` further: frames keep their inner layout, and text
    after the video sits as far from the text before it as after a ``stretch`` times longer video.

    Args:
        ids: ``(L,) int64`` token ids of one example.
    Returns:
        ``(L,) int64`` positions; ``stretch == 1`` gives ``0..L-1``.
    """
    inc = torch.ones_like(ids)
    if stretch > 1:
        where = torch.nonzero(ids == video_token_id).flatten()
        starts = where[0] + tokens_per_frame * torch.arange(1, num_frames)
        inc[starts] += (stretch - 1) * tokens_per_frame
    return torch.cumsum(inc, 0) - 1


class Collator:
    """Pads examples into the batch contract of this module's docstring.

    Args:
        pad_id: token id used for padding.
        family: "qwen2.5-vl" or "llava-ov".
        pad_to_multiple_of: round the padded length up (8 helps GPU kernels).
    """

    def __init__(self, pad_id: int, family: str, pad_to_multiple_of: int = 1):
        self.pad_id = pad_id
        self.family = family
        self.multiple = max(1, pad_to_multiple_of)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        n = max(s["input_ids"].shape[0] for s in samples)
        n = -(-n // self.multiple) * self.multiple
        b = len(samples)
        input_ids = torch.full((b, n), self.pad_id, dtype=torch.long)
        attention = torch.zeros((b, n), dtype=torch.long)
        labels = torch.full((b, n), -100, dtype=torch.long)
        for i, s in enumerate(samples):
            k = s["input_ids"].shape[0]
            input_ids[i, :k] = s["input_ids"]
            attention[i, :k] = 1
            labels[i, :k] = s["labels"]
        batch: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "labels": labels,
            "answer_mask": labels != -100,
            "family": self.family,
            "kinds": [s.get("kind", "") for s in samples],  # a multiple-choice row's question type, else ""
        }
        if self.family == "qwen2.5-vl":
            mm = torch.zeros((b, n), dtype=torch.int32)
            for i, s in enumerate(samples):
                mm[i, : s["mm_token_type_ids"].shape[0]] = s["mm_token_type_ids"]
            batch["mm_token_type_ids"] = mm
            batch["pixel_values_videos"] = torch.cat([s["pixel_values_videos"] for s in samples])
            batch["video_grid_thw"] = torch.cat([s["video_grid_thw"] for s in samples])
            batch["second_per_grid_ts"] = torch.cat([s["second_per_grid_ts"] for s in samples])
        else:
            frames = {tuple(s["pixel_values_videos"].shape) for s in samples}
            if len(frames) > 1:
                raise ConfigError(
                    f"LLaVA-OV batches need videos of equal frame counts, got shapes {sorted(frames)}; "
                    "use videos with at least max_frames frames"
                )
            batch["pixel_values_videos"] = torch.cat([s["pixel_values_videos"] for s in samples])
            repeats = {s.get("frame_repeat", 1) for s in samples}
            batch["frame_repeat"] = repeats.pop() if len(repeats) == 1 else 1  # one factor a batch, else none used
            if "position_ids" in samples[0]:
                pos = torch.zeros((b, n), dtype=torch.long)
                for i, s in enumerate(samples):
                    k = s["position_ids"].shape[0]
                    pos[i, :k] = s["position_ids"]
                    pos[i, k:] = s["position_ids"][-1] + 1 + torch.arange(n - k)  # padding (masked anyway)
                batch["position_ids"] = pos
        return batch


class ResumableSampler(DistributedSampler):
    """A DistributedSampler that can start mid-epoch, so a resumed run sees the batches it missed.

    The order of epoch e depends only on (seed, e), as in ``DistributedSampler``; ``skip`` drops the
    first samples of epoch ``epoch`` once, on the next iteration. Being a DistributedSampler, it is
    kept as it is by Lightning (which would otherwise swap in its own sampler under DDP).
    """

    def __init__(self, dataset, *, num_replicas: int, rank: int, shuffle: bool, seed: int,
                 epoch: int = 0, skip: int = 0):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
        self.epoch = epoch
        self._skip = (epoch, skip) if skip else None

    def __iter__(self):
        indices = list(super().__iter__())
        if self._skip is not None:
            epoch, skip = self._skip
            self._skip = None
            if epoch == self.epoch:
                indices = indices[skip:]
        return iter(indices)


class EpochKeySampler(ResumableSampler):
    """A :class:`ResumableSampler` that yields ``(index, epoch, 1)``, so example transforms and ``position_stretch``
    draw afresh each epoch (a plain index would give every epoch the draws of epoch 0)."""

    def __iter__(self):
        epoch = self.epoch
        return ((i, epoch, 1) for i in super().__iter__())


class LengthAugmentSampler(ResumableSampler):
    """A :class:`ResumableSampler` that tags each index with its epoch and a frame-repeat factor.

    It yields ``(index, epoch, repeat)``; ``repeat`` is drawn once per batch (consecutive runs of
    ``batch_size`` indices, aligned to the start of the epoch, as the DataLoader batches them) from
    ``frame_repeat``, seeded by (seed, epoch, the batch's first index): the same on a resumed run,
    whose skip is a whole number of batches.
    """

    def __init__(self, dataset, *, frame_repeat: list[int], batch_size: int, **kw):
        super().__init__(dataset, **kw)
        self.frame_repeat = list(frame_repeat)
        self.batch_size = batch_size

    def __iter__(self):
        skip = self._skip[1] if self._skip is not None and self._skip[0] == self.epoch else 0
        indices = list(super().__iter__())
        if skip % self.batch_size:
            raise ConfigError(f"resume skip {skip} is not a whole number of batches of {self.batch_size}")
        for start in range(0, len(indices), self.batch_size):
            chunk = indices[start:start + self.batch_size]
            r = self.frame_repeat[int(_rng(self.seed, self.epoch, chunk[0], _REPEAT).integers(len(self.frame_repeat)))]
            yield from ((i, self.epoch, r) for i in chunk)


def budget_clips(repeat: int, *, batch_size: int, frame_budget: int, frames_per_clip: int) -> int:
    """Clips in a batch of frame-repeat factor ``repeat`` under ``frame_budget`` (at least 1, at most ``batch_size``)."""
    return max(1, min(batch_size, frame_budget // (frames_per_clip * repeat)))


def frame_budget_batches(n: int, frame_repeat: list[int], *, batch_size: int, frame_budget: int,
                         frames_per_clip: int) -> list[tuple[int, int]]:
    """The ``(repeat, clips)`` batches that hold ``n`` indices under a frame budget, in epoch-unshuffled order.

    Factors are taken from ``frame_repeat`` in turn (each gets an equal share of the batches, give or
    take one), each batch as large as :func:`budget_clips` allows; the last holds what is left. The
    list depends only on its arguments, so every epoch and every rank has the same batches.
    """
    batches, left = [], n
    while left > 0:
        r = frame_repeat[len(batches) % len(frame_repeat)]
        clips = min(left, budget_clips(r, batch_size=batch_size, frame_budget=frame_budget,
                                       frames_per_clip=frames_per_clip))
        batches.append((r, clips))
        left -= clips
    return batches


class FrameBudgetBatchSampler(Sampler[list[tuple[int, int, int]]]):
    """Batches of ``(index, epoch, repeat)`` keys whose size shrinks as their frame-repeat factor grows.

    The batches of an epoch are :func:`frame_budget_batches` of this rank's share of indices, in an
    order shuffled from (seed, epoch) only: every rank has as many batches, with the same factor and
    size at each step (DDP ranks step together), and each rank's indices are used once, in the
    order ``sampler`` gives them. ``len()`` is the same every epoch.

    Args:
        sampler: this rank's indices and the epoch (a :class:`ResumableSampler` without a skip of its
            own; Lightning calls its ``set_epoch``, which this sampler follows).
        frame_repeat: the factors, taken in turn.
        batch_size: most clips per batch.
        frame_budget: most frames per batch (clips x frames per clip x factor); a batch holds at
            least one clip.
        frames_per_clip: frames each clip has before repetition (the model's ``max_frames``).
        skip_batches: batches of epoch ``sampler.epoch`` already trained (a resumed run); dropped
            once, on the next iteration of that epoch.

    Raises:
        ConfigError: ``skip_batches`` is more than the batches of an epoch.
    """

    def __init__(self, sampler: ResumableSampler, *, frame_repeat: list[int], batch_size: int, frame_budget: int,
                 frames_per_clip: int, skip_batches: int = 0):
        self.sampler = sampler
        self.batches = frame_budget_batches(sampler.num_samples, list(frame_repeat), batch_size=batch_size,
                                            frame_budget=frame_budget, frames_per_clip=frames_per_clip)
        if not 0 <= skip_batches <= len(self.batches):
            raise ConfigError(f"resume skip of {skip_batches} batches is outside the {len(self.batches)} batches "
                              "of an epoch")
        self._skip = (sampler.epoch, skip_batches) if skip_batches else None

    def __len__(self) -> int:
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def epoch_batches(self, epoch: int) -> list[tuple[int, int]]:
        """The ``(repeat, clips)`` batches of ``epoch`` in the order they are yielded."""
        order = _rng(self.sampler.seed, epoch, 0, _BUDGET_ORDER).permutation(len(self.batches))
        return [self.batches[k] for k in order]

    def __iter__(self):
        epoch = self.sampler.epoch
        skip = 0
        if self._skip is not None:
            skip_epoch, skip = self._skip
            self._skip = None
            if skip_epoch != epoch:
                skip = 0
        indices = list(self.sampler)
        batches = self.epoch_batches(epoch)
        start = sum(clips for _, clips in batches[:skip])
        for r, clips in batches[skip:]:
            yield [(i, epoch, r) for i in indices[start:start + clips]]
            start += clips


class _BatchSamplerLoader(DataLoader):
    """A DataLoader over a :class:`FrameBudgetBatchSampler` whose ``sampler`` is that batch sampler's own.

    With ``batch_sampler=`` a DataLoader's ``sampler`` is an unused SequentialSampler, and under DDP
    Lightning would rebuild the batch sampler around a DistributedSampler of its own (another order,
    no resume skip); it leaves a loader whose ``sampler`` is a DistributedSampler as it is.
    """

    def __init__(self, dataset, *, batch_sampler: FrameBudgetBatchSampler, **kw):
        super().__init__(dataset, batch_sampler=batch_sampler, **kw)
        # DataLoader refuses to set `sampler` once built; with a batch sampler it reads it nowhere.
        self.__dict__["sampler"] = batch_sampler.sampler


def _factors(key: str, value: list[int] | None) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise ConfigError(f"data.{key} must be a non-empty list of integers >= 1 (e.g. [1, 2, 4, 8]), got {value!r}")
    return [int(v) for v in value]


class VideoTextDataModule(L.LightningDataModule):
    """Caption / QA rows from a dataset on disk, batched for Video-LLM training (see module doc).

    Args:
        path: dataset folder written by ``datasets`` ``save_to_disk`` (a DatasetDict with splits),
            e.g. a SynthVid folder.
        tables: sub-folders of ``path`` holding more tables to mix in ("." is ``path`` itself);
            SynthVid: "." (captions), "mcq", "openqa".
        train_split: split used for training.
        val_split: split used for validation (None: no validation).
        caption_styles: keep only caption rows whose ``style`` column is one of these (rows without
            a style, such as questions, are always kept); None keeps every style. Lets a draft
            train on other wording than its target.
        batch_size: examples per batch and device.
        val_batch_size: examples per validation batch (default: batch_size).
        num_workers: DataLoader worker processes that decode videos (0: in the main process).
        max_train_samples: use only the first N training rows (after filtering); None: all.
        max_val_samples: use only the first N validation rows, taken from the tables in turn (one row of
            each table, then the next of each), so every table is in them; None: all.
        shuffle: shuffle training rows each epoch (order fixed by seed and epoch).
        seed: seed of the shuffling order.
        max_length: most tokens per example (answers are truncated to fit).
        pad_to_multiple_of: round padded batch lengths up to a multiple of this.
        frame_cache: folder to cache decoded frames in (fast later epochs); None: decode each time.
        video_root: folder video paths are relative to (default: ``path``).
        mcq_instruction: instruction after the options of multiple-choice rows.
        frame_repeat: length augmentation: repeat each training batch's frames by a factor drawn
            from this list (e.g. ``[1, 2, 4, 8]``: 8-frame clips fill 8..64 frame slots; see the
            module doc); None: off.
        frame_budget: with ``frame_repeat``: the most frames a training batch may hold (clips x
            ``max_frames`` x factor). A batch at factor r then holds ``max(1, min(batch_size,
            frame_budget // (max_frames * r)))`` clips, so large factors fit in memory and small ones
            fill the batch; factors are taken in turn rather than drawn (see the module doc). E.g.
            ``batch_size=16, max_frames=8, frame_budget=128``: 16 clips at r = 1, 1 clip at r >= 16.
            None: every batch holds ``batch_size`` clips. Validation ignores it.
        position_stretch: LLaVA-OV only: space each training example's frames ``s`` times further
            apart in RoPE positions, ``s`` drawn from this list per example (e.g. ``[1, 2, 4]``);
            None: off.
        transforms: example transforms (augmentations) applied in this order to training examples, e.g.
            SynthVid's time reversal and time crop (``vidspec.evaluation.synthvid.augment``), selected in a
            recipe by ``class_path``; their draws are seeded per (seed, epoch, example, transform), so a
            resumed run sees the same examples. Validation is never transformed. None: off.
        augment_val: apply ``frame_repeat`` and ``position_stretch`` to validation batches too
            (validation draws use epoch 0, so every validation pass sees the same batches); the
            batches keep ``val_batch_size`` clips whatever ``frame_budget`` says.
    """

    def __init__(
        self,
        path: str,
        tables: list[str] | None = None,
        train_split: str = "train",
        val_split: str | None = "validation",
        caption_styles: list[str] | None = None,
        batch_size: int = 8,
        val_batch_size: int | None = None,
        num_workers: int = 0,
        max_train_samples: int | None = None,
        max_val_samples: int | None = 64,
        shuffle: bool = True,
        seed: int = 0,
        max_length: int | None = None,
        pad_to_multiple_of: int = 1,
        frame_cache: str | None = None,
        video_root: str | None = None,
        mcq_instruction: str = MCQ_INSTRUCTION,
        frame_repeat: list[int] | None = None,
        frame_budget: int | None = None,
        position_stretch: list[int] | None = None,
        transforms: list[ExampleTransform] | None = None,
        augment_val: bool = False,
    ):
        super().__init__()
        if batch_size < 1 or num_workers < 0:
            raise ConfigError(f"need batch_size >= 1 and num_workers >= 0, got {batch_size}, {num_workers}")
        for t in transforms or ():
            if not isinstance(t, ExampleTransform):
                raise ConfigError(f"data.transforms: {t!r} is not an example transform (it needs columns, "
                                  "keeps_frame_count, needs, annotate() and __call__(example, rng))")
        frame_repeat = _factors("frame_repeat", frame_repeat)
        position_stretch = _factors("position_stretch", position_stretch)
        if frame_budget is not None:
            if isinstance(frame_budget, bool) or not isinstance(frame_budget, int) or frame_budget < 1:
                raise ConfigError(f"data.frame_budget must be an integer >= 1 (frames per training batch), "
                                  f"got {frame_budget!r}")
            if frame_repeat is None:
                raise ConfigError("data.frame_budget sizes batches by their frame-repeat factor: it needs "
                                  "data.frame_repeat (e.g. [1, 2, 4, 8])")
        self.save_hyperparameters(ignore=["transforms"])
        self.path = Path(path)
        self.tables = list(tables or ["."])
        self.train_split = train_split
        self.val_split = val_split
        self.caption_styles = set(caption_styles) if caption_styles else None
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size or batch_size
        self.num_workers = num_workers
        self.max_train_samples = max_train_samples
        self.max_val_samples = max_val_samples
        self.shuffle = shuffle
        self.seed = seed
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.frame_cache = frame_cache
        self.video_root = Path(video_root) if video_root else self.path
        self.mcq_instruction = mcq_instruction
        self.frame_repeat = frame_repeat
        self.frame_budget = frame_budget
        self.position_stretch = position_stretch
        self.transforms: tuple[ExampleTransform, ...] = tuple(transforms or ())
        self.augment_val = augment_val
        self.spec: InputSpec | None = None
        self.train_set: VideoTextDataset | None = None
        self.val_set: VideoTextDataset | None = None
        self._resume: dict[str, int] | None = None

    # ---- wiring -------------------------------------------------------------------------------
    def attach(self, spec: InputSpec) -> None:
        """Use ``spec`` (the model's input contract) to build examples."""
        self.spec = spec

    def _rows(self, split: str, limit: int | None, interleave: bool = False,
              transforms: Sequence[ExampleTransform] = ()) -> list[Row]:
        """The split's rows of every table, in table order, or with ``interleave`` one of each table in turn
        (so the first ``limit`` rows hold every table: captions and each question type in validation)."""
        from datasets import Dataset, DatasetDict, load_from_disk

        if not self.path.is_dir():
            raise ConfigError(f"dataset folder not found: {self.path}")
        per_table: list[list[Row]] = []
        for name in self.tables:
            folder = self.path / name
            try:
                data = load_from_disk(str(folder))
            except FileNotFoundError as e:
                raise ConfigError(f"cannot load dataset table {folder}: {e}") from None
            if isinstance(data, DatasetDict):
                if split not in data:
                    raise ConfigError(f"{folder} has no split {split!r} (has {list(data)})")
                table = data[split]
            elif isinstance(data, Dataset):
                table = data
            else:
                raise ConfigError(f"{folder} is not a datasets Dataset or DatasetDict")
            per_table.append(rows_from_table(table, self.video_root, self.caption_styles, self.mcq_instruction,
                                             transforms))
        if interleave:
            rows = [r for group in itertools.zip_longest(*per_table) for r in group if r is not None]
        else:
            rows = [r for table_rows in per_table for r in table_rows]
        if self.caption_styles is not None and not rows:
            raise ConfigError(f"no rows of styles {sorted(self.caption_styles)} in split {split!r} of {self.path}")
        if not rows:
            raise ConfigError(f"split {split!r} of {self.path} has no rows")
        return rows[:limit] if limit is not None else rows

    def setup(self, stage: str | None = None) -> None:
        if self.spec is None:
            module = self.trainer.lightning_module if self.trainer is not None else None
            if module is None or not hasattr(module, "input_spec"):
                raise ConfigError("VideoTextDataModule needs an input spec: call attach() or use a module "
                                  "with an input_spec() method")
            self.spec = module.input_spec()
        for t in self.transforms:
            if not t.keeps_frame_count and self.spec.hf_config.model_type == "llava_onevision":
                raise ConfigError(f"data.transforms: {transform_name(t)} gives clips of different lengths, which "
                                  "Qwen2.5-VL batches take and LLaVA-OV batches (frames stacked per clip) do not")
        if self.position_stretch and self.spec.hf_config.model_type != "llava_onevision":
            raise ConfigError(f"data.position_stretch is for LLaVA-OV's 1-D positions; this model is "
                              f"{self.spec.hf_config.model_type!r} (M-RoPE)")
        if stage in (None, "fit") and self.train_set is None:
            rows = self._rows(self.train_split, self.max_train_samples, transforms=self.transforms)
            for k, t in enumerate(self.transforms):
                if all(r.notes[k] is None for r in rows):
                    raise ConfigError(f"data.transforms: {transform_name(t)} applies to no training row (it needs "
                                      f"{t.needs})")
            self.train_set = VideoTextDataset(rows, self.spec, self.max_length, self.frame_cache,
                                              self.position_stretch, self.seed, self.transforms)
        if stage in (None, "fit", "validate") and self.val_split and self.val_set is None:
            stretch = self.position_stretch if self.augment_val else None
            self.val_set = VideoTextDataset(self._rows(self.val_split, self.max_val_samples, interleave=True), self.spec,
                                            self.max_length, self.frame_cache, stretch, self.seed)

    def collator(self) -> Collator:
        assert self.spec is not None
        tok = self.spec.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.convert_tokens_to_ids("<|im_end|>")
        return Collator(pad, preprocessing_adapter(self.spec).family, self.pad_to_multiple_of)

    def _world(self) -> tuple[int, int]:
        t = self.trainer
        return (t.world_size, t.global_rank) if t is not None else (1, 0)

    # ---- loaders ------------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None, "call setup('fit') first"
        world, rank = self._world()
        per_rank = -(-len(self.train_set) // world)
        budget = None
        if self.frame_budget is not None:
            assert self.spec is not None
            budget = dict(frame_repeat=self.frame_repeat, batch_size=self.batch_size, frame_budget=self.frame_budget,
                          frames_per_clip=self.spec.max_frames)
            batches = len(frame_budget_batches(per_rank, **budget))
        else:
            batches = -(-per_rank // self.batch_size)
        epoch, done = 0, 0
        if self._resume is not None:
            epoch, done = self._resume["epoch"], self._resume["batches"]
            # A checkpoint taken after the epoch's last batch resumes at the next epoch.
            epoch, done = (epoch + 1, 0) if done >= batches else (epoch, done)
            self._resume = None
        kw = dict(num_replicas=world, rank=rank, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        # Persistent workers: respawning them costs seconds per epoch (3-4 s with 12 workers on the
        # H200 machines), which on a small dataset stalled every few steps and cut 2-GPU DDP scaling
        # to 1.43x. The sampler runs in this process, so set_epoch and the resume skip still apply.
        loader_kw = dict(collate_fn=self.collator(), num_workers=self.num_workers,
                         persistent_workers=self.num_workers > 0, pin_memory=torch.cuda.is_available())
        if budget is not None:
            # Its own sequence of batches: the resume skip counts batches, not indices.
            batch_sampler = FrameBudgetBatchSampler(ResumableSampler(self.train_set, **kw), skip_batches=done,
                                                    **budget)
            return _BatchSamplerLoader(self.train_set, batch_sampler=batch_sampler, **loader_kw)
        skip = done * self.batch_size
        if self.frame_repeat:
            sampler = LengthAugmentSampler(self.train_set, frame_repeat=self.frame_repeat,
                                           batch_size=self.batch_size, skip=skip, **kw)
        elif self.transforms or self.position_stretch:  # per-epoch draws need the epoch in the key
            sampler = EpochKeySampler(self.train_set, skip=skip, **kw)
        else:
            sampler = ResumableSampler(self.train_set, skip=skip, **kw)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler, **loader_kw)

    def val_dataloader(self) -> DataLoader | list:
        if self.val_set is None:
            return []
        world, rank = self._world()
        if self.frame_repeat and self.augment_val:
            sampler = LengthAugmentSampler(self.val_set, frame_repeat=self.frame_repeat, batch_size=self.val_batch_size,
                                           num_replicas=world, rank=rank, shuffle=False, seed=self.seed)
        else:
            sampler = DistributedSampler(self.val_set, num_replicas=world, rank=rank, shuffle=False)
        return DataLoader(self.val_set, batch_size=self.val_batch_size, sampler=sampler,
                          collate_fn=self.collator(), num_workers=self.num_workers)

    # ---- exact resume -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """Where training is in the data: the epoch and batches done in it (saved in checkpoints)."""
        t = self.trainer
        if t is None:
            return {}
        return {"epoch": int(t.current_epoch),
                "batches": int(t.fit_loop.epoch_loop.batch_progress.current.processed)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state:
            self._resume = dict(state)
