"""Logs a cluster user reads: a plain progress line every N steps with the progress bar off; versioned run folders
in the 7B recipes (a rerun never overwrites the last run's logs or config, and resumes from the shared
checkpoints)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from vidspec.draft_training.callbacks import TextProgress

ROOT = Path(__file__).resolve().parents[3]


def test_text_progress_line_every_n_steps(capsys, monkeypatch):
    import vidspec.draft_training.callbacks as cb

    clock = iter([100.0, 160.0])
    monkeypatch.setattr(cb.time, "perf_counter", lambda: next(clock))
    trainer = SimpleNamespace(global_step=0, max_steps=1000, log_every_n_steps=20, is_global_zero=True,
                              callback_metrics={"train/loss": torch.tensor(2.3141), "train/acc_step1": torch.tensor(0.612),
                                                "train/acc_step2": 0.431, "train/tokens_per_s": 5019.4,
                                                "train/lr": 4.2e-5, "train/gpu_mem_gb": 53.84, "val/loss": 9.0})
    p = TextProgress()
    p.on_train_start(trainer, None)
    for step in (10, 20):
        trainer.global_step = step
        p.on_train_batch_end(trainer, None, None, None, 0)
    out = capsys.readouterr().out.strip().splitlines()
    # one line, at step 20; 60 s for 20 steps -> 980 steps left take 49 minutes
    assert out == ["step 20/1000 | loss 2.314 | acc 0.612 0.431 | 5,019 tok/s | lr 4.20e-05 | mem 53.8 GiB | eta 49m00s"]


RECIPES = sorted((ROOT / "configs" / "train").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_recipes_version_their_run_folders(recipe):
    cfg = yaml.safe_load(recipe.read_text())
    logger = cfg["trainer"]["logger"]["init_args"]
    assert logger.get("version") is None  # Lightning numbers version_0, version_1, ...: nothing is overwritten
    assert logger["save_dir"] == cfg["trainer"]["default_root_dir"]
    assert cfg["checkpoint"]["dirpath"] == f"{cfg['trainer']['default_root_dir']}/checkpoints"  # resume finds last


def test_7b_recipes_print_plain_lines():
    for name in ("sparrow-qwen2.5-vl-7b.yaml", "sparrow-llava-ov-7b.yaml"):
        cfg = yaml.safe_load((ROOT / "configs" / "train" / name).read_text())
        assert cfg["trainer"]["enable_progress_bar"] is False


def test_a_rerun_and_a_resume_keep_every_runs_logs(tmp_path):
    """A recipe as committed (logger and checkpoint folders moved under a test folder): the first run, a resume with
    --ckpt_path last and a fresh rerun each log into their own version folder with their own config.yaml, and the
    resume continues from the first run's checkpoint."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_sparrow_train import tiny_recipe, write_dataset

    from vidspec.decoding.cli import main as vidspec
    from vidspec.draft_training.callbacks import read_run_metrics

    data = write_dataset(tmp_path / "data", n_train=4, n_val=1)
    recipe = str(tiny_recipe(tmp_path, data, "run", max_steps=2))
    run = tmp_path / "run"
    assert vidspec(["train", "fit", "--config", recipe]) == 0
    first = (run / "version_0" / "config.yaml").read_text()
    assert vidspec(["train", "fit", "--config", recipe, "--trainer.max_steps", "3", "--ckpt_path", "last"]) == 0
    assert [r["step"] for r in read_run_metrics(run) if "train/loss" in r] == [1, 2, 3]  # resumed at step 2
    assert vidspec(["train", "fit", "--config", recipe, "--trainer.max_steps", "1"]) == 0  # a rerun from scratch
    assert sorted(p.name for p in run.glob("version_*")) == ["version_0", "version_1", "version_2"]
    assert (run / "version_0" / "config.yaml").read_text() == first  # nothing overwritten
    assert "max_steps: 3" in (run / "version_1" / "config.yaml").read_text()
    assert "max_steps: 1" in (run / "version_2" / "config.yaml").read_text()
    assert all((run / f"version_{i}" / "metrics.jsonl").is_file() for i in range(3))


def test_validation_logs_the_decoded_acceptance_length(tmp_path):
    """At validation the draft decodes held-out samples through the real decoder; the mean tau is logged beside
    the teacher-forced figures."""
    import sys

    import lightning as L

    sys.path.insert(0, str(Path(__file__).parent))
    from test_sparrow_train import write_dataset

    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sparrow import SparrowDistillModule

    data = write_dataset(tmp_path / "data", n_train=2, n_val=2)
    m = SparrowDistillModule(target="tiny-qwen2.5-vl", val_accept_samples=2, val_accept_k=3, val_accept_tokens=12)
    dm = VideoTextDataModule(path=str(data), batch_size=2, shuffle=False)
    dm.attach(m.input_spec())
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    trainer.fit(m, datamodule=dm)
    tau = float(trainer.callback_metrics["val/accept_len"])
    assert 1.0 <= tau <= 4.0 and "val/sim_accept_len" in trainer.callback_metrics
    assert m.draft.training  # the measurement leaves the draft as it found it
    # the copy decodes as the trained draft itself does
    from vidspec.decoding.drafters.sparrow import SparrowDrafter
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.types import Request

    rows = dm.val_set.rows[:2]
    decoder = build_decoder("sparrow", target=m.target, draft=SparrowDrafter(m.draft), k=3)
    taus = [decoder.generate(Request(r.prompt, m.target.read_video(r.video)), max_new_tokens=12).tau for r in rows]
    assert tau == pytest.approx(sum(taus) / len(taus), rel=1e-6)
