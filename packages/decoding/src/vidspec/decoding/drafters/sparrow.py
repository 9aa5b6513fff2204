"""Sparrow drafts: one decoder layer that never looks at the video (docs/algorithms.md, Sparrow).

The draft is EAGLE-style. At sequence position t it reads

    z_t = FC([e_t ; h_{t-1}])        (2d -> d)

where ``e_t`` is the target's token embedding of x_t and ``h_{t-1}`` the target's
second-to-last-layer hidden state at the previous position, runs one decoder layer of the
target's own layer class over the z's, and returns ``ĥ_t``, its estimate of the target's
second-to-last-layer state at t. Logits are ``lm_head(norm(ĥ_t))`` with the target's frozen LM
head. When the draft runs ahead of the target, ``ĥ`` replaces ``h`` in the next step.

Choices made here (each is a :class:`SparrowConfig` field):

- **Head norm** (``head_norm``): ``ĥ`` lives in the residual stream of the target's penultimate
  layer, which is not normalised, while the LM head expects normalised input. ``"own"``
  (default) gives the draft its own RMSNorm, initialised from the target's final norm and
  trained; ``"target"`` reuses the target's frozen final norm (nothing extra to store). The
  own norm lets the draft rescale channels of a state that is one layer short of the final one.
- **Positions** (``position_mode``): ``"target"`` (default) gives every text position the
  position id the target gave it, including Qwen2.5-VL's M-RoPE text positions after the video
  (the rope offset of the video is kept, so text-to-text distances match the target's);
  ``"reindex"`` numbers text positions 0..n-1 as if the video were not there.
- **VATA**: at inference the draft's KV cache holds one entry per *text* position of the prompt
  (from position 1 on: position 0 has no previous state) plus one per committed token; visual
  positions are never fed. Its step cost is therefore independent of the number of visual
  tokens. The first text position after the video reads the state of the last visual position
  as ``h_{t-1}``: one d-vector, the way visual information reaches the draft (hidden-state
  reuse).

The shared parts of the target (embedding table, LM head, final norm) are *bound*, not owned:
they are neither stored in a release nor registered as submodules, so checkpoints and
optimisers see only the draft's own weights.

Usage::

    from vidspec.decoding.drafters.sparrow import SparrowDrafter
    drafter = SparrowDrafter.from_pretrained("data/releases/sparrow-tiny-qwen2.5-vl")
    decoder = SpeculativeDecoder(target, drafter, StrictVerifier(), k=4)

A release is a Hugging Face model folder: ``config.json`` (a :class:`SparrowConfig`, model type
``vidspec_sparrow``, with the target's text config reduced to one layer), ``model.safetensors`` (the
draft's own weights, float32 or bfloat16), ``manifest.json`` (target id and a fingerprint of its
weights and tokenizer; written by ``vidspec export`` with training metadata) and a model card
``README.md``. :meth:`SparrowDraftModel.from_pretrained` takes the folder or a hub id; folders of the
earlier vidspec-only layout (``"format": "vidspec-sparrow"``) still load. docs/releases.md describes
the format.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.types import Proposal, TargetModel, TargetState, VerifyOutput

#: ``model_type`` of a Sparrow draft's Hugging Face config (registered with ``AutoConfig``).
MODEL_TYPE = "vidspec_sparrow"
#: ``format`` of the earlier vidspec-only release layout (still read by ``from_pretrained``).
LEGACY_FORMAT = "vidspec-sparrow"
CONFIG_FILE = "config.json"
MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "model.safetensors"
#: A release's draft vocabulary: target token ids by descending frequency (``vidspec sparrow-vocab``).
DRAFT_VOCAB_FILE = "draft_vocab.json"
#: Weight dtypes a release may hold.
RELEASE_DTYPES = ("float32", "bfloat16")

PositionMode = Literal["target", "reindex"]
HeadNorm = Literal["own", "target"]

#: The draft layer of each target family, by the target's text ``model_type``: (module, decoder layer
#: class, rotary embedding class). A config names the model type, not import paths.
LAYER_CLASSES: dict[str, tuple[str, str, str]] = {
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2DecoderLayer", "Qwen2RotaryEmbedding"),
    "qwen2_5_vl_text": ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLDecoderLayer",
                        "Qwen2_5_VLRotaryEmbedding"),
}


def _qualname(obj: type) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def _import(path: str) -> type:
    module, _, name = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ModelError(f"cannot import {path!r} named by a Sparrow config ({e})") from None
    return obj


def _layer_dict(d: dict) -> dict:
    """A text config dict without the fields that describe a checkpoint rather than the layer."""
    return {k: v for k, v in d.items()
            if k not in ("_name_or_path", "architectures", "id2label", "label2id", "transformers_version")}


class SparrowConfig(PretrainedConfig):
    """Architecture and inference options of a Sparrow draft (a release's ``config.json``).

    Args:
        layer_config: the target's text config as a dict (``to_dict()``), reduced to one layer; the
            draft layer is built from it, so it has the target's width, heads and rope. Its
            ``model_type`` picks the layer class (:data:`LAYER_CLASSES`).
        family: the target's family ("qwen2.5-vl", "llava-ov").
        target_id: name or hub id of the target the draft was distilled from.
        position_mode: "target" keeps the target's position ids of text positions (M-RoPE text
            positions included); "reindex" numbers text positions 0..n-1.
        head_norm: "own" (a trained RMSNorm initialised from the target's final norm) or
            "target" (the target's frozen final norm) before the shared LM head.
        fc_bias: whether the fusion FC (2d -> d) has a bias.
        attn_implementation: attention kernel of the draft layer ("sdpa" or "eager"); the draft
            always passes explicit additive masks, which both accept.
        ivsb_layer: hidden-state index of the target's visual states used by IVSB in training
            (index 0 = embeddings; None = half the depth). Unused at inference.
        **kwargs: the ``PretrainedConfig`` fields (``dtype``, ``architectures``, ...).
    """

    model_type = MODEL_TYPE

    def __init__(self, layer_config: dict | None = None, family: str = "", target_id: str = "",
                 position_mode: PositionMode = "target", head_norm: HeadNorm = "own", fc_bias: bool = False,
                 attn_implementation: str = "sdpa", ivsb_layer: int | None = None, **kwargs):
        if position_mode not in ("target", "reindex"):
            raise ValueError(f"position_mode must be 'target' or 'reindex', got {position_mode!r}")
        if head_norm not in ("own", "target"):
            raise ValueError(f"head_norm must be 'own' or 'target', got {head_norm!r}")
        if attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', got {attn_implementation!r}")
        for legacy in ("text_config", "config_class", "layer_class", "rotary_class", "format", "format_version"):
            kwargs.pop(legacy, None)
        self.layer_config = dict(layer_config or {})
        self.family = family
        self.target_id = target_id
        self.position_mode = position_mode
        self.head_norm = head_norm
        self.fc_bias = bool(fc_bias)
        self.layer_attn_implementation = attn_implementation
        self.ivsb_layer = ivsb_layer
        kwargs.pop("layer_attn_implementation", None)
        super().__init__(**kwargs)

    # The kernel is the draft layer's own; PretrainedConfig keeps ``_attn_implementation`` for the model class.
    @property
    def attn_implementation(self) -> str:
        return self.layer_attn_implementation

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["attn_implementation"] = d.pop("layer_attn_implementation", self.layer_attn_implementation)
        return d

    @property
    def hidden_size(self) -> int:
        return int(self.layer_config["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.layer_config["vocab_size"])

    @property
    def layer_model_type(self) -> str:
        return str(self.layer_config.get("model_type", ""))

    def _classes(self) -> tuple[str, str, str]:
        try:
            return LAYER_CLASSES[self.layer_model_type]
        except KeyError:
            raise ModelError(f"Sparrow drafts support targets whose text model type is one of "
                             f"{', '.join(sorted(LAYER_CLASSES))}; this config has {self.layer_model_type!r}") from None

    @property
    def layer_class(self) -> str:
        """``module:Class`` of the draft's decoder layer (the target's own layer class)."""
        module, layer, _ = self._classes()
        return f"{module}:{layer}"

    @property
    def rotary_class(self) -> str:
        """``module:Class`` of the draft's rotary embedding (M-RoPE for Qwen2.5-VL)."""
        module, _, rotary = self._classes()
        return f"{module}:{rotary}"

    @classmethod
    def from_target(cls, model: nn.Module, family: str, target_id: str = "", **options) -> SparrowConfig:
        """The config of a draft for ``model`` (a ``*ForConditionalGeneration``).

        Args:
            model: the target's HF module; its text config (one layer of it) becomes ``layer_config``.
            family: the adapter family name.
            target_id: recorded in the config and the manifest.
            **options: other :class:`SparrowConfig` fields.
        """
        text_cfg = model.config.get_text_config()
        d = text_cfg.to_dict()
        d["num_hidden_layers"] = 1
        if "layer_types" in d and d["layer_types"]:
            d["layer_types"] = d["layer_types"][:1]
        cfg = cls(layer_config=_layer_dict(d), family=family, target_id=target_id, **options)
        cfg._classes()  # an unsupported layer type fails here, not at the first load
        return cfg

    def build_text_config(self):
        """The HF text config object of the draft layer (one layer, explicit attention kernel)."""
        from transformers import AutoConfig

        d = copy.deepcopy(self.layer_config)
        cfg = AutoConfig.for_model(d.pop("model_type", self.layer_model_type), **d)
        cfg._attn_implementation = self.attn_implementation
        return cfg

    def replace(self, **changes) -> SparrowConfig:
        """A copy with some fields changed (e.g. ``attn_implementation`` at inference)."""
        d = self.to_dict()
        d.update(changes)
        d.pop("model_type", None)
        return type(self)(**d)

    @classmethod
    def from_legacy(cls, d: dict) -> SparrowConfig:
        """A config of the earlier layout (``"format": "vidspec-sparrow"``, classes named by import path)."""
        try:
            return cls(layer_config=_layer_dict(d["text_config"]), **{k: d[k] for k in (
                "family", "target_id", "position_mode", "head_norm", "fc_bias", "attn_implementation", "ivsb_layer")
                if k in d})
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"invalid Sparrow draft config: {e}") from None


