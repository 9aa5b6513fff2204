"""Vision pretraining stage: a tower trained on attribute labels loads into the SFT model's tower."""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testbed.arch import ArchConfig
from vidspec.draft_training.testbed.vision_pretrain import (
    TowerProbe,
    load_tower_into,
    save_tower,
    train_tower,
)
from vidspec.draft_training.testing import ARCH


def _data(n: int, size: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
    last = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
    # Labels that the pixels decide: the brightest channel of the first / last frame.
    ys = torch.stack([first.float().mean((2, 3)).argmax(1), first.float().mean((2, 3)).argmax(1),
                      last.float().mean((2, 3)).argmax(1)], 1)
    return first, last, ys


def test_tower_learns_and_loads_into_the_sft_model(tiny_dataset, tmp_path):
    arch = ArchConfig(**ARCH["llava-ov"])
    train, test = _data(64, arch.image_size, 0), _data(32, arch.image_size, 1)
    torch.set_num_threads(1)
    model, curve = train_tower(arch, steps=30, lr=3e-3, batch=16, warmup=3, device="cpu", train=train, test=test,
                               classes=(3, 3, 3), every=30, log=lambda s: None)
    assert [r["step"] for r in curve] == [30] and all(0 <= curve[-1][k] <= 1 for k in ("shape", "colour", "motion"))
    save_tower(model, arch, tmp_path / "tower", {"final": curve[-1]})
    sft = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4,
                       vision_init=str(tmp_path / "tower"))
    got = sft.model.model.vision_tower.state_dict()
    for k, v in model.tower.state_dict().items():
        assert torch.equal(got[k], v), k
    fresh = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4)
    assert not all(torch.equal(fresh.model.model.vision_tower.state_dict()[k], v)
                   for k, v in model.tower.state_dict().items())
    assert sft.hparams["vision_init"] == str(tmp_path / "tower")


def test_tower_of_other_sizes_is_refused(tiny_dataset, tmp_path):
    arch = ArchConfig(**ARCH["llava-ov"])
    other = ArchConfig(**{**ARCH["llava-ov"], "vision_hidden_size": 2 * arch.vision_hidden_size})
    save_tower(TowerProbe(other, (3, 3, 3)), other, tmp_path / "tower")
    with pytest.raises(ConfigError, match="does not fit"):
        VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4, vision_init=str(tmp_path / "tower"))
    with pytest.raises(ConfigError, match="no tower.safetensors"):
        VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4, vision_init=str(tmp_path / "none"))
    fake = tmp_path / "m"
    fake.mkdir()
    with pytest.raises(ConfigError):
        load_tower_into(torch.nn.Linear(2, 2), fake)


@pytest.mark.parametrize("family", ["llava-ov", "qwen2.5-vl"])
def test_freeze_vision_keeps_the_tower_and_trains_the_rest(tiny_dataset, tmp_path, family):
    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.testing import QWEN_OPTIONS

    arch = ArchConfig(**ARCH[family])
    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4, freeze_vision=True,
                     adapter_options=QWEN_OPTIONS if family == "qwen2.5-vl" else None)
    assert m.hparams["freeze_vision"] is True
    dm = VideoTextDataModule(str(tiny_dataset), tables=["."], batch_size=2, shuffle=False)
    dm.attach(m.input_spec())
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    # the encoder (SigLIP; Qwen's blocks and patch embedding) stays, the projector (LLaVA-OV's multi_modal_projector;
    # Qwen's merger, inside its tower) trains
    if family == "llava-ov":
        encoder, projector = m.model.model.vision_tower, m.model.model.multi_modal_projector
    else:
        encoder, projector = m.model.model.visual.blocks, m.model.model.visual.merger
    tower0 = {k: v.clone() for k, v in encoder.state_dict().items()}
    proj0 = {k: v.clone() for k, v in projector.state_dict().items()}
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    loss, _ = m.loss(batch)
    loss.backward()
    opt.step()
    assert all(torch.equal(v, encoder.state_dict()[k]) for k, v in tower0.items())
    assert not all(torch.equal(v, projector.state_dict()[k]) for k, v in proj0.items())


