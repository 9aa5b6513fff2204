"""Supervised fine-tuning of a Hugging Face Video-LLM on caption and QA data (loss on answers only).

``VLMSFTModule`` trains ``Qwen2_5_VLForConditionalGeneration`` or
``LlavaOnevisionForConditionalGeneration``, built from scratch from an :class:`ArchConfig` and a
tokenizer, or loaded from a checkpoint folder in Hugging Face format (``init_from``). It consumes
the batches of :mod:`vidspec.draft_training.data` and logs ``train/loss``, ``train/lr`` and
``train/tokens_per_s`` (every token of the padded batch that is not padding, all ranks) to the
Trainer's logger (TensorBoard in the recipes).

In a recipe (``vidspec train fit --config configs/train/synthvid-target-cpu.yaml``)::

    model:
      class_path: vidspec.draft_training.sft.VLMSFTModule
      init_args:
        tokenizer: data/cache/synthvid/tokenizer
        arch: {family: llava-ov, hidden_size: 128, num_layers: 4}
        max_frames: 8
        optim: {lr: 1.0e-3, warmup_steps: 50}
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.callbacks import StepMetrics
from vidspec.draft_training.data import InputSpec
from vidspec.draft_training.export import export_vlm, register_exporter
from vidspec.draft_training.testbed.arch import ArchConfig, build_hf_config, family_of, hf_model_class

log = logging.getLogger(__name__)

#: Batch keys each family's vision tower reads.
VISION_KEYS = {
    "qwen2.5-vl": ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "mm_token_type_ids"),
    "llava-ov": ("pixel_values_videos",),
}


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup and cosine decay.

    Attributes:
        lr: peak learning rate.
        weight_decay: decoupled weight decay on matrices (not on norms, biases or embeddings).
        betas: Adam betas.
        eps: Adam epsilon.
        warmup_steps: optimizer steps of linear warmup from 0 to ``lr``.
        min_lr_ratio: the cosine ends at ``lr * min_lr_ratio``.
        total_steps: optimizer steps of the schedule; None takes the Trainer's estimate (from
            ``max_steps`` or ``max_epochs``).
    """

    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    total_steps: int | None = None

    def __post_init__(self) -> None:
        if not self.lr > 0 or self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"optim: need lr > 0, warmup_steps >= 0, 0 <= min_lr_ratio <= 1; got {self}")


def causal_padding_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """The attention mask a causal model needs: None for a right-padded batch (every row's ones before its zeros,
    as :class:`~vidspec.draft_training.data.Collator` pads), else ``mask``.

    Under causal attention no position attends to a later one, so with right padding no kept position attends to a
    padding position: the mask changes no kept position's state, and the losses read kept positions only (answer
    tokens here; the Sparrow draft's inputs and targets there). Without it the attention runs as plain causal
    attention, with no (B, 1, L, L) mask to build and read: at ~26k tokens a sample that mask is ~0.7 G entries, and
    it keeps SDPA off its fastest kernels.
    """
    if mask.shape[1] > 1 and not bool((mask[:, 1:] <= mask[:, :-1]).all()):
        return mask
    return None


