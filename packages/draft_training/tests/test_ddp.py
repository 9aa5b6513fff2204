"""The same recipes train with DDP: 2 CPU processes (gloo) fit a couple of steps through `vidspec train`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vidspec.draft_training.callbacks import read_metrics
from vidspec.draft_training.testing import tiny_recipe


def test_two_process_ddp_on_cpu(tmp_path, tiny_dataset):
    recipe = tiny_recipe(tmp_path, tiny_dataset, max_steps=2, every=2)
    # The console script is the process Lightning re-launches for rank 1 (it has the __main__ guard).
    vidspec = Path(sys.executable).with_name("vidspec")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [str(vidspec), "train", "fit", "--config", str(recipe), "--trainer.devices", "2", "--trainer.strategy", "ddp",
         "--trainer.limit_val_batches", "1"],  # one validation batch per rank at the epoch's end (step 2)
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in records] == [1, 2]  # written by rank zero only
    assert all(r["train/samples"] >= 1 for r in records)  # this rank's batch size, for throughput figures
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    # The question-type accuracy is gathered over the ranks (the one validation question sits on one rank only).
    val = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "val/mcq_acc/mcq" in r]
    assert len(val) == 1 and val[0]["val/mcq_acc/mcq"] in (0.0, 1.0) and "val/loss" in val[0]