def test_batched_patchify_equals_the_decoding_adapters():
    import numpy as np

    from vidspec.decoding.models.qwen2_5_vl import patchify
    from vidspec.draft_training.testbed.vision_pretrain import patchify_batch

    rng = np.random.default_rng(0)
    clips = rng.integers(0, 256, (3, 4, 32, 48, 3), dtype=np.uint8)
    ours = patchify_batch(torch.from_numpy(clips), patch=8)
    theirs = torch.cat([patchify(c, 8, 2, 2)[0] for c in clips])
    torch.testing.assert_close(ours, theirs)


def test_qwen_tower_learns_and_loads_into_the_sft_model(tiny_dataset, tmp_path):
    from vidspec.draft_training.testbed.vision_pretrain import QwenTowerProbe

    arch = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "image_size": 32})

    def tinted(n, seed):  # frame 0 tinted by the shape/colour label, the last frame by the motion label
        g = torch.Generator().manual_seed(seed)
        ys = torch.randint(0, 3, (n, 3), generator=g)
        ys[:, 1] = ys[:, 0]

        def frames(label):
            x = torch.full((n, 3, 32, 32), 60.0)
            x[torch.arange(n), label] = 180.0
            return (x + torch.randint(-40, 40, x.shape, generator=g)).clamp(0, 255).to(torch.uint8)

        return frames(ys[:, 0]), frames(ys[:, 2]), ys

    train, test = tinted(64, 0), tinted(32, 1)
    torch.set_num_threads(1)
    model, curve = train_tower(arch, steps=30, lr=3e-3, batch=16, warmup=3, device="cpu", train=train, test=test,
                               classes=(3, 3, 3), every=30, log=lambda s: None)
    assert isinstance(model, QwenTowerProbe)
    # shape/colour come from the first frame pair and motion from the last: 30 steps learn both
    assert curve[-1]["shape"] > 0.9 and curve[-1]["motion"] > 0.9
    save_tower(model, arch, tmp_path / "tower", {"final": curve[-1]})
    from vidspec.draft_training.testing import QWEN_OPTIONS

    kw = dict(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4, adapter_options=QWEN_OPTIONS)
    sft = VLMSFTModule(**kw, vision_init=str(tmp_path / "tower"), freeze_vision=True)
    got = sft.model.model.visual.state_dict()
    assert set(got) == set(model.tower.state_dict())  # the merger too
    for k, v in model.tower.state_dict().items():
        assert torch.equal(got[k], v), k
    # frozen but for the merger, Qwen2.5-VL's projector (LLaVA-OV's projector sits outside its tower and trains too)
    trainable = {n for n, p in sft.model.model.visual.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("merger.") for n in trainable)
    assert {n for n, _ in sft.model.model.visual.merger.named_parameters()} == {n[len("merger."):] for n in trainable}
    # a tower whose merger projects into another width does not load
    wide = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "image_size": 32, "hidden_size": 128})
    with pytest.raises(ConfigError, match="does not fit"):
        VLMSFTModule(**{**kw, "arch": wide}, vision_init=str(tmp_path / "tower"))