def llava_video_kwargs(model, pixel_values_videos: torch.Tensor, repeat: int = 1) -> dict[str, Any]:
    """LLaVA-OneVision's video arguments for ``model`` (a ``LlavaOnevisionModel``) when each frame comes ``repeat``
    times in a row (training's length augmentation, ``data.frame_repeat``; the batch's ``frame_repeat``).

    For ``repeat`` 1: ``{"pixel_values_videos": ...}``, as given. Otherwise the vision tower, projector and pooling,
    which work frame by frame, run once on each distinct frame, the features are repeated, and the model gets them
    as ``mm_encoder_outputs`` (transformers' way to pass encoder outputs computed outside): the same features as
    for the repeated frames, and the same gradients (a repeated feature's gradients add up in
    ``repeat_interleave``'s backward, as the copies' do), for ``1 / repeat`` of the tower's work.
    """
    if repeat <= 1:
        return {"pixel_values_videos": pixel_values_videos}
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    b, frames = pixel_values_videos.shape[:2]
    if frames % repeat:
        raise ValueError(f"{frames} frames are not a whole number of {repeat}-frame repeats")
    distinct = frames // repeat
    pooled = model.get_video_features(pixel_values_videos[:, ::repeat], return_dict=True).pooler_output
    video, newline = pooled[:, :-1], pooled[:, -1:]  # the video's features, then its one newline embedding
    per_frame = video.shape[1] // distinct
    video = video.reshape(b, distinct, per_frame, -1).repeat_interleave(repeat, dim=1).reshape(b, frames * per_frame, -1)
    return {"mm_encoder_outputs": {"video": BaseModelOutputWithPooling(pooler_output=torch.cat([video, newline], 1))}}


def vision_kwargs(batch: dict[str, Any], family: str, model, dtype: torch.dtype) -> dict[str, Any]:
    """``model``'s vision arguments from a collated batch (``model``: the family's inner ``...Model``): the family's
    tensors (:data:`VISION_KEYS`), the pixels cast to ``dtype``, and for LLaVA-OV :func:`llava_video_kwargs` (the
    tower once per distinct frame of a frame-repeated batch)."""
    kw = {k: batch[k] for k in VISION_KEYS[family] if k in batch}
    pix = kw.pop("pixel_values_videos", None)
    if pix is not None:
        pix = pix.to(dtype)
        kw.update(llava_video_kwargs(model, pix, batch.get("frame_repeat", 1)) if family == "llava-ov"
                  else {"pixel_values_videos": pix})
    return kw


def adamw_cosine(module, decay: list, no_decay: list) -> dict:
    """``configure_optimizers``' answer for a module with an :class:`OptimConfig` ``optim``: AdamW over ``decay``
    (with weight decay) and ``no_decay`` (without), and :func:`lr_factor`'s schedule stepped every optimizer step.
    The schedule's length is kept as ``module.lr_schedule_steps``, which
    :class:`~vidspec.draft_training.callbacks.ScheduleCheck` reads at the end of a run."""
    o = module.optim
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=o.lr, betas=tuple(o.betas), eps=o.eps)
    total = o.total_steps or int(module.trainer.estimated_stepping_batches)
    if total <= 0 or total > 10**9:
        raise ConfigError("set trainer.max_steps (or optim.total_steps) so the LR schedule has a length")
    module.lr_schedule_steps = total
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, o.warmup_steps, total, o.min_lr_ratio))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def checkpoint_metadata(module: L.LightningModule) -> dict[str, Any]:
    """What a vidspec module adds to its checkpoints (``checkpoint["vidspec"]``), which ``vidspec export`` reads:
    the module's class, the run's configuration (``vidspec_run_config``), the trainer's scalar metrics with the
    global step (none outside a trainer) and the run's ``metrics.jsonl`` (absolute; None without
    :class:`~vidspec.draft_training.callbacks.StepMetrics`), where export finds a validation that ran after this
    checkpoint was written at the same step."""
    cls = type(module)
    metrics = {}
    metrics_file = None
    if module._trainer is not None:
        metrics = {k: float(v) for k, v in module.trainer.callback_metrics.items()
                   if isinstance(v, (int, float, torch.Tensor)) and torch.as_tensor(v).numel() == 1}
        metrics["global_step"] = int(module.trainer.global_step)
        paths = [cb.path for cb in module.trainer.callbacks if isinstance(cb, StepMetrics) and cb.path]
        metrics_file = str(paths[0].absolute()) if paths else None
    return {"module": f"{cls.__module__}.{cls.__qualname__}", "run_config": module.vidspec_run_config,
            "metrics": metrics, "metrics_file": metrics_file}


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def drop_nonfinite_gradients(named_parameters) -> str | None:
    """Drop this step's gradients (set them to None, so the optimizer leaves those weights and their
    moments alone) when any of them holds a NaN or an infinity; returns the first such parameter's
    name, or None when every gradient is finite.

    A finite loss can still back-propagate a non-finite gradient, and one such step poisons every
    weight through the clipped update (seen on the H200 in bf16: a Qwen2.5-VL draft VLM's loss was
    0.33 at step 666 and NaN at every step after it). Call it from ``on_before_optimizer_step``: the
    gradients are then complete (accumulated, and under DDP already all-reduced, so every rank takes
    the same decision) and not yet clipped. One device-to-host read per step.
    """
    named = [(n, p) for n, p in named_parameters if p.grad is not None]
    if not named or bool(torch.isfinite(torch.nn.utils.get_total_norm([p.grad for _, p in named]))):
        return None
    first = next((n for n, p in named if not bool(torch.isfinite(p.grad).all())), named[0][0])
    for _, p in named:
        p.grad = None
    return first