def register_auto_classes() -> None:
    """Make ``AutoConfig``/``AutoModel`` know the ``vidspec_sparrow`` model type (idempotent)."""
    from transformers import AutoConfig, AutoModel

    try:
        AutoConfig.register(MODEL_TYPE, SparrowConfig)
        AutoModel.register(SparrowConfig, SparrowDraftModel)
    except ValueError:  # already registered
        pass


@dataclass
class _Shared:
    """The target's modules a draft borrows (never registered, never saved)."""

    embed: nn.Module
    lm_head: nn.Module
    final_norm: nn.Module
    owner: int = 0  # id() of the HF module they came from


def check_head_ids(head_ids: Sequence[int] | torch.Tensor, vocab_size: int) -> torch.Tensor:
    """A draft vocabulary as an ``(V',) int64`` CPU tensor, or a ValueError naming what is wrong."""
    ids = torch.as_tensor(head_ids, dtype=torch.long).flatten().cpu()
    if ids.numel() == 0:
        raise ValueError("head_ids is empty: give the target token ids the draft may propose (or None for all)")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"head_ids must be token ids in [0, {vocab_size}), got ids from {int(ids.min())} "
                         f"to {int(ids.max())}")
    if torch.unique(ids).numel() != ids.numel():
        raise ValueError("head_ids has repeated token ids")
    return ids


