"""Qwen2.5-VL's vision attention for training: every window of a layer in one SDPA call per length.

transformers' sdpa path for ``Qwen2_5_VLVisionAttention`` splits the packed patch sequence at
``cu_seqlens`` and calls attention once per window (once per frame in the full-attention layers).
A training batch of 128 SynthVid videos has 512 frame pairs, so each layer makes 512 small calls
forward and as many backward, and the GPU waits on the launches: a Qwen2.5-VL prototype trained at
~3 steps/s on an H200. Windows of one length are independent problems of one shape,
so :func:`use_grouped_vision_attention` makes each attention module a subclass whose forward stacks
them into a batch (``vidspec.decoding.fast.vision.grouped_attention``, the decoding engine's fast
tower does the same at inference). The weights, the RoPE and the projection are the module's own;
outputs and gradients equal HF's to float rounding (tested), so a checkpoint trained either way is
the same model.
"""

from __future__ import annotations

import torch
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VLVisionAttention,
    apply_rotary_pos_emb_vision,
)

from vidspec.decoding.fast.vision import grouped_attention, plan_groups

_PLANS: dict[tuple, list] = {}


def _groups(cu_seqlens: torch.Tensor):
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # one host read, as HF's own split makes
    key = (tuple(lengths), str(cu_seqlens.device))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 16:  # a batch's windowed and full-attention layers share two plans
            _PLANS.clear()
        plan = _PLANS[key] = plan_groups(lengths, cu_seqlens.device)
    return plan


