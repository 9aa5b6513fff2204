"""Length augmentation of VideoTextDataModule: frame_repeat, frame_budget, position_stretch, their seeding and errors."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.data import (
    FrameBudgetBatchSampler,
    LengthAugmentSampler,
    ResumableSampler,
    VideoTextDataModule,
    budget_clips,
    stretched_positions,
)
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testbed.arch import ArchConfig
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
        assert b["frame_repeat"] == 3  # which lets the modules run the tower once per distinct frame
        assert torch.equal(b["pixel_values_videos"][:, ::3].repeat_interleave(3, dim=1), b["pixel_values_videos"])
    # Validation is unaffected unless asked.
    assert next(iter(dm.val_dataloader()))["pixel_values_videos"].shape[1] == FRAMES
    dm_val = _dm(tiny_dataset, llava, frame_repeat=[2], augment_val=True)
    assert next(iter(dm_val.val_dataloader()))["pixel_values_videos"].shape[1] == 2 * FRAMES


@pytest.mark.parametrize("family", ["llava-ov", "qwen2.5-vl"])
def test_a_repeated_item_is_the_repeated_clip_processed(tiny_dataset, llava, family):
    """The data module's shortcut for repeated frames (the adapter's repeated_visual_inputs) changes no input."""
    from vidspec.decoding.types import Request

    module = llava if family == "llava-ov" else VLMSFTModule(
        tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["qwen2.5-vl"]), max_frames=FRAMES,
        adapter_options=QWEN_OPTIONS)
    ds = _dm(tiny_dataset, module, frame_repeat=[3]).train_dataloader().dataset
    item = ds[(1, 0, 3)]
    row = ds.rows[1]
    ids, visual = ds.adapter.build_prompt(Request(prompt=row.prompt, clip=ds._read(row.video).repeat_frames(3)))
    assert torch.equal(item["input_ids"][: len(ids)], ids)
    assert torch.equal(item["pixel_values_videos"], visual.tensors["pixel_values_videos"])


def test_repeated_frames_through_the_tower_once_give_the_same_loss_and_gradients(tiny_dataset, llava):
    """sft.llava_video_kwargs: the LLaVA-OV tower, projector and pooling on each distinct frame once, the features
    repeated: the loss and every gradient (the tower's included) are those of the repeated frames."""
    from vidspec.draft_training.sft import llava_video_kwargs

    batch = next(iter(_dm(tiny_dataset, llava, frame_repeat=[3]).train_dataloader()))
    assert batch["frame_repeat"] == 3

    def loss_and_grads(b):
        llava.zero_grad(set_to_none=True)
        loss, _ = llava.loss(b)
        loss.backward()
        return float(loss.detach()), {k: p.grad.clone() for k, p in llava.named_parameters() if p.grad is not None}

    once = loss_and_grads(batch)
    every = loss_and_grads({**batch, "frame_repeat": 1})  # the tower on all 12 frames
    assert once[0] == pytest.approx(every[0], rel=1e-5)
    assert any("vision_tower" in k for k in every[1]) and once[1].keys() == every[1].keys()
    for k, g in every[1].items():
        torch.testing.assert_close(once[1][k], g, atol=1e-5, rtol=1e-4, msg=k)
    with pytest.raises(ValueError, match="whole number"):
        llava_video_kwargs(llava.model.model, batch["pixel_values_videos"], 5)


def test_the_sparrow_teacher_reads_repeated_frames_once(tiny_dataset):
    from vidspec.draft_training.sparrow import SparrowDistillModule

    m = SparrowDistillModule(target="tiny-llava-ov", draft={"ivsb": False})
    batch = next(iter(_dm(tiny_dataset, m, frame_repeat=[2], caption_styles=["alpha"]).train_dataloader()))
    calls = []
    tower = m.target.model.model.vision_tower
    hook = tower.register_forward_pre_hook(lambda _, args: calls.append(args[0].shape[0]))
    try:
        once = m.target_features(batch)
        every = m.target_features({**batch, "frame_repeat": 1})
    finally:
        hook.remove()
    n = batch["input_ids"].shape[0]
    assert calls == [n * FRAMES, n * 2 * FRAMES]  # distinct frames only, then every repeated frame
    for key in ("penult", "mid", "last"):
        torch.testing.assert_close(once[key], every[key], atol=1e-5, rtol=1e-4)


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


# ---- frame_budget --------------------------------------------------------------------------------
REPEATS = [1, 2, 4, 8, 3]


def _budget_sampler(n=23, *, world=1, rank=0, epoch=0, skip=0, budget=40, batch_size=5, frames=4, seed=7,
                    repeats=REPEATS):
    order = ResumableSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=True, seed=seed, epoch=epoch)
    return FrameBudgetBatchSampler(order, frame_repeat=repeats, batch_size=batch_size, frame_budget=budget,
                                   frames_per_clip=frames, skip_batches=skip)


