"""Sparrow distillation: a LightningModule that trains the draft from a frozen target inside it.

Per batch (the batch contract of :mod:`vidspec.draft_training.data`) the frozen target (bf16 on
GPU, no grad) gives token embeddings e, second-to-last-layer states h, the middle layer's
states at visual positions (IVSB) and its next-token distributions p_T. The draft then runs S
recursive MTP steps over the sequence

    step 1:  x = [h_mid_vis ; FC([e_txt ; h_txt(t-1)])]
    step s:  x = [h_mid_vis ; FC([e_txt ; ĥ^{(s-1)}_txt(t-1)])]   (own states replace the target's)

with the visual states before all text positions (training only; masked at inference), and is
trained at every text position whose next token is an answer token with

    loss = Σ_s w_s · (distill(q_s, p_T) + λ_feat · smoothL1(ĥ^{(s)}, h))

Logged (TensorBoard in the recipes, and ``metrics.jsonl``): ``train/loss``, ``train/loss_step{s}``,
``train/acc_step{s}`` (top-1 agreement), ``train/sim_accept_len`` (1 + Σ_k Π_{i<=k} acc_i),
``train/tokens_per_s`` (text tokens), ``train/gpu_mem_gb``; the same ``val/*`` at validation, and with
``val_accept_samples`` > 0 ``val/accept_len``: the mean τ (tokens per target pass) of the draft decoding a few
held-out samples through the real decoder (``SpeculativeDecoder`` with a ``SparrowDrafter``, strict greedy
verification, K = ``val_accept_k``), beside the teacher-forced ``val/sim_accept_len``.

Recipe (``vidspec train fit --config configs/train/sparrow-tiny-cpu.yaml``)::

    model:
      class_path: vidspec.draft_training.sparrow.SparrowDistillModule
      init_args:
        target: tiny-qwen2.5-vl
        draft: {position_mode: target}
        loss: {mtp_steps: 2, distill: kl}

Checkpoints hold only the draft's weights (the target is reloaded from ``target``), and
``vidspec export`` turns them into a release that :class:`~vidspec.decoding.sparrow.SparrowDrafter`
loads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch

from vidspec.decoding.drafters.sparrow import SparrowConfig, SparrowDraftModel, target_fingerprint
from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.data import InputSpec
from vidspec.draft_training.sft import (
    OptimConfig,
    adamw_cosine,
    causal_padding_mask,
    checkpoint_metadata,
    guard_optimizer_step,
    vision_kwargs,
)
from vidspec.draft_training.sparrow import losses
from vidspec.draft_training.sparrow.features import FeatureCache

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class SparrowDraftOptions:
    """Architecture options of the draft (see :class:`~vidspec.decoding.sparrow.SparrowConfig`).

    Attributes:
        position_mode: "target" keeps the target's position ids of text positions (M-RoPE
            included); "reindex" numbers text positions 0..n-1.
        head_norm: "own" trained RMSNorm (initialised from the target's final norm) or "target"
            (the target's frozen final norm) before the shared LM head.
        fc_bias: bias in the fusion FC.
        attn_implementation: "sdpa" or "eager" for the draft layer.
        ivsb: put the target's middle-layer visual states before the text positions in training
            (IVSB, the paper's default); False trains text-only, exactly as inference sees it. On
            SynthVid, IVSB taught the draft to read colours from visual states it does not have at
            inference (τ 4.89 vs 7.20 without, K = 8, 2 CPU cores; docs/results.md), so our SynthVid recipes
            set False; teacher-forced training accuracy does not show the difference.
        ivsb_layer: hidden-state index of those visual states (None: half the target's depth).
        init_seed: seed of the draft's initialisation.
    """

    position_mode: Literal["target", "reindex"] = "target"
    head_norm: Literal["own", "target"] = "own"
    fc_bias: bool = False
    attn_implementation: str = "sdpa"
    ivsb: bool = True
    ivsb_layer: int | None = None
    init_seed: int = 0


@dataclass(frozen=True)
class SparrowLossConfig:
    """What the draft is trained on.

    Attributes:
        mtp_steps: S recursive steps (1 = teacher-forced only; the paper uses 2).
        step_weights: explicit weights w_s (length S); None uses ``step_decay`` or all ones.
        step_decay: w_s = decay**s (EAGLE-3 uses 0.8); ignored when ``step_weights`` is given.
        distill: "kl" (forward KL to the target distribution, default) or "vispec"
            (10·L1(softmax) + 0.1·top-10 ranking).
        kl_temperature: temperature of the forward KL.
        vispec_l1: weight of ViSpec's L1 term.
        vispec_rank: weight of ViSpec's ranking term.
        vispec_top: how many of the target's top tokens the ranking term orders.
        feature_weight: weight of the optional smooth-L1 regression of ĥ onto the target's
            second-to-last states (EAGLE-1); 0 disables it.
        detach_recursion: stop gradients through ĥ fed to the next MTP step.
    """

    mtp_steps: int = 2
    step_weights: list[float] | None = None
    step_decay: float | None = None
    distill: Literal["kl", "vispec"] = "kl"
    kl_temperature: float = 1.0
    vispec_l1: float = 10.0
    vispec_rank: float = 0.1
    vispec_top: int = 10
    feature_weight: float = 0.0
    detach_recursion: bool = False

    def __post_init__(self) -> None:
        if self.mtp_steps < 1:
            raise ConfigError(f"loss.mtp_steps must be >= 1, got {self.mtp_steps}")
        if self.distill not in ("kl", "vispec"):
            raise ConfigError(f"loss.distill must be 'kl' or 'vispec', got {self.distill!r}")
        try:
            losses.step_weights(self.mtp_steps, self.step_weights, self.step_decay)
        except ValueError as e:
            raise ConfigError(f"loss: {e}") from None


def _as(cls, value):
    if value is None or isinstance(value, cls):
        return value
    d = dict(value) if isinstance(value, dict) else dict(vars(value))  # dict or jsonargparse Namespace
    if "betas" in d:
        d["betas"] = tuple(d["betas"])
    return cls(**d)


@dataclass
class DraftBatch:
    """The draft's view of a batch (compact: visual prefix, then text entries).

    Attributes:
        vis: ``(B, Vmax, d)`` IVSB visual states (Vmax = 0 without IVSB).
        vis_valid: ``(B, Vmax) bool``.
        tokens: ``(B, T) int64`` token of each text entry (text positions t >= 1).
        embeds: ``(B, T, d)`` their target embeddings.
        h_prev: ``(B, T, d)`` the target's penultimate state at t-1.
        h_true: ``(B, T, d)`` the target's penultimate state at t (feature regression target).
        prev_is_entry: ``(B, T) bool``: t-1 is itself a text entry (its ĥ can replace h_prev).
        txt_valid: ``(B, T) bool``.
        positions: ``(A, B, Vmax + T)`` position ids (A = 3 for M-RoPE, else 1).
        sel: ``(B, T) bool`` supervised entries (the next token is an answer token).
        target_logits: ``(N, V)`` the target's logits at the supervised entries (N = sel.sum()).
    """

    vis: torch.Tensor
    vis_valid: torch.Tensor
    tokens: torch.Tensor
    embeds: torch.Tensor
    h_prev: torch.Tensor
    h_true: torch.Tensor
    prev_is_entry: torch.Tensor
    txt_valid: torch.Tensor
    positions: torch.Tensor
    sel: torch.Tensor
    target_logits: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)


def _continue_from(path: str, tgt, target_name: str) -> SparrowDraftModel:
    """Load the Sparrow release ``path`` as the starting draft for distilling from ``tgt``.

    Unlike decoding with a release (which refuses any other target), a warm start accepts a
    release distilled from other weights of the same tokenizer, such as the target before a
    fine-tune, and says so in the log; the shapes must still fit.

    Raises:
        ConfigError: the release was made for a target with another tokenizer.
        ModelError: the release is missing, malformed, or its shapes do not fit ``tgt``.
    """
    draft = SparrowDraftModel.from_pretrained(path, target=tgt, allow_target_mismatch=True)
    want = draft.manifest.get("target_fingerprint") or {}
    have = target_fingerprint(tgt)
    if want.get("tokenizer") and want["tokenizer"] != have["tokenizer"]:
        raise ConfigError(f"model.init_args.init_from {path}: the release was distilled from target "
                          f"{draft.manifest.get('target_id', '?')!r}, whose tokenizer differs from {target_name!r}'s")
    if want.get("weights") != have["weights"]:
        log.info("init_from %s was distilled from target %r (other weights); its distillation continues against %r",
                 path, draft.manifest.get("target_id", "?"), target_name)
    return draft.float()


class SparrowDistillModule(L.LightningModule):
    """Distil a Sparrow draft from a frozen target (see the module docstring).

    Args:
        target: the target: a built-in tiny name, a release / HF folder, or a hub id.
        draft: draft architecture options.
        loss: MTP steps, step weights and loss terms.
        optim: AdamW + warmup/cosine schedule (as the SFT module).
        target_dtype: dtype of the frozen target ("auto": bfloat16 on CUDA, float32 on CPU).
        max_frames: frames per video fed to the target (default: the target's own budget).
        init_from: a Sparrow release to continue from (its weights; its architecture wins over
            ``draft``). It may come from an earlier version of ``target`` (the same tokenizer, other
            weights: a draft distilled before the target's fine-tune); a release for another
            tokenizer is refused.
        feature_cache: a folder written by :func:`~vidspec.draft_training.sparrow.features.precompute_features`;
            when set the target's hidden states are read from it instead of running the target
            (the embedding table and LM head are still used).
        gradient_checkpointing: recompute the draft layer in backward (long sequences).
        val_accept_samples: held-out samples the draft decodes through the real decoder at each validation (rank
            zero; 0 disables it); their mean τ is logged as ``val/accept_len``.
        val_accept_k: draft tokens per round in that measurement.
        val_accept_tokens: new tokens per sample in that measurement.
        target_device: where the frozen target lives: "auto" loads it straight onto this process's GPU
            (``LOCAL_RANK`` / ``SLURM_LOCALID``, as torchrun, SLURM and Lightning's launcher set them) when CUDA is
            present, so no rank holds a CPU copy of the 7B weights; otherwise the CPU. Any torch device string.

    The frozen target is replicated, never sharded: under DDP and under
    :class:`~vidspec.draft_training.strategies.DraftFSDPStrategy` each process holds one copy on its device,
    and only the draft is wrapped by the strategy.
    """

    def __init__(
        self,
        target: str = "tiny-qwen2.5-vl",
        draft: SparrowDraftOptions | None = None,
        loss: SparrowLossConfig | None = None,
        optim: OptimConfig | None = None,
        target_dtype: str = "auto",
        max_frames: int | None = None,
        init_from: str | None = None,
        feature_cache: str | None = None,
        gradient_checkpointing: bool = False,
        target_device: str = "auto",
        val_accept_samples: int = 0,
        val_accept_k: int = 4,
        val_accept_tokens: int = 64,
    ):
        super().__init__()
        draft = _as(SparrowDraftOptions, draft) or SparrowDraftOptions()
        loss = _as(SparrowLossConfig, loss) or SparrowLossConfig()
        optim = _as(OptimConfig, optim) or OptimConfig()
        # ``_class_path`` lets ``vidspec train fit --ckpt_path FILE`` re-parse these hyperparameters
        # (LightningCLI reads it from the checkpoint); load_module drops "_" keys.
        cls = type(self)
        self.save_hyperparameters({
            "_class_path": f"{cls.__module__.rpartition('.module')[0] or cls.__module__}.{cls.__qualname__}",
            "target": target, "draft": asdict(draft), "loss": asdict(loss), "optim": asdict(optim),
            "target_dtype": target_dtype, "max_frames": max_frames, "init_from": init_from,
            "feature_cache": feature_cache, "gradient_checkpointing": gradient_checkpointing,
            "target_device": target_device, "val_accept_samples": val_accept_samples, "val_accept_k": val_accept_k,
            "val_accept_tokens": val_accept_tokens,
        })
        self.val_accept = (val_accept_samples, val_accept_k, val_accept_tokens)
        self.draft_options, self.loss_cfg, self.optim = draft, loss, optim
        self.weights = losses.step_weights(loss.mtp_steps, loss.step_weights, loss.step_decay)
        self.gradient_checkpointing = gradient_checkpointing
        tgt = self._load_target(target, target_dtype, max_frames, target_device)
        # The frozen target is not a registered submodule: checkpoints, optimizers and DDP see only
        # the draft, and each process keeps its own copy of the target.
        object.__setattr__(self, "target", tgt)
        if init_from:
            self.draft = _continue_from(init_from, tgt, target)
        else:
            cfg = SparrowConfig.from_target(
                tgt.model, tgt.family, target, position_mode=draft.position_mode, head_norm=draft.head_norm,
                fc_bias=draft.fc_bias, attn_implementation=draft.attn_implementation, ivsb_layer=draft.ivsb_layer)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(draft.init_seed)
                self.draft = SparrowDraftModel(cfg)
            self.draft.bind(tgt.model, init_norm=True)
        self.draft.train()
        n_layers = tgt.num_layers
        self.ivsb_layer = draft.ivsb_layer if draft.ivsb_layer is not None else n_layers // 2
        if not 0 <= self.ivsb_layer <= n_layers:
            raise ConfigError(f"draft.ivsb_layer {self.ivsb_layer} outside 0..{n_layers}")
        self.feature_cache = None
        if feature_cache:
            self.feature_cache = FeatureCache(feature_cache, tgt)
        self.vidspec_run_config: dict | None = None
        self._last_step_t: float | None = None
        self._dropped_nonfinite_grads = 0  # steps whose gradients were not finite (drop_nonfinite_gradients)

    # ---- target -------------------------------------------------------------------------------
    @staticmethod
    def _target_device(device: str) -> str:
        if device != "auto":
            return device
        if not torch.cuda.is_available():
            return "cpu"
        local = os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or "0"
        return f"cuda:{int(local) % torch.cuda.device_count()}"

    @classmethod
    def _load_target(cls, name: str, dtype: str, max_frames: int | None, device: str = "auto"):
        from vidspec.decoding.models import load_target

        device = cls._target_device(device)
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        try:
            tgt = load_target(name, device=device, dtype=dtype, max_frames=max_frames)
        except Exception as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"cannot load target {name!r}: {e}") from None
        tgt.model.eval().requires_grad_(False)
        from vidspec.draft_training.qwen_vision import use_grouped_vision_attention

        use_grouped_vision_attention(tgt.model)  # a Qwen2.5-VL teacher's tower: one call per window length
        return tgt

    def _ensure_target_device(self) -> None:
        dev = self.draft.fc.weight.device
        if self.target.device != dev:
            self.target.model.to(dev)

    def input_spec(self) -> InputSpec:
        """The target's preprocessing contract (the datamodule builds inputs with it)."""
        t = self.target
        opts = {"min_pixels": t.min_pixels, "max_pixels": t.max_pixels} if t.family == "qwen2.5-vl" else {}
        return InputSpec(t.model.config, t.tokenizer, t.max_frames, opts)

    # ---- target features ----------------------------------------------------------------------
    def _vision_kwargs(self, batch: dict[str, Any]) -> dict[str, Any]:
        t = self.target
        return vision_kwargs(batch, t.family, t.model.model, t.model.lm_head.weight.dtype)

    def target_positions(self, batch: dict[str, Any]) -> torch.Tensor:
        """``(A, B, L)`` the target's position ids (M-RoPE: A = 3, from ``get_rope_index``)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        if self.target.family == "qwen2.5-vl":
            from vidspec.draft_training.qwen_vision import qwen_positions

            pos = qwen_positions(self.target.model.model, batch)  # batched, equal to get_rope_index (no per-row loop)
            if pos is not None:
                return pos
            pos, _ = self.target.model.model.get_rope_index(
                ids, mm_token_type_ids=batch["mm_token_type_ids"], video_grid_thw=batch.get("video_grid_thw"),
                second_per_grid_ts=batch.get("second_per_grid_ts"), attention_mask=mask)
            return pos
        if "position_ids" in batch:  # the data module's position_stretch (LLaVA-OV, 1-D RoPE)
            return batch["position_ids"][None]
        return ((mask.long().cumsum(-1) - 1).clamp_min(0))[None]

    @torch.no_grad()
    def target_features(self, batch: dict[str, Any], *, padding_mask: bool = False) -> dict[str, torch.Tensor]:
        """Run the frozen target once.

        Args:
            batch: a collated batch.
            padding_mask: pass the padding mask even where the batch is right-padded (the same states; the slower
                path, kept so the two can be timed against each other; see
                :func:`~vidspec.draft_training.sft.causal_padding_mask`).

        Returns:
            ``penult`` ``(B, L, d)``, ``mid`` ``(B, L, d)`` (the IVSB layer), ``last`` ``(B, L, d)``
            (final normed states, for logits) and ``positions`` ``(A, B, L)``.
        """
        if self.feature_cache is not None:
            return self.feature_cache.lookup(batch, self.draft.fc.weight.device)
        self._ensure_target_device()
        extra = {"position_ids": batch["position_ids"]} if "position_ids" in batch else {}  # position_stretch
        fast = {}
        if self.target.family == "qwen2.5-vl":  # the positions and the tower's indices, as the SFT module does
            from vidspec.draft_training.qwen_vision import qwen_forward_kwargs

            fast = qwen_forward_kwargs(self.target.model.model, batch)
        positions = fast["position_ids"] if fast else self.target_positions(batch)
        # Hidden state k is the output of decoder layer k - 1 (0 is the embeddings); forward hooks keep
        # only the two layers read instead of all of them.
        layers = getattr(getattr(self.target.model.model, "language_model", None), "layers", None)
        if layers is None:  # a model without the usual layout: every hidden state, as transformers returns them
            want = {"penult": -2, "mid": self.ivsb_layer}
        else:
            want = {"penult": len(layers) - 1}
            if self.draft_options.ivsb:
                want["mid"] = self.ivsb_layer
        got: dict[str, torch.Tensor] = {}
        handles = []
        for key, k in want.items():
            if layers is not None and k >= 1:
                def keep(_m, _a, out, key=key):
                    got[key] = out[0] if isinstance(out, tuple) else out
                handles.append(layers[k - 1].register_forward_hook(keep))
        try:
            # The frozen target computes as at inference: no autocast from a mixed-precision plugin.
            with _no_autocast(batch["input_ids"].device):
                out = self.target.model.model(
                    input_ids=batch["input_ids"], use_cache=False,
                    attention_mask=(batch["attention_mask"] if padding_mask
                                    else causal_padding_mask(batch["attention_mask"])),
                    output_hidden_states=not handles or len(handles) < len(want), return_dict=True,
                    **self._vision_kwargs(batch), **(fast or extra))
        finally:
            for h in handles:
                h.remove()
        for key, k in want.items():
            if key not in got:
                got[key] = out.hidden_states[k]
        return {"penult": got["penult"], "mid": got.get("mid", got["penult"]), "last": out.last_hidden_state,
                "positions": positions}

    # ---- the draft's batch --------------------------------------------------------------------
    def draft_batch(self, batch: dict[str, Any], feats: dict[str, torch.Tensor]) -> DraftBatch:
        """Gather the compact draft inputs (visual prefix + text entries) from target features."""
        ids, mask, ans = batch["input_ids"], batch["attention_mask"].bool(), batch["answer_mask"].bool()
        B, L = ids.shape
        dev = ids.device
        vt = self.target.video_token_id
        is_vis = (ids == vt) & mask
        is_txt = mask & ~is_vis
        entry = is_txt.clone()
        entry[:, 0] = False  # position 0 has no previous state
        nxt_ans = torch.zeros_like(ans)
        nxt_ans[:, :-1] = ans[:, 1:]
        supervise = entry & nxt_ans
        pos_full = feats["positions"].to(dev)
        if self.draft.config.position_mode == "reindex":
            rank = (is_txt.long().cumsum(-1) - 1).clamp_min(0)
            # Visual states sit at the point of the sequence where the video was (one shared
            # position): no positional order among them, and text keeps its inference positions.
            first_vis = torch.where(is_vis.any(-1), is_vis.float().argmax(-1), torch.zeros(B, dtype=torch.long,
                                                                                          device=dev))
            vis_pos = rank.gather(1, first_vis[:, None]).expand(B, L)
            pos_full = torch.where(is_vis, vis_pos, rank)[None].expand(pos_full.shape[0], B, L)
        use_vis = self.draft_options.ivsb
        n_vis = is_vis.sum(-1) if use_vis else torch.zeros(B, dtype=torch.long, device=dev)
        n_txt = entry.sum(-1)
        Vmax, T = int(n_vis.max()) if B else 0, int(n_txt.max()) if B else 0
        d = feats["penult"].shape[-1]
        wdtype = self.draft.fc.weight.dtype
        # Index tables: for each (b, slot), the sequence position it reads (0 for padding slots).
        ar_t = torch.arange(T, device=dev)
        txt_idx = torch.zeros(B, T, dtype=torch.long, device=dev)
        vis_idx = torch.zeros(B, Vmax, dtype=torch.long, device=dev)
        for b in range(B):
            ti = torch.nonzero(entry[b]).flatten()
            txt_idx[b, : ti.numel()] = ti
            if Vmax:
                vi = torch.nonzero(is_vis[b]).flatten()
                vis_idx[b, : vi.numel()] = vi
        txt_valid = ar_t[None] < n_txt[:, None]
        vis_valid = torch.arange(Vmax, device=dev)[None] < n_vis[:, None]

        def take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))

        penult = feats["penult"]
        h_prev = take(penult, (txt_idx - 1).clamp_min(0)).to(wdtype)
        h_true = take(penult, txt_idx).to(wdtype)
        vis = take(feats["mid"], vis_idx).to(wdtype) if Vmax else penult.new_zeros(B, 0, d).to(wdtype)
        tokens = ids.gather(1, txt_idx)
        prev_is_entry = torch.zeros(B, T, dtype=torch.bool, device=dev)
        if T > 1:
            prev_is_entry[:, 1:] = (txt_idx[:, 1:] - 1 == txt_idx[:, :-1]) & txt_valid[:, 1:]
        sel = supervise.gather(1, txt_idx) & txt_valid
        A = pos_full.shape[0]
        pos = torch.cat([pos_full.gather(2, vis_idx[None].expand(A, -1, -1)),
                         pos_full.gather(2, txt_idx[None].expand(A, -1, -1))], dim=2)
        last_sel = take(feats["last"], txt_idx)[sel]
        with torch.no_grad(), _no_autocast(dev):
            target_logits = self.target.model.lm_head(last_sel.to(self.target.model.lm_head.weight.dtype)).float()
        embeds = self.draft.embed(tokens).to(wdtype)
        return DraftBatch(vis, vis_valid, tokens, embeds, h_prev, h_true, prev_is_entry, txt_valid, pos, sel,
                          target_logits)

    # ---- MTP ----------------------------------------------------------------------------------
    def _causal_layer(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The draft's layer as :meth:`SparrowDraftModel.run_layer` runs it, with no mask tensor: SDPA applies
        causality itself (its flash / memory-efficient kernels on GPU)."""
        d = self.draft
        pos = d.position_ids(positions)
        out = d.layer(x, attention_mask=None, position_ids=pos, use_cache=False,
                      position_embeddings=d.rotary(x, pos))
        return out[0] if isinstance(out, tuple) else out

    def _run(self, x: torch.Tensor, pos: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        fn = self._causal_layer if allowed is None else self.draft.run_layer
        args = (x, pos) if allowed is None else (x, pos, allowed)
        if self.gradient_checkpointing and self.training:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def mtp(self, db: DraftBatch) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        """S recursive steps; returns the weighted loss and per-step ``{"loss", "acc"}``."""
        cfg = self.loss_cfg
        V = db.vis.shape[1]
        valid = torch.cat([db.vis_valid, db.txt_valid], dim=1)  # (B, S)
        # Each row is laid out [its visual states; its text entries; padding]. With the valid slots first, a
        # plain causal mask lets each valid query see exactly the valid keys before it, so the layer runs
        # SDPA's causal kernels (flash attention on GPU) and no (B, 1, S, S) mask is built.
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices
        if bool((order == torch.arange(valid.shape[1], device=valid.device)).all()):
            order = None
        pos = db.positions if order is None else db.positions.gather(
            2, order[None].expand(db.positions.shape[0], -1, -1))
        allowed = None
        if self.draft.config.attn_implementation == "eager":  # eager attention takes no implicit causal mask
            S = valid.shape[1]
            allowed = torch.ones(S, S, dtype=torch.bool, device=valid.device).tril()[None, None]
        h_in = db.h_prev
        total = db.embeds.new_zeros(())
        stats = []
        for s in range(cfg.mtp_steps):
            z = self.draft.fuse(db.embeds, h_in)
            x = torch.cat([db.vis, z], dim=1) if V else z
            if order is None:
                out = self._run(x, pos, allowed)
            else:
                idx = order[..., None].expand(-1, -1, x.shape[-1])
                out = torch.empty_like(x).scatter(1, idx, self._run(x.gather(1, idx), pos, allowed))
            h_hat = out[:, V:]
            pred = h_hat[db.sel]
            logits = self.draft.logits(pred)
            if cfg.distill == "kl":
                step_loss = losses.forward_kl(logits, db.target_logits, cfg.kl_temperature)
            else:
                step_loss = losses.vispec_loss(logits, db.target_logits, cfg.vispec_l1, cfg.vispec_rank, cfg.vispec_top)
            if cfg.feature_weight > 0:
                step_loss = step_loss + cfg.feature_weight * losses.feature_loss(pred, db.h_true[db.sel])
            if pred.shape[0] == 0:
                step_loss = h_hat.sum() * 0.0
            total = total + self.weights[s] * step_loss
            stats.append({"loss": step_loss.detach(), "acc": losses.top1_agreement(logits.detach(), db.target_logits)})
            if s + 1 < cfg.mtp_steps:
                fed = h_hat.detach() if cfg.detach_recursion else h_hat
                shifted = torch.cat([torch.zeros_like(fed[:, :1]), fed[:, :-1]], dim=1)
                # Only where t-1 is a text entry does the draft have its own state; elsewhere (the
                # first text after the video) inference also reads the target's state.
                h_in = torch.where(db.prev_is_entry[..., None], shifted, db.h_prev)
        return total, stats

    def step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]], int]:
        feats = self.target_features(batch)
        db = self.draft_batch(batch, feats)
        loss, stats = self.mtp(db)
        return loss, stats, int(db.sel.sum())

    def _log_stats(self, prefix: str, loss, stats, n: int, bs: int, **kw) -> None:
        self.log(f"{prefix}/loss", loss, prog_bar=True, batch_size=bs, **kw)
        accs = []
        for s, st in enumerate(stats, start=1):
            self.log(f"{prefix}/loss_step{s}", st["loss"], batch_size=bs, **kw)
            self.log(f"{prefix}/acc_step{s}", st["acc"], batch_size=bs, **kw)
            accs.append(float(st["acc"]))
        self.log(f"{prefix}/sim_accept_len", losses.simulated_accept_length(accs), prog_bar=True, batch_size=bs, **kw)
        self.log(f"{prefix}/supervised_tokens", float(n), batch_size=bs, **kw)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, stats, n = self.step(batch)
        bs = batch["input_ids"].shape[0]
        self._log_stats("train", loss, stats, n, bs, on_step=True)
        # This rank's samples (a DistributedSampler gives every rank the same count, the last
        # batch of an epoch included): throughput from real batch sizes, not batch x steps.
        self.log("train/samples", float(bs), on_step=True, batch_size=bs)
        if self._trainer is not None:
            opt = self.optimizers(use_pl_optimizer=False)
            self.log("train/lr", opt.param_groups[0]["lr"], on_step=True, batch_size=bs)
        now = time.perf_counter()
        if self._last_step_t is not None:
            world = self.trainer.world_size if self._trainer is not None else 1
            # Text tokens only (prompt and answer): the unit of decoding speed, comparable across video sizes.
            text = batch["attention_mask"].bool() & (batch["input_ids"] != self.target.video_token_id)
            tokens = float(text.sum()) * world
            self.log("train/tokens_per_s", tokens / max(now - self._last_step_t, 1e-9), on_step=True, batch_size=bs)
        self._last_step_t = now
        if torch.cuda.is_available() and self.draft.fc.weight.is_cuda:
            self.log("train/gpu_mem_gb", torch.cuda.max_memory_allocated(self.draft.fc.weight.device) / 2**30,
                     on_step=True, batch_size=bs)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, stats, n = self.step(batch)
        self._log_stats("val", loss, stats, n, batch["input_ids"].shape[0], on_epoch=True, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        n, k, tokens = self.val_accept
        if n <= 0 or self._trainer is None or self.trainer.sanity_checking:
            return
        dm = getattr(self.trainer, "datamodule", None)
        rows = list(getattr(getattr(dm, "val_set", None), "rows", []) or [])[:n]
        if not rows:
            return
        with self._full_draft_params():
            tau = self.decoded_accept_length(rows, k, tokens) if self.trainer.is_global_zero else 0.0
        # rank zero measured it; the others log the same value (a sum over ranks of one non-zero value)
        value = torch.tensor(tau, device=self.draft.fc.weight.device)
        if self.trainer.world_size > 1:
            value = self.trainer.strategy.reduce(value, reduce_op="sum")
        self.log("val/accept_len", value, rank_zero_only=False, sync_dist=False)

    def _full_draft_params(self):
        """Under FSDP, the draft's whole parameters for the duration (a collective: every rank enters)."""
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = getattr(self.trainer.strategy, "model", None)
        if isinstance(wrapped, FullyShardedDataParallel):
            return FullyShardedDataParallel.summon_full_params(wrapped, writeback=False)
        return contextlib.nullcontext()

    @torch.no_grad()
    def decoded_accept_length(self, rows, k: int, max_new_tokens: int) -> float:
        """Mean τ of a float32 copy of the draft decoding ``rows`` (prompt + video) through the real decoder."""
        from vidspec.decoding.drafters.sparrow import SparrowDrafter
        from vidspec.decoding.methods import build_decoder
        from vidspec.decoding.types import Request

        self._ensure_target_device()
        draft = SparrowDraftModel(self.draft.config)
        # Fetched by attribute, not from state_dict(): inside FSDP's summon_full_params the whole tensors are the
        # modules' attributes whether or not FSDP keeps them registered as parameters.
        state = {}
        for key in draft.own_state_dict():
            obj = self.draft
            for part in key.split("."):
                obj = getattr(obj, part)
            state[key] = obj.detach().float().clone()
        draft.load_state_dict(state, strict=False)
        draft.bind(self.target.model)
        draft.to(self.target.device)
        was_training = self.draft.training
        try:
            decoder = build_decoder("sparrow", target=self.target, draft=SparrowDrafter(draft), k=k)
            taus = [decoder.generate(Request(r.prompt, self.target.read_video(r.video)),
                                     max_new_tokens=max_new_tokens).tau for r in rows]
        finally:
            self.draft.train(was_training)
        return float(sum(taus) / len(taus))

    def on_train_epoch_start(self) -> None:
        self._last_step_t = None

    def on_before_optimizer_step(self, optimizer) -> None:
        guard_optimizer_step(self, self.draft.named_parameters())

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the draft's gradients, correctly under every strategy.

        Norm clipping under FSDP needs the norm over all shards, which only the root FSDP module's
        ``clip_grad_norm_`` computes (Lightning's FSDP precision plugin refuses ``gradient_clip_val`` for that
        reason). Under DDP the gradients are already all-reduced, so Lightning's own clipping is right.
        """
        if not gradient_clip_val:
            return
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = getattr(self.trainer.strategy, "model", None) if self._trainer is not None else None
        if isinstance(wrapped, FullyShardedDataParallel) and gradient_clip_algorithm in (None, "norm"):
            wrapped.clip_grad_norm_(gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    # ---- optimizer ----------------------------------------------------------------------------
    def configure_optimizers(self):
        decay, no_decay = [], []
        for _, p in self.draft.named_parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        return adamw_cosine(self, decay, no_decay)

    # ---- checkpoints --------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["vidspec"] = checkpoint_metadata(self)

    # ---- release ------------------------------------------------------------------------------
    def release_manifest(self) -> dict[str, Any]:
        """Target identity for the release manifest (id and fingerprint of weights and tokenizer)."""
        return {"target_id": self.hparams["target"], "target_fingerprint": target_fingerprint(self.target),
                "target_family": self.target.family}


def _no_autocast(device: torch.device):
    """A context in which the frozen target runs in its own dtype even inside a mixed-precision step."""
    if not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


def export_sparrow(module: SparrowDistillModule, out: Path, ctx) -> dict:
    """Exporter (``vidspec export``) of :class:`SparrowDistillModule`: a Sparrow release folder."""
    if ctx.dtype != "float32":  # a one-layer draft is small; its loader expects float32
        raise ConfigError(f"--dtype {ctx.dtype}: Sparrow drafts are exported in float32 only")
    draft = module.draft
    manifest = {**module.release_manifest(), "kind": "sparrow-draft", "training_config": ctx.run_config,
                "metrics": ctx.metrics}
    draft.save_pretrained(out, manifest=manifest)
    c = draft.config
    n = sum(p.numel() for p in draft.own_state_dict().values())
    return {
        **module.release_manifest(),
        "kind": "sparrow-draft",
        "parameters": n,
        "position_mode": c.position_mode,
        "head_norm": c.head_norm,
        "card": (
            f"A Sparrow draft ({n / 1e6:.3f}M own parameters: fusion FC + one {c.layer_class.rpartition(':')[2]} "
            f"+ head norm) for target `{module.hparams['target']}`, distilled with {module.loss_cfg.mtp_steps} MTP "
            f"steps ({module.loss_cfg.distill} loss, IVSB {'on' if module.draft_options.ivsb else 'off'}). It "
            "shares the target's embeddings and LM head and attends only to text positions.\n\n"
            f"Decode: `vidspec generate --target {module.hparams['target']} --method sparrow --sparrow <this folder> "
            "--video clip.mp4`"
        ),
    }


def _register() -> None:
    from vidspec.draft_training.export import register_exporter

    register_exporter(SparrowDistillModule)(export_sparrow)


_register()
