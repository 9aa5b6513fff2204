"""Qwen2.5-VL's vision tower with all attention windows of a layer in a few fused SDPA calls.

HF's sdpa path splits the packed sequence at ``cu_seqlens`` and runs one attention call per
window (per frame in the full-attention layers): ~1,600 windows x 28 windowed layers for a
25k-token video, which makes HF's tower slow (3.23 s for a 25k-token video at the 7B shape on an
H200, against 0.34 s for this one with its compiled pieces; docs/results.md). Windows of
equal length are independent attention problems of one shape, so here they are stacked into a
batch: one SDPA call per distinct window length (a video has at most four: full, right edge,
bottom edge, corner; one when the frame is a multiple of the window), no masks, flash-eligible.
The plan (which tokens form which batch) is computed once per ``grid_thw`` and shared by all
layers.

Around the attention, each block is two functions of the block's weights (norm + q/k/v + RoPE;
output projection + residual + norm + MLP + residual), written with the HF modules' numerics
(RMSNorm and RoPE in float32). On CUDA they are compiled once with ``torch.compile(dynamic=True)``,
so one set of fused kernels serves every block and every video size: without fusion the float32
RoPE and norms move several GB per layer at 25k visual tokens. The merger calls the HF module, and
the patch embedding (a Conv3d whose kernel equals its stride) runs as the equivalent matrix
product over a view of the conv weight. Outputs equal ``visual(pixels, grid_thw).pooler_output``
to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vidspec.decoding.fast.lm import _has_triton, rms_norm, rotate_half


@dataclass(frozen=True)
class AttentionGroup:
    """Segments of one length, attended as a batch.

    Attributes:
        index: ``(n_segments, length) int64`` token indices of each segment, or None when the
            group is the whole sequence cut into equal consecutive pieces (then a reshape suffices).
        length: tokens per segment.
    """

    index: torch.Tensor | None
    length: int


def plan_groups(lengths: list[int], device: torch.device) -> list[AttentionGroup]:
    """Group consecutive segments by length.

    Args:
        lengths: segment lengths in sequence order (they tile the sequence).

    Returns:
        One :class:`AttentionGroup` per distinct positive length.
    """
    lengths = [n for n in lengths if n > 0]
    if len(set(lengths)) == 1:
        return [AttentionGroup(None, lengths[0])]
    starts = torch.tensor([0, *lengths[:-1]], dtype=torch.long).cumsum(0)
    lens = torch.tensor(lengths, dtype=torch.long)
    groups = []
    for n in sorted(set(lengths)):
        s = starts[lens == n]
        groups.append(AttentionGroup((s[:, None] + torch.arange(n)[None, :]).to(device), n))
    return groups


def window_plan(grid_thw: list[tuple[int, int, int]], merge: int, window_units: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """Qwen2.5-VL's window partition of merged units.

    Merged units (``merge x merge`` patches) of each frame are cut into windows of
    ``window_units x window_units`` units (smaller at the right/bottom edges). Units are reordered
    window by window (frame, window row, window column, row, column), as the HF model does.

    Args:
        grid_thw: per video, ``(t, h, w)`` in patches.
        merge: spatial merge size.
        window_units: window side in merged units (``window_size // merge // patch_size``).

    Returns:
        ``window_index`` ``(units,) int64`` (new order -> original unit), window lengths in
        patches (sequence order), and frame lengths in patches (for full-attention layers).
    """
    order, win_lengths, frame_lengths = [], [], []
    offset = 0
    ws = window_units
    for t, h, w in grid_thw:
        gh, gw = h // merge, w // merge
        nwh, nww = -(-gh // ws), -(-gw // ws)
        tt, yy, xx = torch.meshgrid(torch.arange(t), torch.arange(gh), torch.arange(gw), indexing="ij")
        win = (tt * nwh + yy // ws) * nww + xx // ws
        key = win * (ws * ws) + (yy % ws) * ws + (xx % ws)
        order.append(torch.argsort(key.flatten()) + offset)
        counts = torch.bincount(win.flatten(), minlength=t * nwh * nww)
        win_lengths += (counts * merge * merge).tolist()
        frame_lengths += [h * w] * t
        offset += t * gh * gw
    return torch.cat(order), win_lengths, frame_lengths


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: list[AttentionGroup],
                      scale: float) -> torch.Tensor:
    """Block-diagonal (per-segment, bidirectional) attention, one SDPA call per group.

    Args:
        q, k, v: ``(N, H, D)``.

    Returns:
        ``(N, H, D)``.
    """
    n, h, d = q.shape
    if len(groups) == 1 and groups[0].index is None:
        s = groups[0].length

        def seg(x):
            return x.view(n // s, s, h, d).transpose(1, 2)

        o = F.scaled_dot_product_attention(seg(q), seg(k), seg(v), scale=scale)
        return o.transpose(1, 2).reshape(n, h, d)
    out = torch.empty_like(q)
    for g in groups:
        idx = g.index.flatten()
        b = g.index.shape[0]

        def seg(x, idx=idx, b=b, s=g.length):
            return x.index_select(0, idx).view(b, s, h, d).transpose(1, 2)

        o = F.scaled_dot_product_attention(seg(q), seg(k), seg(v), scale=scale)
        out.index_copy_(0, idx, o.transpose(1, 2).reshape(-1, h, d))
    return out


def block_pre(x: torch.Tensor, norm_w: torch.Tensor, eps: float, qkv_w: torch.Tensor, qkv_b: torch.Tensor | None,
              cos: torch.Tensor, sin: torch.Tensor, heads: int, head_dim: int):
    """A vision block up to the attention: RMSNorm, fused q/k/v projection, 2-D RoPE on q and k (float32).

    Returns:
        q, k, v: ``(N, heads, head_dim)`` in the model dtype.
    """
    n = x.shape[0]
    qkv = F.linear(rms_norm(x, norm_w, eps), qkv_w, qkv_b).view(n, 3, heads, head_dim)
    q, k, v = qkv.unbind(1)
    dt = q.dtype
    qf, kf = q.float(), k.float()
    return (qf * cos + rotate_half(qf) * sin).to(dt), (kf * cos + rotate_half(kf) * sin).to(dt), v


def block_post(x: torch.Tensor, o: torch.Tensor, proj_w, proj_b, norm_w, eps: float, gate_w, gate_b, up_w, up_b,
               down_w, down_b) -> torch.Tensor:
    """A vision block after the attention: output projection + residual, RMSNorm, SwiGLU MLP + residual."""
    x = x + F.linear(o, proj_w, proj_b)
    h = rms_norm(x, norm_w, eps)
    return x + F.linear(F.silu(F.linear(h, gate_w, gate_b)) * F.linear(h, up_w, up_b), down_w, down_b)


class FastQwenVision:
    """Fast forward of a ``Qwen2_5_VisionTransformerPretrainedModel`` (uses its weights in place).

    Args:
        visual: ``model.model.visual`` of a Qwen2.5-VL model.
        compile: fuse each block's pieces with ``torch.compile`` (default: on CUDA when Triton is
            importable). Off: the same functions run eagerly (the CPU reference).
    """

    def __init__(self, visual, compile: bool | None = None):
        self.visual = visual
        cfg = visual.config
        act = getattr(cfg, "hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise NotImplementedError(f"fast vision path supports SiLU MLPs, got {act!r}")
        on_cuda = visual.patch_embed.proj.weight.device.type == "cuda"
        self.compiled = bool((on_cuda and _has_triton()) if compile is None else compile)
        if self.compiled:
            from vidspec.decoding.fast.compile_cache import use_compile_cache

            use_compile_cache()
            self._pre = torch.compile(block_pre, dynamic=True)
            self._post = torch.compile(block_post, dynamic=True)
        else:
            self._pre, self._post = block_pre, block_post
        self.merge = cfg.spatial_merge_size
        self.patch = cfg.patch_size
        self.window_units = cfg.window_size // self.merge // self.patch
        self.full_layers = set(cfg.fullatt_block_indexes)
        blk = visual.blocks[0].attn
        self.heads = blk.num_heads
        self.head_dim = blk.head_dim
        self.scale = float(getattr(blk, "scaling", self.head_dim ** -0.5))
        self.inv_freq = visual.rotary_pos_emb.inv_freq
        self._plans: dict[tuple, tuple] = {}

    def _plan(self, grid: list[tuple[int, int, int]], device: torch.device):
        key = (tuple(grid), str(device))
        if key not in self._plans:
            window_index, win_lengths, frame_lengths = window_plan(grid, self.merge, self.window_units)
            self._plans[key] = (window_index.to(device), plan_groups(win_lengths, device),
                                plan_groups(frame_lengths, device))
        return self._plans[key]

    def _rotary(self, grid: list[tuple[int, int, int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, head_dim) float32`` cos/sin of the 2-D (row, column) patch positions, in patch order."""
        m = self.merge
        rows = []
        for t, h, w in grid:
            hp = torch.arange(h)[:, None].expand(h, w).reshape(h // m, m, w // m, m).transpose(1, 2).flatten()
            wp = torch.arange(w)[None, :].expand(h, w).reshape(h // m, m, w // m, m).transpose(1, 2).flatten()
            rows.append(torch.stack([hp, wp], dim=-1).repeat(t, 1))
        pos = torch.cat(rows).to(device)
        freqs = pos[..., None].float() * self.inv_freq.to(device, torch.float32)  # (N, 2, D/4)
        f = torch.cat([freqs[:, 0], freqs[:, 1]], dim=-1)
        emb = torch.cat([f, f], dim=-1)
        return emb.cos(), emb.sin()

    @torch.inference_mode()
    def __call__(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        """Vision features for the LM.

        Args:
            pixel_values: ``(N, 3 * temporal_patch * patch**2)`` flattened patches (the adapter's
                ``patchify`` layout).
            grid_thw: ``(videos, 3) int64`` patch grid per video.

        Returns:
            ``(N / merge**2, out_hidden) `` merged features, in the original unit order.
        """
        vis = self.visual
        grid = [tuple(int(x) for x in row) for row in grid_thw.tolist()]
        device = vis.patch_embed.proj.weight.device
        window_index, win_groups, full_groups = self._plan(grid, device)
        w = vis.patch_embed.proj.weight
        x = F.linear(pixel_values.to(device, w.dtype).reshape(pixel_values.shape[0], -1), w.view(w.shape[0], -1))
        n = x.shape[0]
        unit = self.merge * self.merge

        def permute(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(n // unit, unit, -1)[window_index].reshape(n, -1)

        x = permute(x)
        cos, sin = self._rotary(grid, device)
        cos, sin = permute(cos)[:, None, :], permute(sin)[:, None, :]
        for i, blk in enumerate(vis.blocks):
            groups = full_groups if i in self.full_layers else win_groups
            a, m = blk.attn, blk.mlp
            q, k, v = self._pre(x, blk.norm1.weight, blk.norm1.variance_epsilon, a.qkv.weight, a.qkv.bias, cos, sin,
                                self.heads, self.head_dim)
            o = grouped_attention(q, k, v, groups, self.scale)
            x = self._post(x, o.reshape(n, -1), a.proj.weight, a.proj.bias, blk.norm2.weight,
                           blk.norm2.variance_epsilon, m.gate_proj.weight, m.gate_proj.bias, m.up_proj.weight,
                           m.up_proj.bias, m.down_proj.weight, m.down_proj.bias)
        merged = vis.merger(x)
        return merged[torch.argsort(window_index)]
