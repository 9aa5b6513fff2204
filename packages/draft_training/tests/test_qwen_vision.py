"""The grouped Qwen2.5-VL vision attention used in training equals transformers' per-window loop."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from vidspec.draft_training.qwen_vision import GroupedQwenVisionAttention, use_grouped_vision_attention
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testbed.arch import ArchConfig, build_hf_config, hf_model_class
from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS


def _tower(tokenizer, attn="sdpa"):
    arch = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "window_size": 112, "vision_layers": 3})
    config = build_hf_config(arch, tokenizer)
    config._attn_implementation = attn
    torch.manual_seed(0)
    return hf_model_class("qwen2.5-vl")(config).model.visual.float()


def _first_batch(module, tiny_dataset, batch_size: int = 2, **kw) -> dict:
    """The first training batch of the tiny dataset, prepared for ``module`` (SFT or Sparrow)."""
    from vidspec.draft_training.data import VideoTextDataModule

    dm = VideoTextDataModule(str(tiny_dataset), tables=["."], batch_size=batch_size, shuffle=False, **kw)
    dm.attach(module.input_spec())
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def _twins(tiny_dataset, **change) -> tuple[VLMSFTModule, VLMSFTModule]:
    """Two tiny Qwen SFT modules with the same weights: the defaults, and the defaults with ``change``."""
    kw = dict(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["qwen2.5-vl"]), max_frames=4,
              adapter_options=QWEN_OPTIONS)
    torch.manual_seed(0)
    default = VLMSFTModule(**kw)
    torch.manual_seed(0)
    return default, VLMSFTModule(**kw, **change)


@pytest.mark.parametrize("grids", [
    [(2, 8, 8), (1, 8, 8)],            # every window one length (frames smaller than a window): one batched call
    [(2, 20, 24), (1, 16, 30), (1, 8, 8)],  # right and bottom edge windows: several lengths, index-gathered
])
def test_grouped_attention_equals_the_per_window_loop(tiny_dataset, grids):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))
    hf = _tower(tok)
    ours = copy.deepcopy(hf)
    assert use_grouped_vision_attention(ours) == 3
    grid = torch.tensor(grids)
    cfg = hf.config
    per_patch = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
    torch.manual_seed(1)
    pix = torch.randn(int(grid.prod(-1).sum()), per_patch)
    outs, grads = [], []
    for tower in (hf, ours):
        x = pix.clone().requires_grad_(True)
        out = tower(x, grid_thw=grid).pooler_output
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out.detach())
        grads.append((x.grad, tower.blocks[0].attn.qkv.weight.grad, tower.blocks[-1].attn.proj.weight.grad))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_only_sdpa_towers_change(tiny_dataset):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))
    assert use_grouped_vision_attention(_tower(tok, attn="eager")) == 0
    llava = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]))
    assert use_grouped_vision_attention(llava.model) == 0


def test_sft_module_trains_qwen_with_the_grouped_attention(tiny_dataset):
    grouped, loop = _twins(tiny_dataset, grouped_vision_attention=False)
    assert grouped.hparams["grouped_vision_attention"] is True
    assert isinstance(grouped.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    assert not isinstance(loop.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    # a subclass, not a patched method: the module still pickles and copies (DDP spawn, deep copies)
    assert isinstance(pickle.loads(pickle.dumps(grouped.model.model.visual)).blocks[0].attn, GroupedQwenVisionAttention)
    batch = _first_batch(grouped, tiny_dataset, caption_styles=["alpha"])
    (a, _), (b, _) = grouped.loss(batch), loop.loss(batch)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    a.backward()
    assert grouped.model.model.visual.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_sparrow_teacher_uses_the_grouped_attention_with_the_same_features(tiny_dataset):
    from vidspec.decoding.models import load_target
    from vidspec.draft_training.sparrow import SparrowDistillModule

    m = SparrowDistillModule(target="tiny-qwen2.5-vl")
    assert isinstance(m.target.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    batch = _first_batch(m, tiny_dataset, caption_styles=["alpha"])
    grouped = m.target_features(batch)
    m.target = load_target("tiny-qwen2.5-vl", device="cpu", dtype="float32", max_frames=m.target.max_frames)
    m.target.model.eval()
    plain = m.target_features(batch)
    compared = 0
    assert grouped.keys() == plain.keys()
    for key, a in grouped.items():
        b = plain[key]
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            compared += 1
    assert compared >= 2
    # the batched M-RoPE positions (no per-row loop) are transformers' own
    ref, _ = m.target.model.model.get_rope_index(
        batch["input_ids"], mm_token_type_ids=batch["mm_token_type_ids"], video_grid_thw=batch["video_grid_thw"],
        second_per_grid_ts=batch.get("second_per_grid_ts"), attention_mask=batch["attention_mask"])
    assert torch.equal(grouped["positions"], ref) and torch.equal(plain["positions"], ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_grouped_attention_equals_the_loop_on_cuda_in_bf16(tiny_dataset):
    """On CUDA under bf16 autocast (the training precision), the grouped tower's outputs and gradients match."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))
    hf = _tower(tok).cuda()
    ours = copy.deepcopy(hf)
    use_grouped_vision_attention(ours)
    grid = torch.tensor([(4, 8, 8)] * 8 + [(2, 20, 24)], device="cuda")
    cfg = hf.config
    per_patch = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
    pix = torch.randn(int(grid.prod(-1).sum()), per_patch, device="cuda")
    outs, grads = [], []
    for tower in (hf, ours):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = tower(pix, grid_thw=grid).pooler_output.float()
        out.square().mean().backward()
        outs.append(out.detach())
        grads.append(tower.blocks[0].attn.qkv.weight.grad.float())
    torch.testing.assert_close(outs[1], outs[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(grads[1], grads[0], rtol=5e-2, atol=5e-3)


def _qwen_core(tiny_dataset):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))
    arch = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "window_size": 112})
    torch.manual_seed(0)
    return hf_model_class("qwen2.5-vl")(build_hf_config(arch, tok)).model


