"""Sparrow distillation on the tiny targets: losses, overfitting, exact resume, export -> decode, DDP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from vidspec.decoding.errors import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[3]
RECIPES = sorted((ROOT / "configs" / "train").glob("sparrow-*.yaml"))


def write_dataset(out: Path, n_train: int = 4, n_val: int = 2) -> Path:
    """A tiny video QA dataset on disk in the schema VideoTextDataModule reads."""
    from datasets import Dataset, DatasetDict

    from vidspec.decoding.fixtures import make_moving_square_frames, write_test_video

    (out / "videos").mkdir(parents=True, exist_ok=True)
    words = "the red circle moves to the left while a blue square grows slowly in the middle".split()
    rng = np.random.default_rng(0)
    rows: dict[str, list] = {"train": [], "validation": []}
    for i in range(n_train + n_val):
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        write_test_video(out / "videos" / f"v{i}.mp4", make_moving_square_frames(8, 56, 84, colour=colour), fps=4)
        split = "train" if i < n_train else "validation"
        rows[split].append({"video": f"videos/v{i}.mp4", "question": "Describe the video.",
                            "answer": " ".join(rng.choice(words, 10))})
    DatasetDict({k: Dataset.from_list(v) for k, v in rows.items()}).save_to_disk(str(out))
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("sparrow-data"))


def a_batch(module, dataset, batch_size=2):
    from vidspec.draft_training.data import VideoTextDataModule

    dm = VideoTextDataModule(path=str(dataset), batch_size=batch_size, shuffle=False, val_split=None)
    dm.attach(module.input_spec())
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


# ---- losses -----------------------------------------------------------------------------------
def test_losses_basics():
    from vidspec.draft_training.sparrow import losses

    z = torch.randn(5, 11)
    assert float(losses.forward_kl(z, z)) == pytest.approx(0.0, abs=1e-6)
    assert float(losses.forward_kl(torch.randn(5, 11), z)) > 0
    # ViSpec: the L1 part is 0 for equal distributions; the ranking part is not (softplus(0)>0 for ties)
    assert float(losses.vispec_loss(z, z, l1_weight=1.0, rank_weight=0.0)) == pytest.approx(0.0, abs=1e-6)
    assert losses.simulated_accept_length([1.0, 1.0]) == 3.0
    assert losses.simulated_accept_length([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)
    assert losses.step_weights(3, decay=0.8) == pytest.approx([1.0, 0.8, 0.64])
    with pytest.raises(ValueError):
        losses.step_weights(2, weights=[1.0])


# ---- the module -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_overfits_a_fixed_batch(dataset, name):
    from vidspec.draft_training.sparrow import SparrowDistillModule

    torch.manual_seed(0)
    m = SparrowDistillModule(target=name, loss={"mtp_steps": 2, "feature_weight": 0.1})
    batch = a_batch(m, dataset)
    opt = torch.optim.AdamW(m.draft.parameters(), lr=1e-2)
    first = None
    for _ in range(12):
        loss, stats, n = m.step(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else (float(loss), float(stats[0]["acc"]))
    assert n > 0
    assert float(loss) < 0.5 * first[0]
    assert float(stats[0]["acc"]) > first[1] + 0.3
    # the frozen target received no gradient and is not part of the module's parameters
    assert all(p.grad is None for p in m.target.model.parameters())
    assert not any(k.startswith("target") for k in m.state_dict())


def test_nonfinite_draft_gradients_drop_the_step(dataset, caplog):
    """The Sparrow module drops a step whose draft gradients hold a NaN (shared with the SFT module: test_sft)."""
    from vidspec.draft_training.sparrow import SparrowDistillModule

    torch.manual_seed(0)
    m = SparrowDistillModule(target="tiny-llava-ov", loss={"mtp_steps": 2})
    m.log = lambda *a, **k: None  # no trainer attached
    loss, _, _ = m.step(a_batch(m, dataset))
    loss.backward()
    m.on_before_optimizer_step(None)
    assert m._dropped_nonfinite_grads == 0 and all(p.grad is not None for p in m.draft.parameters())
    name, param = next(iter(m.draft.named_parameters()))
    param.grad[...] = float("nan")
    with caplog.at_level("WARNING", logger="vidspec.draft_training.sparrow.module"):
        m.on_before_optimizer_step(None)
    assert m._dropped_nonfinite_grads == 1 and all(p.grad is None for p in m.draft.parameters())
    assert name in caplog.text


def test_init_from_continues_a_release_even_after_the_target_changed(dataset, tmp_path, caplog):
    """A warm start loads the release's weights; a fine-tuned target (other weights, same tokenizer) is accepted and
    logged, another tokenizer is refused with a ConfigError."""
    from vidspec.decoding.drafters.sparrow import target_fingerprint
    from vidspec.draft_training.sparrow import SparrowDistillModule

    torch.manual_seed(0)
    first = SparrowDistillModule(target="tiny-llava-ov", loss={"mtp_steps": 2})
    batch = a_batch(first, dataset)
    opt = torch.optim.AdamW(first.draft.parameters(), lr=1e-2)
    for _ in range(3):
        loss, _, _ = first.step(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    fp = target_fingerprint(first.target)

    def release(name, **fingerprint):
        return str(first.draft.save_pretrained(tmp_path / name, manifest={"target_fingerprint": {**fp, **fingerprint}}))

    def own(module):
        return {k: v.detach().clone() for k, v in module.draft.own_state_dict().items()}

    trained = own(first)
    same = SparrowDistillModule(target="tiny-llava-ov", loss={"mtp_steps": 2}, init_from=release("same"))
    fresh = SparrowDistillModule(target="tiny-llava-ov", loss={"mtp_steps": 2})
    assert trained.keys() == own(same).keys()
    assert all(torch.equal(trained[k], v) for k, v in own(same).items())
    assert not all(torch.equal(trained[k], v) for k, v in own(fresh).items())
    assert float(same.step(batch)[0].detach()) < float(fresh.step(batch)[0].detach())  # it starts where the release stopped

    with caplog.at_level("INFO", logger="vidspec.draft_training.sparrow.module"):
        tuned = SparrowDistillModule(target="tiny-llava-ov", init_from=release("tuned", weights="before-fine-tune"))
    assert all(torch.equal(trained[k], v) for k, v in own(tuned).items())
    assert "other weights" in caplog.text
    with pytest.raises(ConfigError, match="tokenizer differs"):
        SparrowDistillModule(target="tiny-llava-ov", init_from=release("other-vocab", tokenizer="another"))


def test_draft_batch_layout(dataset):
    """IVSB puts the visual states first; text entries skip position 0 and visual positions."""
    from vidspec.draft_training.sparrow import SparrowDistillModule

    m = SparrowDistillModule(target="tiny-qwen2.5-vl")
    batch = a_batch(m, dataset)
    db = m.draft_batch(batch, m.target_features(batch))
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    n_vis = ((ids == m.target.video_token_id) & mask).sum(-1)
    n_txt = (mask & (ids != m.target.video_token_id)).sum(-1) - 1
    assert db.vis.shape[1] == int(n_vis.max()) and db.tokens.shape[1] == int(n_txt.max())
    assert torch.equal(db.txt_valid.sum(-1), n_txt)
    assert db.positions.shape == (3, ids.shape[0], db.vis.shape[1] + db.tokens.shape[1])
    # the supervised entries are exactly those followed by an answer token
    assert int(db.sel.sum()) == int(batch["answer_mask"].sum())
    m2 = SparrowDistillModule(target="tiny-qwen2.5-vl", draft={"ivsb": False, "position_mode": "reindex"})
    db2 = m2.draft_batch(batch, m2.target_features(batch))
    assert db2.vis.shape[1] == 0
    assert db2.positions[0, 0, 0] == 1  # text rank of the first entry (position 0 is skipped)


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_the_target_runs_right_padded_batches_without_a_mask(dataset, name, monkeypatch):
    """Causal attention never looks ahead, so on a right-padded batch the padding mask changes no kept state."""
    from vidspec.draft_training.sparrow import module as sparrow_module

    m = sparrow_module.SparrowDistillModule(target=name)
    batch = a_batch(m, dataset)
    mask = batch["attention_mask"].clone()
    k = int(mask[1].sum())
    mask[1, k - 3:k] = 0  # row 1 three tokens shorter: right padding
    for key in ("attention_mask", "answer_mask", "input_ids", "labels"):
        batch[key] = batch[key].clone()
    batch["attention_mask"] = mask
    batch["answer_mask"][1, k - 3:] = False
    batch["labels"][1, k - 3:] = -100
    assert sparrow_module.causal_padding_mask(mask) is None
    assert torch.equal(sparrow_module.causal_padding_mask(mask.flip(-1)), mask.flip(-1))  # left padding keeps it
    unmasked = m.target_features(batch)
    masked = m.target_features(batch, padding_mask=True)
    kept = mask.bool()
    for key in ("penult", "mid", "last"):
        torch.testing.assert_close(unmasked[key][kept], masked[key][kept], atol=1e-5, rtol=1e-4)
    assert torch.equal(unmasked["positions"], masked["positions"])
    monkeypatch.setattr(sparrow_module, "causal_padding_mask", lambda x: x)  # the whole step with the mask
    loss_masked = float(m.step(batch)[0].detach())
    monkeypatch.undo()
    assert float(m.step(batch)[0].detach()) == pytest.approx(loss_masked, rel=1e-5)


def test_feature_cache_matches_live_target(dataset, tmp_path):
    from vidspec.draft_training.sparrow import SparrowDistillModule
    from vidspec.draft_training.sparrow.features import precompute_features

    m = SparrowDistillModule(target="tiny-qwen2.5-vl")
    batch = a_batch(m, dataset)
    assert precompute_features(m, [batch], tmp_path / "feats", progress=False) == 2
    assert precompute_features(m, [batch], tmp_path / "feats", progress=False) == 0  # resumable
    cached = SparrowDistillModule(target="tiny-qwen2.5-vl", feature_cache=str(tmp_path / "feats"))
    live_loss, _, _ = m.step(batch)
    cache_loss, _, _ = cached.step(batch)
    # bf16 storage of the features: close, not equal
    assert float(cache_loss) == pytest.approx(float(live_loss), rel=0.05)


# ---- recipes and the CLI ----------------------------------------------------------------------
@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_every_sparrow_recipe_parses(recipe):
    from vidspec.draft_training.cli import parse_recipe

    cfg = parse_recipe(str(recipe))
    assert cfg.fit.model.class_path == "vidspec.draft_training.sparrow.SparrowDistillModule"
    assert recipe.read_text().startswith("#")
    text = recipe.read_text()
    assert "torchrun" in text and "srun" in text


def test_recipes_exist():
    names = {r.name for r in RECIPES}
    assert {"sparrow-tiny-cpu.yaml", "sparrow-synthvid-gpu.yaml", "sparrow-qwen2.5-vl-7b.yaml",
            "sparrow-llava-ov-7b.yaml"} <= names


def tiny_recipe(tmp_path: Path, dataset: Path, name: str, **trainer) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "train" / "sparrow-tiny-cpu.yaml").read_text())
    run = tmp_path / name
    cfg["trainer"].update({"max_steps": 6, "val_check_interval": None, "limit_val_batches": 0,
                           "default_root_dir": str(run), "log_every_n_steps": 1, **trainer})
    cfg["trainer"]["logger"]["init_args"]["save_dir"] = str(run)
    cfg["checkpoint"] = {"every_n_train_steps": 1, "dirpath": str(run / "checkpoints")}
    cfg["data"].update({"path": str(dataset), "batch_size": 2, "val_split": None})
    cfg["model"]["init_args"]["optim"] = {"lr": 5e-3, "warmup_steps": 0}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def losses_by_step(run: Path) -> dict[int, float]:
    from vidspec.draft_training.callbacks import read_run_metrics

    return {r["step"]: r["train/loss"] for r in read_run_metrics(run) if "train/loss" in r}


def test_resume_reproduces_losses_and_export_decodes_losslessly(dataset, tmp_path):
    from vidspec.decoding.loops.chain import SpeculativeDecoder
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.types import Request, VideoClip
    from vidspec.draft_training.cli import run_cli
    from vidspec.draft_training.export import export_checkpoint

    full = tiny_recipe(tmp_path, dataset, "full")
    run_cli(["fit", "--config", str(full)])
    ref = losses_by_step(tmp_path / "full")
    assert len(ref) == 6
    from vidspec.draft_training.callbacks import read_run_metrics

    sizes = {r["train/samples"] for r in read_run_metrics(tmp_path / "full") if "train/loss" in r}
    assert sizes and all(1 <= b <= yaml.safe_load(full.read_text())["data"]["batch_size"] for b in sizes)

    broken = tiny_recipe(tmp_path, dataset, "broken")
    with pytest.raises(RuntimeError, match="FailAtStep"):
        run_cli(["fit", "--config", str(broken), "--fail_at_step", "3"])
    run_cli(["fit", "--config", str(broken), "--ckpt_path", str(tmp_path / "broken" / "checkpoints" / "last.ckpt")])
    got = losses_by_step(tmp_path / "broken")
    for step in (4, 5, 6):
        assert got[step] == pytest.approx(ref[step], rel=1e-5, abs=1e-6), step

    rel = export_checkpoint(tmp_path / "full" / "checkpoints" / "last.ckpt", tmp_path / "release")
    with pytest.raises(ConfigError, match="float32 or bfloat16"):  # a Sparrow release is float32 or bfloat16
        export_checkpoint(tmp_path / "full" / "checkpoints" / "last.ckpt", tmp_path / "half", dtype="float16")
    assert not (tmp_path / "half").exists()
    man = json.loads((rel / "manifest.json").read_text())
    assert man["kind"] == "sparrow-draft" and man["target_id"] == "tiny-qwen2.5-vl"
    assert man["target_fingerprint"]["weights"] and (rel / "README.md").is_file()
    rng = np.random.default_rng(1)
    clip = VideoClip(frames=rng.integers(0, 255, (8, 56, 84, 3), dtype=np.uint8), fps=4.0, source="memory")
    req = Request("Describe the video.", clip)
    ar = build_decoder("ar", target="tiny-qwen2.5-vl")
    sp = build_decoder("sparrow", target=ar.target, draft=str(rel), k=4)
    a = ar.generate(req, max_new_tokens=32)
    s = sp.generate(req, max_new_tokens=32)
    assert s.token_ids == a.token_ids
    assert isinstance(sp, SpeculativeDecoder) and sp.drafter.model.config.target_id == "tiny-qwen2.5-vl"


DDP_SCRIPT = """
import sys
from vidspec.draft_training.cli import run_cli

if __name__ == "__main__":
    run_cli(["fit", "--config", sys.argv[1]])
"""


def test_two_process_gloo_ddp_fit(dataset, tmp_path):
    recipe = tiny_recipe(tmp_path, dataset, "ddp", devices=2, strategy="ddp", max_steps=2)
    script = tmp_path / "fit_ddp.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script), str(recipe)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "ddp" / "checkpoints" / "last.ckpt").is_file()
    steps = losses_by_step(tmp_path / "ddp")
    assert sorted(steps) == [1, 2]
