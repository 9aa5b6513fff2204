"""VLMSFTModule: overfitting one fixed batch, the LR schedule, answer-only loss."""

from __future__ import annotations

import pytest
import torch

from vidspec.draft_training.data import VideoTextDataModule
from vidspec.draft_training.sft import OptimConfig, VLMSFTModule, lr_factor
from vidspec.draft_training.testbed.arch import ArchConfig
from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS


def _batch(dataset, module, n=4):
    # One style only: two captions of one video in different wordings would leave irreducible loss.
    dm = VideoTextDataModule(str(dataset), tables=[".", "mcq"], batch_size=n, shuffle=False, caption_styles=["alpha"])
    dm.attach(module.input_spec())
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


@pytest.fixture
def one_thread():
    # Deterministic and faster on a shared 2-core machine.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("family", ["llava-ov"])
def test_overfits_one_batch(tiny_dataset, family, one_thread):
    """Four videos that differ only in colour: the loss can reach zero only through the vision path."""
    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH[family]), max_frames=4,
                     adapter_options=QWEN_OPTIONS if family == "qwen2.5-vl" else None)
    batch = _batch(tiny_dataset, m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    first = None
    for _ in range(600):  # stops early once the loss is below 0.02
        loss, n = m.loss(batch)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.02:
            break
    assert n > 0 and first > 3.0
    assert loss.item() < 0.05, f"loss {first:.3f} -> {loss.item():.4f}"


def test_loss_ignores_prompt_tokens(tiny_dataset):
    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]), max_frames=4)
    batch = _batch(tiny_dataset, m, n=2)
    loss, n = m.loss(batch)
    assert n == int(batch["answer_mask"].sum())
    changed = dict(batch, input_ids=batch["input_ids"].clone())
    first_answer = int(batch["answer_mask"][0].nonzero()[0])
    changed["input_ids"][0, first_answer - 1] += 1  # the token before the answer is only context
    assert m.loss(changed)[0].item() != loss.item()
    batch2 = dict(batch, labels=batch["labels"].clone())
    batch2["labels"][:, :first_answer - 1] = -100  # more ignored prompt labels change nothing
    assert m.loss(batch2)[0].item() == pytest.approx(loss.item())


@pytest.mark.parametrize("family", ["llava-ov", "qwen2.5-vl"])
def test_right_padded_batches_train_the_same_without_the_mask(tiny_dataset, family, monkeypatch):
    """The model runs a right-padded batch without its padding mask (sft.causal_padding_mask): the loss and every
    gradient are those of the masked forward."""
    from vidspec.draft_training import sft

    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH[family]), max_frames=4,
                     adapter_options=QWEN_OPTIONS if family == "qwen2.5-vl" else None)
    batch = _batch(tiny_dataset, m)  # captions and questions: rows of different lengths
    assert (batch["attention_mask"] == 0).any() and sft.causal_padding_mask(batch["attention_mask"]) is None

    def loss_and_grads():
        m.zero_grad(set_to_none=True)
        loss, _ = m.loss(batch)
        loss.backward()
        return float(loss.detach()), {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}

    unmasked = loss_and_grads()
    monkeypatch.setattr(sft, "causal_padding_mask", lambda mask: mask)
    masked = loss_and_grads()
    assert unmasked[0] == pytest.approx(masked[0], rel=1e-5)
    assert unmasked[1].keys() == masked[1].keys()
    for k, g in masked[1].items():
        torch.testing.assert_close(unmasked[1][k], g, atol=1e-5, rtol=1e-4, msg=k)


def test_lr_schedule():
    o = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    f = [lr_factor(s, o.warmup_steps, 100, o.min_lr_ratio) for s in range(300)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(f[9:], f[10:])) and f[-1] >= 0.1 - 1e-9


def test_nonfinite_batch_is_skipped(tiny_dataset):
    """A NaN loss becomes a zero loss over every parameter (zero gradients, DDP stays in sync)."""
    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]), max_frames=4)
    batch = _batch(tiny_dataset, m, n=2)
    m.log = lambda *a, **k: None  # no trainer attached
    assert m.training_step(batch, 0) is not None
    m.loss = lambda b: (torch.tensor(float("nan")), 3)
    out = m.training_step(batch, 1)
    assert out.item() == 0.0 and m._skipped_nonfinite == 1
    out.backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None and torch.count_nonzero(g) == 0 for g in grads)