def _factor(batch) -> int:
    (r,) = {r for _, _, r in batch}
    return r


@pytest.mark.parametrize("budget", [1, 4, 40, 1000])
def test_frame_budget_batch_sizes_follow_the_formula(budget):
    s = _budget_sampler(budget=budget)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        short = 0
        for b in batches:
            r = _factor(b)  # one factor per batch, tagged with the epoch
            assert {e for _, e, _ in b} == {epoch}
            want = max(1, min(5, budget // (4 * r)))
            assert want == budget_clips(r, batch_size=5, frame_budget=budget, frames_per_clip=4)
            assert len(b) <= want and (len(b) * 4 * r <= budget or len(b) == 1)
            short += len(b) < want
        assert short <= 1  # only the batch that holds the epoch's remainder may be short
        # Every factor gets an equal share of the batches (give or take one).
        counts = [sum(_factor(b) == r for b in batches) for r in REPEATS]
        assert max(counts) - min(counts) <= 1
    # Budget 40, 4 frames a clip: r = 1 and 2 fill the batch of 5, r = 4 holds 2 clips, r = 8 one, r = 3 three.
    assert [budget_clips(r, batch_size=5, frame_budget=40, frames_per_clip=4) for r in REPEATS] == [5, 5, 2, 1, 3]


@pytest.mark.parametrize("n,world", [(23, 1), (23, 2), (24, 3), (7, 4)])
def test_frame_budget_uses_each_index_once_per_rank_and_ranks_step_together(n, world):
    for epoch in range(3):
        per_rank = []
        for rank in range(world):
            s = _budget_sampler(n, world=world, rank=rank, epoch=epoch)
            batches = list(s)
            assert len(batches) == len(s)
            # This rank's share, each index once, in the order of the plain resumable sampler.
            plain = ResumableSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=True, seed=7, epoch=epoch)
            assert [i for b in batches for i, _, _ in b] == list(plain)
            per_rank.append([(_factor(b), len(b)) for b in batches])
        # Same number of batches, with the same factor and size at each step, on every rank.
        assert all(steps == per_rank[0] for steps in per_rank)
        ranks = {i for rank in range(world) for b in _budget_sampler(n, world=world, rank=rank, epoch=epoch)
                 for i, _, _ in b}
        assert ranks == set(range(n))
    # Deterministic given (seed, epoch); another epoch shuffles the batches, keeping their number.
    first = list(_budget_sampler(epoch=0))
    assert first == list(_budget_sampler(epoch=0))
    assert [_factor(b) for b in _budget_sampler(epoch=1)] != [_factor(b) for b in first]
    assert len(_budget_sampler(epoch=1)) == len(first)


def test_frame_budget_resume_yields_the_tail_of_the_epoch():
    for epoch in (0, 2):
        full = list(_budget_sampler(epoch=epoch))
        for done in range(len(full) + 1):
            resumed = _budget_sampler(epoch=epoch, skip=done)
            assert list(resumed) == full[done:]
            assert list(resumed) == full  # the skip applies once
    # A skip meant for another epoch is dropped once that epoch has passed.
    s = _budget_sampler(epoch=0, skip=3)
    s.set_epoch(1)
    assert list(s) == list(_budget_sampler(epoch=1))
    with pytest.raises(ConfigError, match="outside the"):
        _budget_sampler(skip=len(full) + 1)


class _FakeTrainer:
    """What VideoTextDataModule.state_dict and _world read of a Trainer."""

    def __init__(self, epoch: int, batches: int, world: int = 1, rank: int = 0):
        from types import SimpleNamespace

        self.current_epoch, self.world_size, self.global_rank = epoch, world, rank
        self.fit_loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(
            current=SimpleNamespace(processed=batches))))


def _budget_keys(loader) -> list:
    return [list(b) for b in loader.batch_sampler]


def test_frame_budget_in_the_data_module(tiny_dataset, llava):
    # 12 rows, 4 frames a clip, budget 24: 3 clips at r = 1 (batch_size 3) and r = 2, 1 clip at r = 4.
    dm = _dm(tiny_dataset, llava, frame_repeat=[1, 4, 2], frame_budget=24)
    loader = dm.train_dataloader()
    # Lightning keeps a loader whose sampler is a DistributedSampler (under DDP it replaces other ones).
    assert isinstance(loader.sampler, DistributedSampler) and loader.sampler is loader.batch_sampler.sampler
    keys = _budget_keys(loader)
    assert len(loader) == len(keys) == len(loader.batch_sampler)
    assert sorted(i for b in keys for i, _, _ in b) == list(range(len(dm.train_set))) == list(range(12))
    assert sorted(len(k) for k in keys if _factor(k) == 4) == [1, 1]
    assert sorted(len(k) for k in keys if _factor(k) != 4) == [1, 3, 3, 3]  # the remainder is the short one
    batches = list(loader)
    assert len(batches) == len(keys)
    for b, k in zip(batches, keys):
        r, n = _factor(k), len(k)
        assert b["pixel_values_videos"].shape[:2] == (n, r * FRAMES)
        assert _video_tokens(b, llava) == [r * FRAMES * TPF + 1] * n
    # Validation keeps its batch size (augment_val ignores the budget).
    dm_val = _dm(tiny_dataset, llava, frame_repeat=[4], frame_budget=16, augment_val=True, val_batch_size=2)
    assert next(iter(dm_val.val_dataloader()))["pixel_values_videos"].shape[:2] == (2, 4 * FRAMES)