def test_qwen_vision_init_std_sets_the_towers_initial_weights(tiny_dataset):
    """transformers initialises the Qwen2.5-VL tower with std 0.02 whatever its width; arch.vision_init_std sets it,
    in the pretraining probe and in the full model alike, and is refused where it would do nothing (SigLIP)."""
    from transformers import AutoTokenizer

    from vidspec.draft_training.testbed.arch import build_hf_config, hf_model_class
    from vidspec.draft_training.testbed.vision_pretrain import QwenTowerProbe

    def qkv_std(tower):
        return float(torch.cat([b.attn.qkv.weight.detach().flatten() for b in tower.blocks]).std())

    base = dict(ARCH["qwen2.5-vl"], vision_hidden_size=64, vision_heads=2)
    torch.manual_seed(0)
    assert qkv_std(QwenTowerProbe(ArchConfig(**base), (6, 10, 5)).tower) == pytest.approx(0.02, rel=0.1)
    wide = ArchConfig(**base, vision_init_std=64 ** -0.5)
    assert qkv_std(QwenTowerProbe(wide, (6, 10, 5)).tower) == pytest.approx(0.125, rel=0.1)
    model = hf_model_class("qwen2.5-vl")(build_hf_config(wide, AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))))
    assert qkv_std(model.model.visual) == pytest.approx(0.125, rel=0.1)
    assert float(model.model.language_model.layers[0].self_attn.q_proj.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
    with pytest.raises(ConfigError, match="vision_init_std"):
        ArchConfig(**ARCH["llava-ov"], vision_init_std=0.1)
    with pytest.raises(ConfigError, match="vision_init_std"):
        ArchConfig(**base, vision_init_std=0.0)


def test_warm_start_keeps_a_qwen_tower_for_another_width(tiny_dataset, tmp_path):
    """A Qwen2.5-VL tower pretrained for one language-model width starts a tower for another: every tensor but the
    merger's last projection is copied, from a saved tower or from an exported target's weights."""
    from vidspec.draft_training.testbed.arch import build_hf_config, hf_model_class
    from vidspec.draft_training.testbed.vision_pretrain import QwenTowerProbe, warm_start_tower

    base = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "image_size": 32})
    torch.manual_seed(1)
    trained = QwenTowerProbe(base, (3, 3, 3))
    save_tower(trained, base, tmp_path / "tower")
    wide = ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8, "image_size": 32, "hidden_size": 2 * base.hidden_size})
    torch.manual_seed(2)
    probe = QwenTowerProbe(wide, (3, 3, 3))
    before = {k: v.clone() for k, v in probe.tower.state_dict().items()}
    fresh = warm_start_tower(probe.tower, tmp_path / "tower")
    assert fresh == ["merger.mlp.2.bias", "merger.mlp.2.weight"]
    got, src = probe.tower.state_dict(), trained.tower.state_dict()
    for k in got:
        assert torch.equal(got[k], before[k] if k in fresh else src[k]), k
    # from an exported target: its tower's tensors, found under the model's prefix
    from transformers import AutoTokenizer

    model = hf_model_class("qwen2.5-vl")(build_hf_config(base, AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))))
    model.save_pretrained(tmp_path / "target")
    again = QwenTowerProbe(wide, (3, 3, 3))
    assert warm_start_tower(again.tower, tmp_path / "target") == fresh
    for k, v in model.model.visual.state_dict().items():
        if k not in fresh:
            assert torch.equal(again.tower.state_dict()[k], v), k
    # another family shares nothing; no tower at all is named
    with pytest.raises(ConfigError, match="shares no tensor"):
        warm_start_tower(TowerProbe(ArchConfig(**ARCH["llava-ov"]), (3, 3, 3)).tower, tmp_path / "tower")
    with pytest.raises(ConfigError, match="no tower.safetensors"):
        warm_start_tower(again.tower, tmp_path / "none")


def test_tower_pretrain_command_reads_scene_files(tmp_path):
    from safetensors.torch import save_file

    from vidspec.decoding.cli import main as vidspec
    from vidspec.draft_training.testbed.vision_pretrain import TOWER_FILE, load_scenes

    arch = ArchConfig(**ARCH["llava-ov"])
    for name, seed in (("train", 0), ("test", 1)):
        first, last, ys = _data(16, arch.image_size, seed)
        save_file({"first": first, "last": last, "labels": ys}, str(tmp_path / f"{name}.safetensors"),
                  metadata={"classes": "3,3,3"})
    (first, _, ys), classes = load_scenes(tmp_path / "train.safetensors")
    assert first.shape == (16, 3, arch.image_size, arch.image_size) and ys.shape == (16, 3) and classes == (3, 3, 3)
    torch.set_num_threads(1)
    assert vidspec(["tower-pretrain", "--train", str(tmp_path / "train.safetensors"), "--test",
                    str(tmp_path / "test.safetensors"), "--out", str(tmp_path / "tower"), "--vision-hidden-size",
                    str(arch.vision_hidden_size), "--vision-layers", str(arch.vision_layers), "--vision-heads",
                    str(arch.vision_heads), "--patch-size", str(arch.patch_size), "--steps", "2", "--batch", "4",
                    "--warmup", "1", "--device", "cpu"]) == 0
    assert (tmp_path / "tower" / TOWER_FILE).is_file()
    save_file({"first": first}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ConfigError, match="not a scene file"):
        load_scenes(tmp_path / "bad.safetensors")
    with pytest.raises(ConfigError, match="no scene file"):
        load_scenes(tmp_path / "none.safetensors")