def test_init_from_a_folder_starts_training_mode_with_its_weights(tiny_dataset, tmp_path):
    """``init_from`` continues a saved model: the same weights, and in training mode (transformers' from_pretrained
    returns a model in eval mode, which Lightning leaves as it is: dropout would be off for the whole run)."""
    torch.manual_seed(0)
    first = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]), max_frames=4)
    first.model.save_pretrained(tmp_path / "saved")
    first.tokenizer.save_pretrained(tmp_path / "saved")
    again = VLMSFTModule(init_from=str(tmp_path / "saved"), max_frames=4, freeze_vision=True)
    assert all(m.training for m in again.model.modules())
    for (name, a), (_, b) in zip(first.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(a, b), name
    tower = again.model.model.vision_tower
    assert not any(p.requires_grad for p in tower.parameters())
    assert any(p.requires_grad for p in again.model.model.language_model.parameters())


def test_nonfinite_gradient_step_is_dropped(tiny_dataset, one_thread, caplog):
    """A finite loss whose backward yields a NaN gradient (what poisoned a bf16 draft VLM on the H200) leaves every
    weight as it was for that step, under a real Trainer with gradient clipping; the next step trains again."""
    import lightning as L

    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]), max_frames=4,
                     optim=OptimConfig(lr=1e-3, warmup_steps=0))
    dm = VideoTextDataModule(str(tiny_dataset), batch_size=2, shuffle=False, num_workers=0)
    dm.attach(m.input_spec())
    calls = {"n": 0}

    def poison_second_backward(grad):
        calls["n"] += 1
        return grad * float("nan") if calls["n"] == 2 else grad

    m.model.lm_head.weight.register_hook(poison_second_backward)
    snaps = []

    class Snap(L.Callback):
        def on_train_batch_end(self, trainer, module, *args):
            snaps.append({k: v.detach().clone() for k, v in module.model.state_dict().items()})

    before = {k: v.detach().clone() for k, v in m.model.state_dict().items()}
    trainer = L.Trainer(accelerator="cpu", max_steps=3, gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Snap()])
    with caplog.at_level("WARNING", logger="vidspec.draft_training.sft"):
        trainer.fit(m, datamodule=dm)
    assert calls["n"] == 3 and m._dropped_nonfinite_grads == 1
    assert "step 1: non-finite gradients (first in model.lm_head.weight)" in caplog.text
    assert all(torch.isfinite(v).all() for v in m.model.state_dict().values())
    moved = lambda a, b: any(not torch.equal(a[k], b[k]) for k in a)  # noqa: E731
    assert moved(before, snaps[0]) and not moved(snaps[0], snaps[1]) and moved(snaps[1], snaps[2])


def test_drop_nonfinite_gradients_keeps_finite_ones():
    from vidspec.draft_training.sft import drop_nonfinite_gradients

    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    a.grad, b.grad = torch.ones(3), torch.tensor([1.0, float("inf")])
    assert drop_nonfinite_gradients([("a", a)]) is None and a.grad is not None
    assert drop_nonfinite_gradients([("a", a), ("b", b)]) == "b" and a.grad is None and b.grad is None
    assert drop_nonfinite_gradients([("a", a), ("b", b)]) is None  # nothing left to drop


