"""Qwen2.5-VL's vision attention for training: every window of a layer in one SDPA call per length.

transformers' sdpa path for ``Qwen2_5_VLVisionAttention`` splits the packed patch sequence at
``cu_seqlens`` and calls attention once per window (once per frame in the full-attention layers).
A training batch of 128 SynthVid videos has 512 frame pairs, so each layer makes 512 small calls
forward and as many backward, and the GPU waits on the launches: issue 4 measured a Qwen2.5-VL
prototype at ~3 steps/s on the H200. Windows of one length are independent problems of one shape,
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