def load_draft_vocab(release: str | Path | SparrowDraftModel, size: int) -> torch.Tensor:
    """The ``size`` most frequent token ids of a release's draft vocabulary (``draft_vocab.json``).

    Args:
        release: a Sparrow release folder or hub id, or a draft loaded from one.
        size: how many ids (the file lists them by descending frequency; fewer if it has fewer).

    Raises:
        ConfigError: no draft vocabulary in the release, a bad file, or ``size < 1``.
    """
    if isinstance(release, SparrowDraftModel):
        if release.release_dir is None:
            raise ConfigError("--draft-vocab needs a Sparrow release folder (this draft was not loaded from one)")
        release = release.release_dir
    elif not Path(release).is_dir():  # a hub id: its downloaded snapshot
        try:
            release = resolve_release(release)
        except ModelError as e:
            raise ConfigError(str(e)) from None
    path = Path(release) / DRAFT_VOCAB_FILE
    if size < 1:
        raise ConfigError(f"--draft-vocab must be >= 1, got {size}")
    if not path.is_file():
        raise ConfigError(f"{release} has no {DRAFT_VOCAB_FILE}: make one with "
                          f"'vidspec sparrow-vocab --data DATA --target TARGET --out {release}'")
    try:
        ids = json.loads(path.read_text())["token_ids"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a draft vocabulary ({type(e).__name__}: {e})") from None
    return torch.as_tensor(ids[:size], dtype=torch.long)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(B, 1, Q, K) bool`` "may attend" to the additive float mask attention kernels take."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, neg)


class SparrowDraftModel(PreTrainedModel):
    """The Sparrow draft network: fusion FC, one target-type decoder layer, a head norm.

    A ``PreTrainedModel``: ``save_pretrained`` writes a Hugging Face folder (safetensors only) and
    ``from_pretrained`` reads one from a folder or a hub id. The target's embedding table, LM head and
    final norm are not part of it (see :meth:`bind`).

    Args:
        config: architecture (see :class:`SparrowConfig`).

    Shapes: ``d`` is the target's hidden size, ``V`` its vocabulary; ``B`` batch, ``S`` sequence.
    """

    config_class = SparrowConfig
    base_model_prefix = "sparrow"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _no_split_modules = ["layer"]

    def __init__(self, config: SparrowConfig):
        if not isinstance(config, SparrowConfig):
            raise TypeError(f"SparrowDraftModel takes a SparrowConfig, got {type(config).__name__}")
        super().__init__(config)
        text_cfg = config.build_text_config()
        self.text_config = text_cfg
        d = config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=config.fc_bias)
        self.layer = _import(config.layer_class)(text_cfg, 0)
        self.rotary = _import(config.rotary_class)(config=text_cfg)
        self.mrope = "mrope_section" in (getattr(text_cfg, "rope_parameters", None) or {})
        # The own head norm uses the layer's norm class (RMSNorm of the family).
        norm_cls = type(self.layer.input_layernorm)
        self.norm = norm_cls(d, eps=text_cfg.rms_norm_eps) if config.head_norm == "own" else None
        self._shared: _Shared | None = None
        #: the release's manifest.json (target id and fingerprint), {} for a fresh draft
        self.manifest: dict = {}
        #: the release folder this draft was loaded from (None for a fresh draft)
        self.release_dir: Path | None = None
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Keep PyTorch's own initialisation (a fresh draft's FC and layer; the head norm is copied in bind)."""

    # ---- binding the target's shared modules ----------------------------------------------------
    def bind(self, target_model: nn.Module, init_norm: bool = False) -> None:
        """Borrow the embedding table, LM head and final norm of a target HF module.

        Args:
            target_model: the target's ``*ForConditionalGeneration``.
            init_norm: copy the target's final norm weights into the own head norm (done once,
                when a fresh draft is created for training).

        Raises:
            ModelError: the target's width or vocabulary differs from the draft's.
        """
        text_cfg = target_model.config.get_text_config()
        if text_cfg.hidden_size != self.config.hidden_size:
            raise ModelError(f"Sparrow draft has hidden size {self.config.hidden_size} but the target has "
                             f"{text_cfg.hidden_size}: it was made for another model")
        head = target_model.lm_head
        if head.out_features != self.config.vocab_size:
            raise ModelError(f"Sparrow draft has a vocabulary of {self.config.vocab_size} but the target's LM head "
                             f"has {head.out_features} outputs: it was made for another model")
        lm = target_model.model.language_model
        # object.__setattr__ keeps the borrowed modules out of this module's registry (and so out
        # of state_dict, parameters() and DDP's gradient buckets).
        object.__setattr__(self, "_shared", _Shared(target_model.get_input_embeddings(), head, lm.norm,
                                                    id(target_model)))
        if init_norm and self.norm is not None:
            with torch.no_grad():
                self.norm.weight.copy_(lm.norm.weight.to(self.norm.weight))

    @property
    def shared(self) -> _Shared:
        if self._shared is None:
            raise RuntimeError("SparrowDraftModel is not bound to a target: call bind(target.model) first")
        return self._shared

    # ---- the network ------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, S) int64`` token ids -> ``(B, S, d)`` target token embeddings (frozen)."""
        return self.shared.embed(ids)

    def fuse(self, embeds: torch.Tensor, hidden_prev: torch.Tensor) -> torch.Tensor:
        """z = FC([e ; h_prev]): ``(B, S, d)`` x2 -> ``(B, S, d)``."""
        return self.fc(torch.cat([embeds, hidden_prev.to(embeds.dtype)], dim=-1))

    def position_ids(self, positions: torch.Tensor) -> torch.Tensor:
        """Bring ``(B, S)`` or ``(3, B, S)`` position ids to the shape the rotary class wants."""
        if self.mrope:
            return positions if positions.ndim == 3 else positions[None].expand(3, -1, -1)
        return positions if positions.ndim == 2 else positions[0]

    def run_layer(self, x: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, cache=None) -> torch.Tensor:
        """One decoder layer over ``x``.

        Args:
            x: ``(B, S, d)`` layer inputs (fused z's, or IVSB visual states in training).
            positions: ``(B, S)`` or ``(3, B, S)`` int64 position ids.
            allowed: ``(B, 1, S, S_past + S) bool``: which keys each query may attend to.
            cache: an HF ``DynamicCache`` of the draft (inference) or None (training).

        Returns:
            ``(B, S, d)`` ĥ, the draft's estimate of the target's penultimate hidden states.
        """
        pos = self.position_ids(positions)
        cos_sin = self.rotary(x, pos)
        out = self.layer(x, attention_mask=additive_mask(allowed, x.dtype), position_ids=pos, cache=cache,
                         use_cache=cache is not None, position_embeddings=cos_sin)
        return out[0] if isinstance(out, tuple) else out

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` ĥ -> ``(..., V)`` logits through the head norm and the target's LM head."""
        norm = self.norm if self.norm is not None else self.shared.final_norm
        return self.shared.lm_head(norm(hidden))

    # ---- releases ---------------------------------------------------------------------------------
    def own_state_dict(self) -> dict[str, torch.Tensor]:
        """The draft's own weights (no borrowed modules, no rotary buffers)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("rotary.")}

    def save_pretrained(self, save_directory: str | Path, manifest: dict | None = None, *,
                        dtype: str | torch.dtype | None = None, **kwargs) -> Path:
        """Write a release: ``config.json``, ``model.safetensors`` and ``manifest.json``.

        Args:
            save_directory: the release folder (created).
            manifest: what to record about the target and training; it should contain
                ``target_fingerprint`` (see :func:`target_fingerprint`) so that loading against
                another target can be refused.
            dtype: weights saved as "float32" (default) or "bfloat16".
            **kwargs: passed to ``PreTrainedModel.save_pretrained`` (``push_to_hub``, ``token``, ...).
        """
        name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
        if name not in RELEASE_DTYPES:
            raise ConfigError(f"a Sparrow release is saved in {' or '.join(RELEASE_DTYPES)}, not {name}")
        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        kwargs.pop("safe_serialization", None)
        state = {k: v.detach().to("cpu", getattr(torch, name)).contiguous() for k, v in self.own_state_dict().items()}
        self.config.architectures = [type(self).__name__]
        self.config.dtype = name
        super().save_pretrained(str(out), state_dict=state, **kwargs)
        man = {"model_type": MODEL_TYPE, "target_id": self.config.target_id, "family": self.config.family,
               **(manifest or {})}
        (out / MANIFEST_FILE).write_text(json.dumps(man, indent=2, sort_keys=True, default=str) + "\n")
        return out

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *, target: TargetModel | None = None,
                        allow_target_mismatch: bool = False, revision: str | None = None, token: str | None = None,
                        dtype: str | torch.dtype | None = None, verify: bool | None = None,
                        **overrides) -> SparrowDraftModel:
        """Load a release from a folder or a hub id; with ``target`` given, check it is the draft's target and bind.

        Args:
            pretrained_model_name_or_path: the release folder, or a hub id (``org/name``; downloaded
                with ``huggingface_hub.snapshot_download``).
            target: the target adapter the draft will serve (checked by fingerprint and bound).
            allow_target_mismatch: load even if the target's fingerprint differs (shapes must
                still fit).
            revision: the hub revision (branch, tag or commit) of a hub id.
            token: a hub token for a private repository (default: the logged-in one).
            dtype: cast the weights (default: float32 without a target, the target's dtype with one).
            verify: check the weights against the manifest's sha256 fingerprint (default: on unless
                ``VIDSPEC_NO_VERIFY=1``; see :mod:`vidspec.decoding.integrity`).
            **overrides: inference-time config fields to change (e.g. ``attn_implementation``).

        Raises:
            ModelError: missing or malformed files, weights that differ from the manifest's
                fingerprint, or a different target.
        """
        from safetensors.torch import load_file

        from vidspec.decoding.integrity import verify_weights

        p = resolve_release(pretrained_model_name_or_path, revision=revision, token=token)
        if not (p / CONFIG_FILE).is_file() or not (p / WEIGHTS_FILE).is_file():
            raise ModelError(f"{pretrained_model_name_or_path}: not a Sparrow release (needs {CONFIG_FILE} and "
                             f"{WEIGHTS_FILE})")
        try:
            raw = json.loads((p / CONFIG_FILE).read_text())
            manifest = json.loads((p / MANIFEST_FILE).read_text()) if (p / MANIFEST_FILE).is_file() else {}
        except json.JSONDecodeError as e:
            raise ModelError(f"{pretrained_model_name_or_path}: invalid JSON in the release ({e})") from None
        if raw.get("format") == LEGACY_FORMAT:
            config = SparrowConfig.from_legacy(raw)
        elif raw.get("model_type") == MODEL_TYPE:
            try:
                config = SparrowConfig.from_dict({k: v for k, v in raw.items() if k != "model_type"})
            except (TypeError, ValueError) as e:
                raise ModelError(f"invalid Sparrow draft config: {e}") from None
        else:
            raise ModelError(f"{pretrained_model_name_or_path}: not a Sparrow draft config (model_type "
                             f"{raw.get('model_type')!r}, expected {MODEL_TYPE!r})")
        if overrides:
            try:
                config = config.replace(**overrides)
            except (TypeError, ValueError) as e:
                raise ModelError(f"invalid Sparrow draft option: {e}") from None
        verify_weights(p, verify=verify, name=str(pretrained_model_name_or_path))
        model = cls(config)
        try:
            state = load_file(str(p / WEIGHTS_FILE))
        except Exception as e:  # safetensors raises its own SafetensorError (or OSError) for a bad file
            raise ModelError(f"{pretrained_model_name_or_path}: cannot read {WEIGHTS_FILE} ({e})") from None
        own = model.own_state_dict()
        state = {k: v.to(own[k].dtype) if k in own else v for k, v in state.items()}
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as e:  # shape mismatches
            first = str(e).strip().splitlines()[-1].strip()
            raise ModelError(f"{pretrained_model_name_or_path}: weights do not match the config ({first})") from None
        missing = [k for k in missing if not k.startswith("rotary.")]
        if missing or unexpected:
            raise ModelError(f"{pretrained_model_name_or_path}: weights do not match the config (missing "
                             f"{missing[:3]}, unexpected {unexpected[:3]})")
        model.manifest = manifest
        model.release_dir = p  # where load_draft_vocab finds the release's draft vocabulary
        model.eval()
        if dtype is not None:
            model.to(getattr(torch, str(dtype).removeprefix("torch.")))
        if target is not None:
            check_target(manifest, target, allow_target_mismatch, str(pretrained_model_name_or_path))
            model.bind(target.model)
            model.to(device=target.device, dtype=target.model.lm_head.weight.dtype)
        return model


def resolve_release(name_or_path: str | Path, revision: str | None = None, token: str | None = None) -> Path:
    """A release folder on this machine: ``name_or_path`` itself, or a hub id's downloaded snapshot.

    Raises:
        ModelError: neither a folder nor a hub id that can be downloaded (offline, private, missing).
    """
    p = Path(name_or_path)
    if p.is_dir():
        return p
    text = str(name_or_path)
    if p.is_absolute() or text.startswith(".") or text.count("/") != 1:
        raise ModelError(f"{text}: no such Sparrow release folder (and not a hub id of the form org/name)")
    from vidspec.decoding.hub import local_only

    cached = local_only(text, "Sparrow release", revision=revision)  # offline: the cache or one line at once
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(text, revision=revision, token=token, local_files_only=cached))
    except Exception as e:  # offline, missing repository, no access: one line naming the repository
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot download the Sparrow release {text!r}: {first}") from None


# ---- target fingerprints ------------------------------------------------------------------------
#: Elements sampled per tensor for the weight fingerprint (strided over the flattened tensor).
FINGERPRINT_SAMPLES = 4096


@torch.no_grad()
def weights_fingerprint(model: nn.Module) -> str:
    """A cheap, dtype-independent fingerprint of a model's weights.

    Hashes every parameter's name and shape and up to :data:`FINGERPRINT_SAMPLES` strided values
    rounded to bfloat16, so the same checkpoint loaded in float32 on a CPU and in bfloat16 on a
    GPU gives the same string, while any other checkpoint (another fine-tune) does not. Hashing
    every byte of a 7B model would take a minute at each load.

    Returns:
        A hex sha256 digest.
    """
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // FINGERPRINT_SAMPLES)
        sample = flat[::step][:FINGERPRINT_SAMPLES].to("cpu", torch.bfloat16).view(torch.int16)
        h.update(f"{name}:{tuple(p.shape)}".encode())
        h.update(sample.numpy().tobytes())
    return h.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's vocabulary (token -> id), the thing a draft depends on."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def target_fingerprint(target: TargetModel) -> dict[str, str]:
    """``{"weights": ..., "tokenizer": ...}`` of a target adapter (see the two functions above)."""
    cached = getattr(target, "_sparrow_fingerprint", None)
    if cached is not None:
        return cached
    fp = {"weights": weights_fingerprint(target.model), "tokenizer": tokenizer_fingerprint(target.tokenizer)}
    try:
        target._sparrow_fingerprint = fp  # weights are frozen for a loaded target: compute once
    except AttributeError:
        pass
    return fp


def check_target(manifest: dict, target: TargetModel, allow_mismatch: bool, where: str = "Sparrow draft") -> None:
    """Refuse a draft made for another target.

    Raises:
        ModelError: the manifest's fingerprint differs from ``target``'s (unless allowed).
    """
    want = manifest.get("target_fingerprint")
    if not want:
        if allow_mismatch:
            return
        raise ModelError(f"{where}: the release has no target fingerprint in {MANIFEST_FILE}; "
                         f"pass --allow-target-mismatch to use it anyway")
    have = target_fingerprint(target)
    bad = [k for k in ("weights", "tokenizer") if want.get(k) != have.get(k)]
    if bad and not allow_mismatch:
        raise ModelError(
            f"{where} was distilled from target {manifest.get('target_id', '?')!r} but is being used with "
            f"{getattr(target, 'name', '?')!r}: their {' and '.join(bad)} differ. Use the draft with its own "
            f"target, or pass --allow-target-mismatch to force it"
        )


# ---- the drafter --------------------------------------------------------------------------------
@dataclass
class _Pending:
    """Committed draft inputs not yet in the draft's cache."""

    tokens: list[int] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)  # each (d,)
    index: list[int] = field(default_factory=list)  # sequence index of each token


class SparrowDrafter:
    """A :class:`~vidspec.decoding.types.Drafter` running a Sparrow draft with a text-only cache.

    ``begin`` feeds the prompt's text positions (t >= 1) with the target's penultimate states
    from prefill; ``propose(k)`` feeds the committed-but-unfed entries, then runs k recursive
    steps feeding its own ĥ; ``commit`` crops the speculative entries and queues the accepted
    tokens with the target's true penultimate states from the verify pass.

    Args:
        model: the draft (bound to the target in ``begin`` if not bound yet).
        temperature: 0 drafts greedily; > 0 samples and returns the draft distributions
            (SpeculativeDecoder sets it to each request's temperature for that request, then restores it).
        top_p: nucleus mass when sampling (SpeculativeDecoder sets it to each request's top_p, likewise).
        generator: RNG for sampled drafts (SpeculativeDecoder shares the request's seeded RNG, likewise).
        allow_target_mismatch: skip the fingerprint check in ``begin``.
        head_ids: a *draft vocabulary* (EAGLE-3's reduced head, applied at inference): the target
            token ids the draft may propose. Its head then scores only these rows of the target's
            LM head (a copy of them, made once per target), which is what the draft step's cost is
            dominated by at 7B widths (a 152k-row head reads 1.09 GB per step); proposals are the
            best token *within* the set, so choose the tokens that matter (e.g. the most frequent
            in the data). None: the whole vocabulary. Verification is unchanged, so outputs stay
            lossless; only acceptance can drop.
    """

    need: frozenset[str] = frozenset({"penult"})

    def __init__(self, model: SparrowDraftModel, temperature: float = 0.0, top_p: float = 1.0,
                 generator: torch.Generator | None = None, allow_target_mismatch: bool = False,
                 head_ids: Sequence[int] | torch.Tensor | None = None):
        self.model = model.eval()
        self.head_ids = None if head_ids is None else check_head_ids(head_ids, model.config.vocab_size)
        self._sub_head: tuple | None = None  # (key, weight rows, bias rows, ids on device)
        self.temperature = temperature
        self.top_p = top_p
        self.generator = generator
        self.allow_target_mismatch = allow_target_mismatch
        self.name = "sparrow" + (f":{model.config.target_id}" if model.config.target_id else "")
        self._checked: int | None = None
        self.cache = None
        self._pending = _Pending()
        self._draft: list[int] = []
        self._prepared: TargetState | None = None  # the request prepare() started (begin finishes it)

    @classmethod
    def from_pretrained(cls, path: str | Path, target: TargetModel | None = None, *,
                        allow_target_mismatch: bool = False, draft_vocab: int | None = None, **kw) -> SparrowDrafter:
        """Load a Sparrow release (see :meth:`SparrowDraftModel.from_pretrained`).

        ``draft_vocab``: use the release's ``size`` most frequent tokens as the draft vocabulary
        (``head_ids``; see :func:`load_draft_vocab`).
        """
        model = SparrowDraftModel.from_pretrained(path, target=target, allow_target_mismatch=allow_target_mismatch)
        if draft_vocab:
            kw["head_ids"] = load_draft_vocab(model, draft_vocab)
        d = cls(model, allow_target_mismatch=allow_target_mismatch, **kw)
        if target is not None:
            d._checked = id(target.model)
        return d

    # ---- positions --------------------------------------------------------------------------------
    def _prompt_positions(self, target: TargetModel, state: TargetState, text_idx: torch.Tensor) -> torch.Tensor:
        """Position ids of all prompt positions: ``(3, L)`` for M-RoPE, else ``(1, L)``."""
        ids = state.prompt_ids
        if self.model.config.position_mode == "reindex":
            is_text = torch.ones(ids.shape[0], dtype=torch.long)
            if state.visual_positions is not None and state.visual_positions.numel():
                is_text[state.visual_positions.cpu()] = 0
            pos = (torch.cumsum(is_text, 0) - 1).clamp_min(0)[None]
            if self.model.mrope:
                pos = pos.expand(3, -1)
        elif state.extra.get("positions") is not None:  # kept by the target's prefill (FastTarget)
            pos = state.extra["positions"]
        else:
            pos, _ = target.prefill_positions(ids[None].to(target.device), state.extra.get("visual"))
            pos = pos.reshape(-1, ids.shape[0]).cpu()  # (3, 1, L) -> (3, L); (1, L) stays
        return pos

    def _position_of(self, index: int) -> torch.Tensor:
        """Position ids ``(A,)`` of sequence index ``index`` (A = 3 axes or 1)."""
        if index < self._prompt_len:
            return self._prompt_pos[:, index]
        # Generated tokens are text: one step per token after the last prompt position, on all axes
        # (Qwen2.5-VL's text positions after the video are (p, p, p) with the rope offset kept).
        return self._last_pos + (index - self._prompt_len + 1)

    # ---- the protocol -----------------------------------------------------------------------------
    @torch.inference_mode()
    def _prepare_model(self, target: TargetModel) -> None:
        """Check the draft against ``target`` (once per target), bind its shared modules, match device/dtype."""
        model = self.model
        if self._checked != id(target.model):
            check_target(getattr(model, "manifest", {}) or {}, target, self.allow_target_mismatch
                         or not getattr(model, "manifest", None), "Sparrow draft")
            self._checked = id(target.model)
        if model._shared is None or model._shared.owner != id(target.model):
            model.bind(target.model)
        p = model.fc.weight  # the draft's own weights move together
        head = model._shared.lm_head.weight
        if p.device != target.device or p.dtype != head.dtype:
            model.to(device=target.device, dtype=head.dtype)

    def _start_prompt(self, target: TargetModel, state: TargetState) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Lay out a new request's prompt: its text positions and their draft position ids.

        Returns ``(prompt ids, prompt length, feed)``: ``feed`` are the text positions the draft
        reads at ``begin`` (VATA: text only; position 0 has no previous hidden state).
        """
        if state.prompt_hidden_penult is None:
            raise RuntimeError("SparrowDrafter needs the target's prompt_hidden_penult: prefill with need={'penult'}")
        ids = state.prompt_ids
        L = ids.shape[0]
        is_text = np.ones(L, dtype=bool)  # host work once per request: numpy, not a dozen small tensor ops
        if state.visual_positions is not None and state.visual_positions.numel():
            is_text[state.visual_positions.cpu().numpy()] = False
        idx = np.flatnonzero(is_text).astype(np.int64, copy=False)
        self._prompt_len = L
        self._prompt_pos = self._prompt_positions(target, state, torch.from_numpy(idx))
        self._last_pos = self._prompt_pos[:, L - 1]
        self._n_text_prompt = int(idx.size)
        return ids, L, torch.from_numpy(idx[idx >= 1])

    @torch.inference_mode()
    def prepare(self, target: TargetModel, state: TargetState) -> None:
        """The request's prompt-side start: feed the prompt's text positions (everything ``begin`` does
        that does not need the first token). Engines call it right after the target's prefill, before
        the first token is read back, so its host work runs while the prefill is still on the device
        (its time counts in the prefill phase). ``begin`` calls it when it was not called for ``state``."""
        from transformers import DynamicCache

        model = self.model
        self._prepare_model(target)
        ids, L, feed = self._start_prompt(target, state)
        self.cache = DynamicCache(config=model.text_config)
        self._cache_index: list[int] = []  # sequence index of each cached entry (for masks/debugging)
        hp = state.prompt_hidden_penult
        if feed.numel():
            self._forward(ids[feed].tolist(), hp[(feed - 1).to(hp.device)], feed.tolist())
        self._pending = _Pending()
        self._draft = []
        self._prepared = state

    @torch.inference_mode()
    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        if self._prepared is not state:
            self.prepare(target, state)
        self._prepared = None
        L = self._prompt_len
        self._pending = _Pending(tokens=[first_token], hidden=[state.prompt_hidden_penult[L - 1]], index=[L])

    def _forward(self, tokens: list[int], hidden: torch.Tensor, index: list[int]) -> torch.Tensor:
        """Append entries to the draft cache; returns their ``(n, d)`` ĥ."""
        model = self.model
        dev = hidden.device
        ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        z = model.fuse(model.embed(ids), hidden[None])
        pos = torch.stack([self._position_of(i) for i in index], dim=-1).to(dev)  # (A, n)
        pos = pos[:, None, :]  # (A, 1, n)
        past = self.cache.get_seq_length()
        n = len(tokens)
        # Every cached entry precedes the new ones, so the mask is causal within the new block only.
        allowed = torch.ones(n, past + n, dtype=torch.bool, device=dev).tril(past)[None, None]
        out = model.run_layer(z, pos, allowed, cache=self.cache)
        self._cache_index.extend(index)
        return out[0]

    def _feed_pending(self) -> torch.Tensor | None:
        p = self._pending
        if not p.tokens:
            return None
        h = self._forward(p.tokens, torch.stack(p.hidden), p.index)
        self._pending = _Pending()
        return h[-1]

    def _choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """The next draft token from the head's logits (over the draft vocabulary when there is one).

        A sampled token's distribution is returned over the whole vocabulary (zero outside the
        draft vocabulary), as strict rejection sampling needs q.
        """
        from vidspec.decoding.verifiers.strict import draft_choice

        tok, dist = draft_choice(logits, self.temperature, self.top_p, self.generator)
        if self.head_ids is None:
            return tok, dist
        if dist is not None:  # dist is on the head's device, where _head keeps the ids
            dist = dist.new_zeros(self.model.config.vocab_size).index_copy_(0, self._head()[2], dist)
        return int(self.head_ids[tok]), dist

    def _head(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The draft vocabulary's rows of the target's LM head ``(V', d)``, their bias, and the ids on device.

        Copied once per target head (rebuilt if the head moves or changes dtype).
        """
        head = self.model.shared.lm_head
        w = head.weight
        key = (w.data_ptr(), w.device, w.dtype)
        if self._sub_head is None or self._sub_head[0] != key:
            ids = self.head_ids.to(w.device)
            bias = head.bias[ids].contiguous() if head.bias is not None else None
            self._sub_head = (key, w[ids].contiguous(), bias, ids)
        return self._sub_head[1], self._sub_head[2], self._sub_head[3]

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` ĥ -> logits over the draft vocabulary (the whole one without ``head_ids``)."""
        if self.head_ids is None:
            return self.model.logits(h)
        m = self.model
        norm = m.norm if m.norm is not None else m.shared.final_norm
        w, b, _ = self._head()
        return torch.nn.functional.linear(norm(h), w, b)

    @torch.inference_mode()
    def propose(self, k: int) -> Proposal:
        if self.cache is None:
            raise RuntimeError("begin() first")
        self._draft = []
        if k <= 0:
            return Proposal(())
        last_index = self._pending.index[-1] if self._pending.tokens else self._cache_index[-1]
        self._committed = self.cache.get_seq_length() + len(self._pending.tokens)
        h = self._feed_pending()
        assert h is not None, "a round always starts with at least x_last pending"
        tokens, dists = [], []
        for i in range(k):
            tok, dist = self._choose(self._logits(h).float())
            tokens.append(tok)
            if dist is not None:
                dists.append(dist)
            if i < k - 1:
                h = self._forward([tok], h[None], [last_index + i + 1])[-1]
        self._draft = tokens
        return Proposal(tuple(tokens), torch.stack(dists) if dists else None)

    def commit(self, n_accepted: int, next_token: int, out: VerifyOutput) -> None:
        if out.hidden_penult is None:
            raise RuntimeError("SparrowDrafter needs VerifyOutput.hidden_penult (need={'penult'})")
        # Entries made from the draft's own ĥ are speculative: drop them all and re-feed the
        # accepted tokens with the target's true states (row i is the state of input i of the pass,
        # input 0 being x_last).
        if self._draft:
            from vidspec.decoding.models.base import crop_cache

            crop_cache(self.cache, self._committed)
            del self._cache_index[self._committed:]
        p = self._pending
        start = (p.index[-1] if p.tokens else self._cache_index[-1]) + 1
        new = [*self._draft[:n_accepted], next_token]
        for j, tok in enumerate(new):
            p.tokens.append(tok)
            p.hidden.append(out.hidden_penult[j])
            p.index.append(start + j)
        self._draft = []

    # ---- introspection ----------------------------------------------------------------------------
    @property
    def cache_length(self) -> int:
        """Entries in the draft's KV cache (text positions only, by construction)."""
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    def cache_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the cached key tensors, one per layer: ``(1, kv_heads, entries, head_dim)``."""
        if self.cache is None:
            return []
        return [tuple(layer.keys.shape) for layer in self.cache.layers if getattr(layer, "keys", None) is not None]


def new_sparrow_for(target: TargetModel, seed: int | None = 0, **options) -> SparrowDraftModel:
    """A randomly initialised Sparrow draft bound to ``target`` (tests, and the start of training).

    Args:
        target: the adapter whose layer type, width and shared modules the draft uses.
        seed: seeds the initialisation (the caller's RNG is left untouched); None uses the global RNG.
        **options: :class:`SparrowConfig` fields (position_mode, head_norm, ...).
    """
    cfg = SparrowConfig.from_target(target.model, target.family, getattr(target, "name", ""), **options)
    if seed is None:
        model = SparrowDraftModel(cfg)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = SparrowDraftModel(cfg)
    model.bind(target.model, init_norm=True)
    model.manifest = {"target_id": cfg.target_id, "target_fingerprint": target_fingerprint(target)}
    return model.to(device=target.device, dtype=target.model.lm_head.weight.dtype)


register_auto_classes()