def test_validation_logs_the_letter_accuracy_of_each_question_type(tiny_dataset, one_thread):
    """Validation rows are drawn from the tables in turn (so a small validation set holds questions), and
    ``val/mcq_acc/<type>`` is the share of questions whose letter is the model's teacher-forced argmax."""
    import lightning as L

    torch.manual_seed(0)
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=ArchConfig(**ARCH["llava-ov"]), max_frames=4)
    dm = VideoTextDataModule(str(tiny_dataset), tables=[".", "mcq"], batch_size=2, shuffle=False,
                             caption_styles=["alpha"], max_val_samples=2)
    dm.attach(m.input_spec())
    dm.setup("fit")
    assert [r.kind for r in dm.val_set.rows] == ["", "mcq"]  # a caption, then the question (its table has no types)
    batch = next(iter(dm.val_dataloader()))
    assert batch["kinds"] == ["", "mcq"]
    with torch.no_grad():
        h = m.hidden_states(batch)
        target = batch["labels"][1, 1:]
        pos = int((target != -100).nonzero()[0])
        expected = float(int(m.model.lm_head(h[1, pos]).argmax()) == int(target[pos]))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    metrics = trainer.validate(m, datamodule=dm, verbose=False)[0]
    assert metrics["val/mcq_acc/mcq"] == expected and metrics["val/mcq_acc"] == expected
    assert "val/loss" in metrics


def test_mrope_section_sets_the_qwen_bands(tiny_dataset):
    """arch.mrope_section reaches the Hugging Face config (default: thirds of half a head, the temporal band
    taking the remainder); sizes that do not add up to half a head, or a family without M-RoPE, are refused
    with the field's name."""
    from transformers import AutoTokenizer

    from vidspec.decoding.errors import ConfigError
    from vidspec.draft_training.testbed.arch import build_hf_config

    tok = AutoTokenizer.from_pretrained(str(tiny_dataset / "tokenizer"))
    qwen = {**ARCH["qwen2.5-vl"], "hidden_size": 32, "num_heads": 2, "num_kv_heads": 2}  # heads of 16: 8 pairs
    default = build_hf_config(ArchConfig(**qwen), tok).text_config.rope_parameters["mrope_section"]
    assert list(default) == [4, 2, 2]
    bands = build_hf_config(ArchConfig(**qwen, mrope_section=[2, 2, 4]), tok).text_config.rope_parameters
    assert list(bands["mrope_section"]) == [2, 2, 4]
    with pytest.raises(ConfigError, match=r"arch\.mrope_section .*half a head \(8\)"):
        ArchConfig(**qwen, mrope_section=[2, 2, 2])
    with pytest.raises(ConfigError, match=r"arch\.mrope_section applies to qwen2\.5-vl only"):
        ArchConfig(**ARCH["llava-ov"], mrope_section=[2, 2, 4])


@pytest.mark.parametrize("tps,distinct", [(2, 2), (4, 4)])
def test_tokens_per_second_sets_the_frames_temporal_positions(tiny_dataset, tps, distinct):
    """With a temporal patch per frame (frame_per_patch) at the tiny set's 4 fps, arch.tokens_per_second 4 moves
    each frame's tokens one M-RoPE position on; at transformers' 2, two frames in a row share a position. The
    batched positions equal transformers' get_rope_index either way."""
    from vidspec.draft_training.qwen_vision import qwen_positions

    arch = ArchConfig(**{**ARCH["qwen2.5-vl"], "tokens_per_second": tps})
    m = VLMSFTModule(tokenizer=str(tiny_dataset / "tokenizer"), arch=arch, max_frames=4,
                     adapter_options={**QWEN_OPTIONS, "frame_per_patch": True})
    assert m.model.config.vision_config.tokens_per_second == tps
    b = _batch(tiny_dataset, m, n=2)
    core = m.model.model
    pos = qwen_positions(core, b)
    video = b["mm_token_type_ids"][0] == 2
    t = pos[0, 0][video]
    assert int(b["video_grid_thw"][0, 0]) == 4 and t.unique().numel() == distinct
    ref, _ = core.get_rope_index(b["input_ids"], mm_token_type_ids=b["mm_token_type_ids"],
                                 video_grid_thw=b["video_grid_thw"], second_per_grid_ts=b["second_per_grid_ts"],
                                 attention_mask=b["attention_mask"])
    keep = b["attention_mask"].bool()
    assert torch.equal(pos[:, keep], ref[:, keep])
    with pytest.raises(Exception, match=r"arch\.tokens_per_second .*applies to qwen2\.5-vl only"):
        ArchConfig(**ARCH["llava-ov"], tokens_per_second=4)
