"""Length augmentation of VideoTextDataModule: frame_repeat, position_stretch, their seeding and errors."""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.arch import ArchConfig
from vidspec.draft_training.data import (
    LengthAugmentSampler,
    ResumableSampler,
    VideoTextDataModule,
    stretched_positions,
)
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS

FRAMES = 4  # frames per tiny clip (max_frames of the tiny module)
TPF = 4  # LLaVA-OV tokens per frame of the tiny tower: (56 / 14 / 2)^2


@pytest.fixture(scope="module")
def llava(tiny_dataset):
    torch.manual_seed(0)
    return VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]),
                        max_frames=FRAMES)


def _dm(dataset, module, **kw):
    dm = VideoTextDataModule(str(dataset), **{"tables": [".", "mcq"], "batch_size": 3, "shuffle": True, "seed": 5,
                                              **kw})
    dm.attach(module.input_spec())
    dm.setup("fit")
    return dm


def _video_tokens(batch, module) -> list[int]:
    vid = module.tokenizer.convert_tokens_to_ids("<video>")
    return (batch["input_ids"] == vid).sum(dim=1).tolist()


def test_off_by_default(tiny_dataset, llava):
    dm = _dm(tiny_dataset, llava)
    loader = dm.train_dataloader()
    assert type(loader.sampler) is ResumableSampler
    b = next(iter(loader))
    assert "position_ids" not in b
    assert b["pixel_values_videos"].shape[1] == FRAMES
    assert _video_tokens(b, llava) == [FRAMES * TPF + 1] * 3


def test_frame_repeat_gives_more_frames_and_visual_tokens(tiny_dataset, llava):
    dm = _dm(tiny_dataset, llava, frame_repeat=[3])
    batches = list(dm.train_dataloader())
    assert batches
    for b in batches:
        n = b["input_ids"].shape[0]
        assert b["pixel_values_videos"].shape[:2] == (n, 3 * FRAMES)
        assert _video_tokens(b, llava) == [3 * FRAMES * TPF + 1] * n
        # Each frame is repeated in place: f0 f0 f0 f1 f1 f1 ...
        pix = b["pixel_values_videos"][0]
        assert torch.equal(pix[0], pix[2]) and not torch.equal(pix[0], pix[3])
    # Validation is unaffected unless asked.
    assert next(iter(dm.val_dataloader()))["pixel_values_videos"].shape[1] == FRAMES
    dm_val = _dm(tiny_dataset, llava, frame_repeat=[2], augment_val=True)
    assert next(iter(dm_val.val_dataloader()))["pixel_values_videos"].shape[1] == 2 * FRAMES


