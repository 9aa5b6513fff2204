"""Model loading: hub ids, local directories and the built-in tiny models, by family registry.

``load_target(name)`` accepts

- a built-in tiny name (``tiny-qwen2.5-vl``, ``tiny-llava-ov`` and their ``-draft`` variants),
- a local directory in Hugging Face format (``config.json`` + weights + tokenizer), e.g. a
  ``vidspec export`` release or a downloaded checkpoint; an optional ``vidspec.json`` there holds
  ``{"adapter_options": {...}, "max_frames": N}`` (e.g. the pixel budget the model was trained at),
- a hub id such as ``Qwen/Qwen2.5-VL-7B-Instruct`` or ``llava-hf/llava-onevision-qwen2-7b-ov-hf``.

The family is taken from ``config.model_type``; new families register in :data:`FAMILIES`.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch

from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.hub import local_only
from vidspec.decoding.integrity import verify_weights
from vidspec.decoding.models.base import HFVideoTarget, crop_cache
from vidspec.decoding.models.llava_onevision import LlavaOnevisionTarget
from vidspec.decoding.models.qwen2_5_vl import Qwen2_5_VLTarget
from vidspec.decoding.models.tiny import TINY_MODELS, build_tiny_model

log = logging.getLogger(__name__)

#: model_type in config.json -> (adapter class, HF class name in transformers)
FAMILIES: dict[str, tuple[type[HFVideoTarget], str]] = {
    "qwen2_5_vl": (Qwen2_5_VLTarget, "Qwen2_5_VLForConditionalGeneration"),
    "llava_onevision": (LlavaOnevisionTarget, "LlavaOnevisionForConditionalGeneration"),
}

#: Adapter options for the tiny models: small frames keep CPU runs fast.
TINY_OPTIONS = {
    "qwen2.5-vl": {"min_pixels": 56 * 56, "max_pixels": 112 * 112},
    "llava-ov": {},
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float16": torch.float16, "fp16": torch.float16}[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r} (use float32, bfloat16 or float16)") from None


def _check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r} (use cpu, cuda or cuda:N)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"device {device!r} requested but this machine has {torch.cuda.device_count()} GPU(s)")


def _adapter_for(model, tokenizer, name: str, options: dict) -> HFVideoTarget:
    model_type = model.config.model_type
    if model_type not in FAMILIES:
        raise ModelError(f"{name}: model type {model_type!r} is not a supported Video-LLM (supported: {', '.join(FAMILIES)})")
    cls, _ = FAMILIES[model_type]
    return cls(model, tokenizer, name, **options)


def load_target(
    name: str,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,
    relevance_layer: int | None = None,
    max_frames: int | None = None,
    verify: bool | None = None,
    **options,
) -> HFVideoTarget:
    """Load a Video-LLM and wrap it in its family's adapter.

    Args:
        name: tiny name, local directory, or hub id.
        device: "cpu", "cuda", "cuda:1", ...
        dtype: "float32", "bfloat16", ... (default: bfloat16 on CUDA, float32 on CPU).
        relevance_layer: hidden-state index for visual relevance (default: the middle layer).
        max_frames: frames sampled per video (default 8 for tiny models, 16 otherwise).
        verify: check a local folder's weights against the sha256 fingerprint of its ``manifest.json``
            (default: on unless ``VIDSPEC_NO_VERIFY=1``; see :mod:`vidspec.decoding.integrity`).
        **options: family adapter options (e.g. ``max_pixels`` for Qwen2.5-VL).

    Raises:
        ModelError: unknown name, unreadable directory, unsupported family, offline hub, weights that
            differ from their manifest's fingerprint.
    """
    _check_device(device)
    torch_dtype = _resolve_dtype(dtype, device)
    common = {"relevance_layer": relevance_layer}
    if name in TINY_MODELS:
        model, tokenizer = build_tiny_model(name)
        opts = {**TINY_OPTIONS[TINY_MODELS[name].family], **options, **common, "max_frames": max_frames or 8}
        model = model.to(device=device, dtype=torch_dtype)
        return _adapter_for(model, tokenizer, name, opts)

    path = Path(name).expanduser()
    hub_kw: dict = {}
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{name}: not a model directory (no config.json)")
        source = str(path)
        try:
            saved = json.loads((path / "vidspec.json").read_text()) if (path / "vidspec.json").is_file() else {}
        except json.JSONDecodeError as e:
            raise ModelError(f"{name}/vidspec.json is not valid JSON: {e}") from None
        options = {**saved.get("adapter_options", {}), **options}
        max_frames = max_frames or saved.get("max_frames")
        verify_weights(path, verify=verify, name=name)
    elif _HUB_ID.match(name):
        source = name
        if local_only(name, "model"):  # offline or no network, but cached: no download attempts
            hub_kw["local_files_only"] = True
    else:
        known = ", ".join(sorted(TINY_MODELS))
        raise ModelError(f"unknown model {name!r}: not a built-in name ({known}), a directory, or a hub id (org/name)")

    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source, **hub_kw)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot load model config for {name!r}: {first}") from None
    except ValueError as e:
        raise ModelError(f"{name}: unrecognised model config ({e})") from None
    if config.model_type not in FAMILIES:
        raise ModelError(f"{name}: model type {config.model_type!r} is not a supported Video-LLM (supported: {', '.join(FAMILIES)})")
    import transformers
    from safetensors import SafetensorError

    hf_cls = getattr(transformers, FAMILIES[config.model_type][1])
    try:
        # Straight onto a GPU when one is asked for: no full CPU copy of the weights in every process.
        placement = {"device_map": device} if str(device).startswith("cuda") else {}
        model = hf_cls.from_pretrained(source, dtype=torch_dtype, **placement, **hub_kw)
        tokenizer = AutoTokenizer.from_pretrained(source, **hub_kw)
    # OSError: missing files / offline hub; SafetensorError: a truncated or corrupt weights file;
    # ValueError: no usable tokenizer files; RuntimeError: weights of other shapes than the config.
    except (OSError, SafetensorError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot load model {name!r}: {first}") from None
    model = model.to(device).eval()
    opts = {**options, **common, "max_frames": max_frames or 16}
    return _adapter_for(model, tokenizer, name, opts)


def real_vocab_size(tokenizer, rows: int) -> int:
    """How many of an LM head's ``rows`` are tokens: the tokenizer's ids, the rest padding.

    Checkpoints pad their embedding and head to a round number of rows (Qwen2.5-VL-3B has
    151,936, the 7B 152,064, over one tokenizer of 151,665 ids); rows past the tokenizer are never
    produced by it.
    """
    return min(int(rows), len(tokenizer))


def check_compatible(target: HFVideoTarget, draft: HFVideoTarget) -> int:
    """Refuse a draft whose vocabulary differs from the target's (tokens would mean other things).

    Heads that differ only by padding rows are accepted when the two tokenizers are identical: the
    draft then proposes only real token ids (see :class:`~vidspec.decoding.drafters.ModelDrafter`),
    so a padding row is never proposed and never accepted.

    Returns:
        The number of token ids the pair shares (the draft may propose ids below it).

    Raises:
        ModelError: naming both models and the difference.
    """
    tv, dv = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    real_t = real_vocab_size(target.tokenizer, target.vocab_size)
    real_d = real_vocab_size(draft.tokenizer, draft.vocab_size)
    if tv != dv or real_t != real_d:
        only_t = len(set(tv) - set(dv))
        only_d = len(set(dv) - set(tv))
        raise ModelError(
            f"draft {draft.name!r} does not share the vocabulary of target {target.name!r} "
            f"(output sizes {draft.vocab_size} vs {target.vocab_size}; {only_d} draft-only and {only_t} "
            f"target-only tokens)"
        )
    return real_t


__all__ = ["FAMILIES", "HFVideoTarget", "Qwen2_5_VLTarget", "LlavaOnevisionTarget", "load_target",
           "check_compatible", "crop_cache", "real_vocab_size"]