class GroupedQwenVisionAttention(Qwen2_5_VLVisionAttention):
    """``Qwen2_5_VLVisionAttention`` whose windows of one length are attended in one SDPA call.

    Same weights and state dict as its parent; modules become this class in place
    (:func:`use_grouped_vision_attention`), so the model still copies, pickles and saves as before.
    """

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                max_seqlen: int | None = None, **kwargs) -> torch.Tensor:
        n = hidden_states.shape[0]
        q, k, v = self.qkv(hidden_states).reshape(n, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
        out = grouped_attention(q.contiguous(), k.contiguous(), v.contiguous(), _groups(cu_seqlens), self.scaling)
        return self.proj(out.reshape(n, -1))


def use_grouped_vision_attention(model: torch.nn.Module) -> int:
    """Make every Qwen2.5-VL vision attention module of ``model`` a :class:`GroupedQwenVisionAttention`.

    Only modules running transformers' sdpa path are changed (flash-attention's varlen kernel
    already makes one call, and eager is kept for debugging).

    Returns:
        The number of modules changed (0 for a model without a Qwen2.5-VL tower).
    """
    changed = 0
    for module in model.modules():
        if type(module) is Qwen2_5_VLVisionAttention and module.config._attn_implementation == "sdpa":
            module.__class__ = GroupedQwenVisionAttention
            changed += 1
    return changed


# ---- per-step host work of a Qwen2.5-VL training forward ------------------------------------------
# Without position ids, Qwen2_5_VLModel.forward calls get_rope_index, a Python loop over the batch's rows
# with a host read per row (7,302 tensor ops and ~1,150 device-to-host waits for a batch of 128 SynthVid
# clips, counted on CPU); the vision tower rebuilds its rotary positions and window order per video
# (~4,100 ops, 129 host reads). On the H200 a release-size Qwen target trained at 278 ms a step against
# ~133 ms for the LLaVA-OV one of the same size. The two helpers below give the same
# tensors without the loops.

def mrope_position_ids(input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, video_grid_thw: torch.Tensor,
                       second_per_grid_ts: torch.Tensor | None, attention_mask: torch.Tensor | None, *,
                       spatial_merge_size: int, tokens_per_second: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2.5-VL's 3-D RoPE positions ``(3, B, L)`` and deltas ``(B, 1)`` for a batch, in batched ops.

    Equal to ``Qwen2_5_VLModel.get_rope_index`` (tested) for the batches the data module makes: at most one
    video per row, as one contiguous run of video tokens, and no images. Text before the video counts up from
    0; the video's tokens take ``start + t * interval`` (temporal), ``start + row`` and ``start + column``
    (merged grid); text after it continues from ``start + max(rows, columns)``; padding stays at 0. The
    ``v``-th row that holds a video takes ``video_grid_thw[v]``. No host reads, so the step does not wait.
    """
    B, L = input_ids.shape
    dev = input_ids.device
    mask = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    idx = mask.long().cumsum(1) - 1                              # position among the row's real tokens
    video = (mm_token_type_ids == 2) & mask
    has = video.any(1)
    start = torch.where(video, idx, torch.full_like(idx, L)).amin(1)   # first video token (L: none)
    nv = video_grid_thw.shape[0]
    which = (has.long().cumsum(0) - 1).clamp(0, max(nv - 1, 0))       # the grid of each row's video
    grid = video_grid_thw.to(dev)[which] * has[:, None] if nv else torch.zeros(B, 3, dtype=torch.long, device=dev)
    if second_per_grid_ts is not None and nv:
        spg = second_per_grid_ts.to(dev, torch.float32)[which]
    else:
        spg = torch.ones(B, dtype=torch.float32, device=dev)
    t, h, w = grid[:, 0], (grid[:, 1] // spatial_merge_size).clamp_min(1), (grid[:, 2] // spatial_merge_size).clamp_min(1)
    n = (t * h * w)[:, None]                                      # video tokens of each row (0: none)
    s = start[:, None]
    k = idx - s                                                   # offset from the video's first token
    kk = k.clamp_min(0)
    inside = (k >= 0) & (k < n)
    interval = (tokens_per_second * spg)[:, None]
    t_pos = s + ((kk // (h * w)[:, None]).to(interval.dtype) * interval).long()
    h_pos = s + (kk // w[:, None]) % h[:, None]
    w_pos = s + kk % w[:, None]
    text = torch.where(k >= n, s + torch.maximum(h, w)[:, None] + (k - n), idx)
    pos = torch.stack([torch.where(inside, t_pos, text), torch.where(inside, h_pos, text),
                       torch.where(inside, w_pos, text)])
    pos = torch.where(mask[None], pos, torch.zeros_like(pos))
    top = torch.where(mask[None], pos, torch.full_like(pos, -1)).amax(dim=(0, 2))
    deltas = (top + 1 - mask.sum(1))[:, None]
    return pos.to(input_ids.dtype), deltas


_TOWER_INDICES: dict[tuple, dict] = {}


def tower_indices(visual: torch.nn.Module, grid_thw: torch.Tensor) -> dict:
    """The index tensors Qwen2.5-VL's vision forward builds per video, computed once per distinct grid.

    Returns ``video_``-prefixed keyword arguments for ``Qwen2_5_VLModel.forward`` (transformers passes them
    to the tower as precomputed ``position_ids``, ``cu_seqlens``, ``window_index``, ``cu_window_seqlens``):
    the same tensors the tower would build, so its output is unchanged (tested). One host read per call
    (the key); a SynthVid batch has one grid per frame count, so the table stays small.
    """
    from transformers.utils.generic import get_max_seqlen
    from transformers.vision_utils import (
        get_vision_attention_seqlens,
        get_vision_position_ids,
        get_vision_window_index,
    )

    # what the tensors depend on: the grid, the device, the tower's geometry and its attention kernel
    key = (tuple(grid_thw.flatten().tolist()), str(grid_thw.device), visual.spatial_merge_size, visual.window_size,
           visual.patch_size, visual.config._attn_implementation)
    hit = _TOWER_INDICES.get(key)
    if hit is None:
        if len(_TOWER_INDICES) >= 16:
            _TOWER_INDICES.clear()
        cfg = visual.config
        cu, mx = get_vision_attention_seqlens(grid_thw, cfg)
        order, cu_win = get_vision_window_index(grid_thw, spatial_merge_size=visual.spatial_merge_size,
                                                window_size=visual.window_size, patch_size=visual.patch_size)
        hit = {"video_position_ids": get_vision_position_ids(grid_thw, visual.spatial_merge_size),
               "video_cu_seqlens": cu, "video_window_index": order.to(grid_thw.device),
               "video_cu_window_seqlens": cu_win}
        mx_win = get_max_seqlen(cu_win, cfg, kwargs={}, kwarg_name="max_window_seqlen")
        if mx is not None:  # only flash attention asks for them
            hit["video_max_seqlen"] = mx
        if mx_win is not None:
            hit["video_max_window_seqlen"] = mx_win
        _TOWER_INDICES[key] = hit
    return dict(hit)  # a copy: the tower pops what it reads


def qwen_positions(core: torch.nn.Module, batch: dict) -> torch.Tensor | None:
    """:func:`mrope_position_ids` ``(3, B, L)`` of a training batch for ``Qwen2_5_VLModel`` ``core`` (its vision
    config gives the merge and the time scale); None for a batch without videos (transformers' own path)."""
    grid = batch.get("video_grid_thw")
    if grid is None or grid.shape[0] == 0 or "mm_token_type_ids" not in batch:
        return None
    vc = core.config.vision_config
    return mrope_position_ids(batch["input_ids"], batch["mm_token_type_ids"], grid, batch.get("second_per_grid_ts"),
                              batch.get("attention_mask"), spatial_merge_size=vc.spatial_merge_size,
                              tokens_per_second=vc.tokens_per_second)[0]


def qwen_forward_kwargs(core: torch.nn.Module, batch: dict) -> dict:
    """``position_ids`` and the tower's indices for ``Qwen2_5_VLModel.forward`` (``core``) on a training batch,
    so neither runs its per-row loop; ``{}`` for a batch without videos (transformers' own path)."""
    pos = qwen_positions(core, batch)
    if pos is None:
        return {}
    return {"position_ids": pos, **tower_indices(core.visual, batch["video_grid_thw"])}