def test_batched_mrope_positions_equal_transformers_get_rope_index(tiny_dataset):
    """Rows of different video grids, text lengths, frame intervals and padding, and a row without a video."""
    from vidspec.draft_training.qwen_vision import mrope_position_ids

    core = _qwen_core(tiny_dataset)
    vc = core.config.vision_config
    m = vc.spatial_merge_size
    rows = [(3, (2, 4, 4), 0.5), (7, (4, 4, 8), 1.0), (0, None, None), (1, (1, 8, 4), 2.0), (5, (6, 2, 2), 0.25)]
    g = torch.Generator().manual_seed(3)
    seqs, types, grids, spg = [], [], [], []
    for before, grid, sec in rows:
        n = 0 if grid is None else grid[0] * (grid[1] // m) * (grid[2] // m)
        after = int(torch.randint(2, 9, (1,), generator=g))
        seqs.append(torch.randint(10, 50, (before + n + after,), generator=g))
        types.append(torch.tensor([0] * before + [2] * n + [0] * after))
        if grid is not None:
            grids.append(grid)
            spg.append(sec)
    L = max(len(s) for s in seqs) + 2
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    tt = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, (s, t) in enumerate(zip(seqs, types)):
        off = 0 if i % 2 == 0 else L - len(s)  # right padding on even rows, left on odd ones
        ids[i, off:off + len(s)], tt[i, off:off + len(s)], mask[i, off:off + len(s)] = s, t, 1
    grid_thw, sec = torch.tensor(grids), torch.tensor(spg)
    ref_pos, ref_delta = core.get_rope_index(ids, mm_token_type_ids=tt, video_grid_thw=grid_thw,
                                             second_per_grid_ts=sec, attention_mask=mask)
    pos, delta = mrope_position_ids(ids, tt, grid_thw, sec, mask, spatial_merge_size=m,
                                    tokens_per_second=vc.tokens_per_second)
    assert torch.equal(pos, ref_pos)
    assert torch.equal(delta, ref_delta.to(delta.dtype))


def test_sft_loss_and_gradients_equal_with_and_without_batched_positions(tiny_dataset):
    from vidspec.draft_training.qwen_vision import _TOWER_INDICES

    fast, hf = _twins(tiny_dataset, batched_positions=False)
    assert fast.hparams["batched_positions"] is True
    batch = _first_batch(fast, tiny_dataset, batch_size=3)
    _TOWER_INDICES.clear()
    (a, n), (b, nb) = fast.loss(batch), hf.loss(batch)
    assert n == nb and len(_TOWER_INDICES) == 1  # the tower's indices were built once, for this grid
    cached = next(iter(_TOWER_INDICES.values()))["video_window_index"]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    a.backward()
    b.backward()
    for (name, p), q in zip(fast.named_parameters(), hf.parameters()):
        if p.grad is not None or q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    fast.loss(batch)  # the same grid again: read from the table, not rebuilt
    assert len(_TOWER_INDICES) == 1 and next(iter(_TOWER_INDICES.values()))["video_window_index"] is cached