def test_repeat_draws_are_per_batch_and_deterministic(tiny_dataset, llava):
    dm = _dm(tiny_dataset, llava, frame_repeat=[1, 2, 4])
    data = dm.train_set

    def draws(epoch, skip=0, seed=5):
        s = LengthAugmentSampler(data, frame_repeat=[1, 2, 4], batch_size=3, num_replicas=1, rank=0, shuffle=True,
                                 seed=seed, epoch=epoch, skip=skip)
        return list(s)

    full = draws(0)
    assert full == draws(0)  # same seed and epoch: same order and factors
    assert [i for i, _, _ in full] == list(ResumableSampler(data, num_replicas=1, rank=0, shuffle=True, seed=5))
    for start in range(0, len(full), 3):  # one factor per batch
        assert len({r for _, _, r in full[start:start + 3]}) == 1
    assert draws(0, skip=6) == full[6:]  # a resumed run sees the same batches and factors
    many = [r for e in range(6) for _, _, r in draws(e)]
    assert set(many) == {1, 2, 4}  # every factor gets drawn
    with pytest.raises(ConfigError, match="whole number of batches"):
        draws(0, skip=4)
    # The loader's batches match the sampler's factors.
    loader = dm.train_dataloader()
    factors = [r for _, _, r in full[::3]]
    assert [b["pixel_values_videos"].shape[1] // FRAMES for b in loader] == factors


def test_position_stretch(tiny_dataset, llava):
    vid = llava.tokenizer.convert_tokens_to_ids("<video>")
    ids = torch.tensor([1, 2] + [vid] * (3 * TPF + 1) + [5, 6])
    assert torch.equal(stretched_positions(ids, vid, TPF, 3, 1), torch.arange(len(ids)))
    pos = stretched_positions(ids, vid, TPF, 3, 4)
    # Frames keep their inner layout and start 4 * TPF apart; the text after moves 2 * 3 * TPF on.
    assert pos[2:2 + TPF].tolist() == list(range(2, 2 + TPF))
    assert pos[2 + TPF].item() == 2 + 4 * TPF and pos[2 + 2 * TPF].item() == 2 + 8 * TPF
    assert pos[-1].item() == len(ids) - 1 + 2 * 3 * TPF

    dm = _dm(tiny_dataset, llava, position_stretch=[2], frame_repeat=[2])
    b = next(iter(dm.train_dataloader()))
    n = b["input_ids"].shape[1]
    assert b["position_ids"].shape == (3, n) and b["position_ids"].dtype == torch.int64
    real = b["attention_mask"].sum(dim=1)
    for i in range(3):
        p = b["position_ids"][i]
        assert int(p[real[i] - 1]) == int(real[i]) - 1 + (2 * FRAMES - 1) * TPF
        assert torch.all(p.diff() >= 1)
    loss, _ = llava.loss(b)  # the module passes position_ids on to the HF model
    assert torch.isfinite(loss)
    # Stretch 1 positions are the default ones: the loss is that of a batch without position_ids.
    dm1 = _dm(tiny_dataset, llava, position_stretch=[1])
    b1 = next(iter(dm1.train_dataloader()))
    plain = {k: v for k, v in b1.items() if k != "position_ids"}
    with torch.no_grad():
        torch.testing.assert_close(llava.loss(b1)[0], llava.loss(plain)[0])


@pytest.mark.parametrize("key,value", [("frame_repeat", [0]), ("frame_repeat", []), ("frame_repeat", "2"),
                                       ("position_stretch", [1, 2.5]), ("position_stretch", [True])])
def test_bad_values_name_the_key(tiny_dataset, key, value):
    with pytest.raises(ConfigError, match=f"data.{key} must be a non-empty list of integers >= 1"):
        VideoTextDataModule(str(tiny_dataset), **{key: value})


def test_position_stretch_is_llava_only(tiny_dataset):
    torch.manual_seed(0)
    qwen = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["qwen2.5-vl"]),
                        max_frames=FRAMES, adapter_options=QWEN_OPTIONS)
    with pytest.raises(ConfigError, match="data.position_stretch is for LLaVA-OV"):
        _dm(tiny_dataset, qwen, position_stretch=[2])
    # frame_repeat works for Qwen2.5-VL too (its temporal patches pair frames: 4 -> 8 frames, 4 patches).
    dm = _dm(tiny_dataset, qwen, frame_repeat=[2])
    b = next(iter(dm.train_dataloader()))
    assert b["video_grid_thw"][:, 0].tolist() == [FRAMES] * b["input_ids"].shape[0]


def test_sparrow_distillation_reads_stretched_positions():
    """With position_stretch batches, the Sparrow module runs its target on those position ids and gives
    the draft the same positions; without them, the 1-D positions of the attention mask."""
    from types import SimpleNamespace

    from vidspec.draft_training.sparrow.module import SparrowDistillModule

    seen = {}

    def lm(**kw):
        seen.update(kw)
        hs = tuple(torch.zeros(1, 4, 2) for _ in range(3))
        return SimpleNamespace(hidden_states=hs, last_hidden_state=hs[-1])

    target = SimpleNamespace(family="llava-ov", model=SimpleNamespace(model=lm))
    mod = SimpleNamespace(target=target, feature_cache=None, ivsb_layer=1, _ensure_target_device=lambda: None,
                          _vision_kwargs=lambda batch: {})
    mod.target_positions = lambda batch: SparrowDistillModule.target_positions(mod, batch)
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    plain = SparrowDistillModule.target_features(mod, batch)
    assert "position_ids" not in seen and plain["positions"].tolist() == [[[0, 1, 2, 3]]]
    stretched = torch.tensor([[0, 1, 9, 10]])
    out = SparrowDistillModule.target_features(mod, {**batch, "position_ids": stretched})
    assert torch.equal(seen["position_ids"], stretched) and out["positions"].tolist() == [[[0, 1, 9, 10]]]
