"""The grouped Qwen2.5-VL vision attention used in training equals transformers' per-window loop."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from vidspec.draft_training.arch import ArchConfig, build_hf_config, hf_model_class
from vidspec.draft_training.qwen_vision import GroupedQwenVisionAttention, use_grouped_vision_attention
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS


def _tower(tokenizer, attn="sdpa"):
    arch = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "window_size": 112, "vision_layers": 3})
    config = build_hf_config(arch, tokenizer)
    config._attn_implementation = attn
    torch.manual_seed(0)
    return hf_model_class("qwen2.5-vl")(config).model.visual.float()


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
    kw = dict(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["qwen2.5-vl"]), max_frames=4,
              adapter_options=QWEN_OPTIONS)
    torch.manual_seed(0)
    grouped = VLMSFTModule(**kw)
    torch.manual_seed(0)
    loop = VLMSFTModule(**kw, grouped_vision_attention=False)
    assert grouped.hparams["grouped_vision_attention"] is True
    assert isinstance(grouped.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    assert not isinstance(loop.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    # a subclass, not a patched method: the module still pickles and copies (DDP spawn, deep copies)
    assert isinstance(pickle.loads(pickle.dumps(grouped.model.model.visual)).blocks[0].attn, GroupedQwenVisionAttention)
    from vidspec.draft_training.data import VideoTextDataModule

    dm = VideoTextDataModule(str(tiny_dataset), tables=["."], batch_size=2, shuffle=False, caption_styles=["alpha"])
    dm.attach(grouped.input_spec())
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    (a, _), (b, _) = grouped.loss(batch), loop.loss(batch)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    a.backward()
    assert grouped.model.model.visual.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_sparrow_teacher_uses_the_grouped_attention_with_the_same_features(tiny_dataset):
    from vidspec.decoding.models import load_target
    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sparrow import SparrowDistillModule

    m = SparrowDistillModule(target="tiny-qwen2.5-vl")
    assert isinstance(m.target.model.model.visual.blocks[0].attn, GroupedQwenVisionAttention)
    dm = VideoTextDataModule(str(tiny_dataset), tables=["."], batch_size=2, shuffle=False, caption_styles=["alpha"])
    dm.attach(m.input_spec())
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
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