def guard_optimizer_step(module: L.LightningModule, named_parameters) -> None:
    """The training modules' ``on_before_optimizer_step``: :func:`drop_nonfinite_gradients` over
    ``named_parameters``, and a dropped step counted in ``module._dropped_nonfinite_grads``, logged as
    ``train/dropped_nonfinite_grads`` and warned about with the first bad parameter's name."""
    bad = drop_nonfinite_gradients(named_parameters)
    if bad is not None:
        module._dropped_nonfinite_grads += 1
        log.warning("step %d: non-finite gradients (first in %s); the step is dropped", module.global_step, bad)
        module.log("train/dropped_nonfinite_grads", float(module._dropped_nonfinite_grads), on_step=True)


def _as(cls, value):
    # load_from_checkpoint passes the saved hyperparameters back as plain dicts.
    if isinstance(value, dict):
        if "betas" in value:
            value = {**value, "betas": tuple(value["betas"])}
        return cls(**value)
    return value


class VLMSFTModule(L.LightningModule):
    """Supervised fine-tuning of a Video-LLM; cross-entropy on answer tokens only.

    Args:
        tokenizer: tokenizer folder (e.g. a SynthVid dataset's ``tokenizer``); default: the one
            in ``init_from``.
        arch: sizes of a model built from scratch (ignored with ``init_from``).
        init_from: a Hugging Face model folder (or a vidspec release) to start from.
        max_frames: frames sampled per video, in training and (via the release) at decode time.
        adapter_options: decoding adapter options, e.g. Qwen2.5-VL's ``{"min_pixels": 3136,
            "max_pixels": 12544}``; default: those in ``init_from``'s vidspec.json, if any.
        optim: optimizer and schedule.
        attn_implementation: transformers attention kernel ("sdpa", "eager", "flash_attention_2").
        gradient_checkpointing: recompute activations in backward (saves memory on deep targets).
        vision_init: a pretrained vision tower (a folder written by
            :func:`vidspec.draft_training.testbed.vision_pretrain.save_tower`: LLaVA-OV's SigLIP tower, or
            Qwen2.5-VL's tower with its merger) copied into the model before training; its family and
            sizes must match ``arch``.
        grouped_vision_attention: Qwen2.5-VL with sdpa: attend all of a vision layer's windows in one
            call per window length instead of transformers' one call per window
            (:mod:`vidspec.draft_training.qwen_vision`; the same outputs and gradients to float rounding).
        batched_positions: Qwen2.5-VL: compute the batch's M-RoPE positions and the tower's window
            indices in batched ops (:func:`vidspec.draft_training.qwen_vision.qwen_forward_kwargs`)
            instead of transformers' per-row loops, which wait on the device once per row; the same
            tensors, so the same loss.
        freeze_vision: keep the vision tower's weights fixed (the projector and the language model
            still train: LLaVA-OV's ``multi_modal_projector``, Qwen2.5-VL's ``visual.merger``), as
            LLaVA-style recipes do with a pretrained encoder. Fine-tuning a
            pretrained SynthVid tower with the caption loss erased its shape features (linear-probe
            shape accuracy 1.00 before SFT, 0.24 after, on CPU; docs/results.md).
    """

    def __init__(
        self,
        tokenizer: str | None = None,
        arch: ArchConfig | None = None,
        init_from: str | None = None,
        max_frames: int = 8,
        adapter_options: dict[str, Any] | None = None,
        optim: OptimConfig | None = None,
        attn_implementation: str = "sdpa",
        gradient_checkpointing: bool = False,
        vision_init: str | None = None,
        freeze_vision: bool = False,
        grouped_vision_attention: bool = True,
        batched_positions: bool = True,
    ):
        super().__init__()
        arch = _as(ArchConfig, arch)
        optim = _as(OptimConfig, optim) or OptimConfig()
        if arch is None and init_from is None:
            raise ConfigError("VLMSFTModule needs arch (a model from scratch) or init_from (a checkpoint folder)")
        if max_frames < 1:
            raise ConfigError(f"max_frames must be positive, got {max_frames}")
        # Plain data only: checkpoints then load with torch.load(weights_only=True).
        self.save_hyperparameters({
            "tokenizer": tokenizer, "arch": asdict(arch) if arch else None, "init_from": init_from,
            "max_frames": max_frames, "adapter_options": adapter_options, "optim": asdict(optim),
            "attn_implementation": attn_implementation, "gradient_checkpointing": gradient_checkpointing,
            "vision_init": vision_init, "freeze_vision": freeze_vision,
            "grouped_vision_attention": grouped_vision_attention, "batched_positions": batched_positions,
        })
        self.optim = optim
        self.max_frames = max_frames
        self.tokenizer = _load_tokenizer(tokenizer or init_from)
        saved = _release_options(init_from) if init_from else {}
        self.adapter_options = dict(adapter_options if adapter_options is not None else saved.get("adapter_options", {}))
        if init_from:
            config = None
            try:
                from transformers import AutoConfig

                config = AutoConfig.from_pretrained(init_from)
                self.model = hf_model_class(family_of(config)).from_pretrained(
                    init_from, dtype=torch.float32, attn_implementation=attn_implementation)
                self.model.train()  # from_pretrained returns eval mode, and Lightning does not change it
            except OSError as e:
                raise ConfigError(f"cannot load init_from={init_from!r}: {str(e).splitlines()[0]}") from None
        else:
            config = build_hf_config(arch, self.tokenizer)
            config._attn_implementation = attn_implementation
            self.model = hf_model_class(arch.family)(config)
        self.family = family_of(self.model.config)
        self.batched_positions = batched_positions
        if grouped_vision_attention and self.family == "qwen2.5-vl":
            from vidspec.draft_training.qwen_vision import use_grouped_vision_attention

            use_grouped_vision_attention(self.model)
        if vision_init:
            from vidspec.draft_training.testbed.vision_pretrain import load_tower_into

            load_tower_into(self.vision_tower, vision_init, asdict(arch) if arch else None)
        if freeze_vision:
            for name, p in self.vision_tower.named_parameters():
                # Qwen2.5-VL's merger is its projector (LLaVA-OV's multi_modal_projector lives outside the
                # tower): it keeps training, as the docstring promises for both families
                if not name.startswith("merger."):
                    p.requires_grad_(False)
        if self.family == "llava-ov":
            # LLaVA-OV reads SigLIP's last hidden state before its final norm, and never its pooling
            # head: those weights get no gradient, which DDP refuses (unused parameters).
            for name, p in self.model.named_parameters():
                if "vision_tower.post_layernorm." in name or "vision_tower.head." in name:
                    p.requires_grad_(False)
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.vidspec_run_config: dict | None = None  # the resolved CLI config, set by `vidspec train`
        self._last_step_t: float | None = None
        self._skipped_nonfinite = 0  # batches whose loss was not finite
        self._dropped_nonfinite_grads = 0  # steps whose gradients were not finite (drop_nonfinite_gradients)
        self._val_letters: dict[str, list[int]] = {}  # this validation's question type -> [right, asked]

    @property
    def vision_tower(self) -> torch.nn.Module:
        """The model's vision tower: LLaVA-OV's SigLIP ``vision_tower``, Qwen2.5-VL's ``visual`` (with its merger)."""
        return self.model.model.visual if self.family == "qwen2.5-vl" else self.model.model.vision_tower

    # ---- the contract the datamodule and exporters use ---------------------------------------
    def input_spec(self) -> InputSpec:
        """The preprocessing contract of this model (see :mod:`vidspec.draft_training.data`)."""
        return InputSpec(self.model.config, self.tokenizer, self.max_frames, dict(self.adapter_options))

    def as_target(self, name: str = "training"):
        """This model wrapped in its decoding adapter (for evaluation and tests)."""
        from vidspec.decoding.models import FAMILIES

        cls, _ = FAMILIES[self.model.config.model_type]
        return cls(self.model, self.tokenizer, name, max_frames=self.max_frames, **self.adapter_options)

    # ---- forward / loss -----------------------------------------------------------------------
    def _vision_kwargs(self, batch: dict[str, Any]) -> dict[str, Any]:
        return vision_kwargs(batch, self.family, self.model.model, next(self.vision_tower.parameters()).dtype)

    def hidden_states(self, batch: dict[str, Any]) -> torch.Tensor:
        """``(B, L, d)`` final hidden states (after the final norm) of the language model."""
        # position_ids: only in batches of the data module's position_stretch (LLaVA-OV, 1-D RoPE).
        extra = {"position_ids": batch["position_ids"]} if "position_ids" in batch else {}
        if self.family == "qwen2.5-vl" and self.batched_positions:  # without transformers' per-row loops
            from vidspec.draft_training.qwen_vision import qwen_forward_kwargs

            extra = qwen_forward_kwargs(self.model.model, batch)
        out = self.model.model(
            input_ids=batch["input_ids"], attention_mask=causal_padding_mask(batch["attention_mask"]), use_cache=False,
            return_dict=True, **self._vision_kwargs(batch), **extra,
        )
        return out.last_hidden_state

    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """Mean next-token cross-entropy over answer tokens, and their number."""
        return self.answer_loss(self.hidden_states(batch), batch)

    def answer_loss(self, h: torch.Tensor, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """:meth:`loss` from the batch's hidden states ``h`` (:meth:`hidden_states`), for callers that use them too."""
        target = batch["labels"][:, 1:]
        sel = target != -100
        # The LM head runs only on answer positions: most of a video prompt is never predicted.
        logits = self.model.lm_head(h[:, :-1][sel])
        n = int(sel.sum())
        if n == 0:
            return logits.sum() * 0.0, 0
        return F.cross_entropy(logits.float(), target[sel]), n

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, n = self.loss(batch)
        bs = batch["input_ids"].shape[0]
        if not torch.isfinite(loss):
            # One non-finite batch (seen once in bf16 on the H200 at step 777 of a 1-layer draft)
            # must not poison the weights. Returning None would skip the step on this rank only and
            # hang DDP's gradient all-reduce on the others, so return a zero loss that still touches
            # every trainable parameter: this rank contributes zero gradients, the step stays in sync.
            self._skipped_nonfinite += 1
            self.log("train/skipped_nonfinite", float(self._skipped_nonfinite), on_step=True, batch_size=bs)
            return sum(p.sum() for p in self.parameters() if p.requires_grad) * 0.0
        self.log("train/loss", loss, on_step=True, prog_bar=True, batch_size=bs)
        self.log("train/answer_tokens", float(n), on_step=True, batch_size=bs)
        self.log("train/samples", float(bs), on_step=True, batch_size=bs)  # this rank's; every rank's is the same
        opt = self.optimizers(use_pl_optimizer=False) if self._trainer is not None else None
        if opt is not None:
            self.log("train/lr", opt.param_groups[0]["lr"], on_step=True, prog_bar=True, batch_size=bs)
        now = time.perf_counter()
        if self._last_step_t is not None:
            tokens = float(batch["attention_mask"].sum()) * self.trainer.world_size
            self.log("train/tokens_per_s", tokens / max(now - self._last_step_t, 1e-9), on_step=True,
                     batch_size=bs)
        self._last_step_t = now
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_letters = {}

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        h = self.hidden_states(batch)
        loss, n = self.answer_loss(h, batch)
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, sync_dist=True, batch_size=max(n, 1))
        self._count_letters(h, batch)

    def answer_letters(self, h: torch.Tensor, batch: dict[str, Any],
                       rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For ``rows`` of the batch, at each one's first answer token (a multiple-choice row's option letter):
        the hidden state there ``(R, d)``, the LM head's argmax ``(R,)`` and the true token ``(R,)``."""
        target = batch["labels"][rows, 1:]
        first = (target != -100).int().argmax(1)
        at = h[torch.tensor(rows, device=h.device), first]
        return at, self.model.lm_head(at).argmax(-1), target[torch.arange(len(rows), device=h.device), first]

    def _count_letters(self, h: torch.Tensor, batch: dict[str, Any]) -> None:
        """Multiple-choice rows: is the option letter the model's argmax (counted per question type)?"""
        rows = [i for i, kind in enumerate(batch.get("kinds") or []) if kind]
        if not rows:
            return
        _, pred, true = self.answer_letters(h, batch, rows)
        for i, ok in zip(rows, (pred == true).tolist()):
            c = self._val_letters.setdefault(batch["kinds"][i], [0, 0])
            c[0] += int(ok)
            c[1] += 1

    def on_validation_epoch_end(self) -> None:
        """``val/mcq_acc`` and ``val/mcq_acc/<type>``: the share of validation questions whose option letter is
        the model's argmax, teacher-forced (every rank logs the same totals, gathered over the ranks)."""
        counts = dict(self._val_letters)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[dict] = [{} for _ in range(torch.distributed.get_world_size())]
            torch.distributed.all_gather_object(gathered, counts)
            counts = {}
            for part in gathered:
                for kind, (ok, n) in part.items():
                    c = counts.setdefault(kind, [0, 0])
                    c[0] += ok
                    c[1] += n
        if not counts:
            return
        for kind, (ok, n) in sorted(counts.items()):
            self.log(f"val/mcq_acc/{kind}", ok / n, sync_dist=False)
        self.log("val/mcq_acc", sum(ok for ok, _ in counts.values()) / sum(n for _, n in counts.values()),
                 sync_dist=False)

    def on_train_epoch_start(self) -> None:
        self._last_step_t = None

    def on_before_optimizer_step(self, optimizer) -> None:
        guard_optimizer_step(self, self.named_parameters())

    # ---- optimizer ----------------------------------------------------------------------------
    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.ndim >= 2 and "embed" not in name else no_decay).append(p)
        return adamw_cosine(self, decay, no_decay)

    # ---- checkpoints --------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["vidspec"] = checkpoint_metadata(self)


register_exporter(VLMSFTModule)(export_vlm)


def _load_tokenizer(path: str | None):
    if path is None:
        raise ConfigError("VLMSFTModule needs tokenizer (a tokenizer folder) when not starting from init_from")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot load tokenizer {path!r}: {str(e).splitlines()[0]}") from None


def _release_options(path: str) -> dict:
    import json
    from pathlib import Path

    f = Path(path) / "vidspec.json"
    return json.loads(f.read_text()) if f.is_file() else {}