def test_frame_budget_data_module_resumes_whole_batches(tiny_dataset, llava):
    kw = dict(frame_repeat=[1, 4, 2], frame_budget=24)
    dm = _dm(tiny_dataset, llava, **kw)
    loader = dm.train_dataloader()
    epochs = []
    for epoch in range(2):
        loader.batch_sampler.set_epoch(epoch)
        epochs.append(_budget_keys(loader))
    n = len(epochs[0])
    assert len(epochs[1]) == n
    for epoch, done in [(0, 2), (1, 1), (0, n)]:
        dm.trainer = _FakeTrainer(epoch, done)
        state = dm.state_dict()
        dm.trainer = None
        resumed = _dm(tiny_dataset, llava, **kw)
        resumed.load_state_dict(state)
        tail = _budget_keys(resumed.train_dataloader())
        # After the epoch's last batch the run goes on with the next epoch from its start.
        assert tail == (epochs[epoch][done:] if done < n else epochs[epoch + 1])
    # Without frame_budget the loader is the one it always was: fixed batches of a per-index sampler.
    plain = _dm(tiny_dataset, llava, frame_repeat=[1, 4, 2]).train_dataloader()
    assert type(plain.sampler) is LengthAugmentSampler and plain.batch_size == 3


@pytest.mark.parametrize("kw,words", [
    ({"frame_repeat": [1, 2], "frame_budget": 0}, "data.frame_budget must be an integer >= 1"),
    ({"frame_repeat": [1, 2], "frame_budget": -8}, "data.frame_budget must be an integer >= 1"),
    ({"frame_repeat": [1, 2], "frame_budget": 2.5}, "data.frame_budget must be an integer >= 1"),
    ({"frame_repeat": [1, 2], "frame_budget": True}, "data.frame_budget must be an integer >= 1"),
    ({"frame_budget": 64}, "data.frame_budget .* needs data.frame_repeat"),
])
def test_bad_frame_budget_names_the_key(tiny_dataset, kw, words):
    with pytest.raises(ConfigError, match=words):
        VideoTextDataModule(str(tiny_dataset), **kw)


def test_frame_budget_below_one_clip_gives_one_clip(tiny_dataset, llava):
    dm = _dm(tiny_dataset, llava, frame_repeat=[2], frame_budget=1)
    batches = list(dm.train_dataloader())
    assert len(batches) == 12 and all(b["pixel_values_videos"].shape[:2] == (1, 2 * FRAMES) for b in batches)


def test_frame_budget_is_a_recipe_key(tiny_dataset, tmp_path, capsys):
    from vidspec.decoding.cli import main as vidspec
    from vidspec.draft_training.cli import parse_recipe
    from vidspec.draft_training.testing import tiny_recipe

    recipe = tiny_recipe(tmp_path, tiny_dataset)
    cfg = parse_recipe(str(recipe), overrides=["--data.frame_repeat", "[1, 2, 4]", "--data.frame_budget", "64"])
    assert cfg.fit.data.frame_budget == 64 and cfg.fit.data.frame_repeat == [1, 2, 4]
    assert vidspec(["train", "fit", "--config", str(recipe), "--data.frame_budget", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.frame_budget" in err[0], err
    assert not (tmp_path / "checkpoints").exists()


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cheaper_long_step_matches_the_old_one_on_cuda(tiny_dataset):
    """On the GPU, under bf16 autocast as the recipes train: the tower once per distinct frame and no padding mask
    give the Sparrow loss of the old path (every frame, the mask), to bf16's precision."""
    from vidspec.draft_training.sparrow import SparrowDistillModule

    m = SparrowDistillModule(target="tiny-llava-ov", draft={"ivsb": False}).cuda()
    batch = next(iter(_dm(tiny_dataset, m, frame_repeat=[3], caption_styles=["alpha"]).train_dataloader()))
    batch = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        new = m.target_features(batch)
        old = m.target_features({**batch, "frame_repeat": 1}, padding_mask=True)
        kept = batch["attention_mask"].bool()
        for key in ("penult", "last"):
            torch.testing.assert_close(new[key][kept].float(), old[key][kept].float(), atol=5e-2, rtol=5e-2)
        loss_new = float(m.mtp(m.draft_batch(batch, new))[0])
        loss_old = float(m.mtp(m.draft_batch(batch, old))[0])
    assert loss_new == pytest.approx(loss_old, rel=2e-2)
