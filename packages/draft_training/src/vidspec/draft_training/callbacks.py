"""Callbacks the ``vidspec train`` CLI adds to every run.

- :class:`StepMetrics` writes every logged training metric per optimizer step to
  ``<log_dir>/metrics.jsonl`` (rank zero), next to TensorBoard's event files: a plain record that
  tests, benchmark scripts and ``vidspec export`` read without TensorBoard.
- :class:`FailAtStep` raises at a chosen step: fault injection, to test that a killed run resumes
  exactly (the CLI exposes it as ``--fail_at_step``; 0 disables it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only


def _scalars(metrics: dict) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                continue
            v = v.item()
        if isinstance(v, (int, float)):
            out[k] = float(v)
    return out


class StepMetrics(L.Callback):
    """Append one JSON line per optimizer step: ``{"step", "epoch", "time", <metric>: value, ...}``.

    ``time`` is the wall clock (``time.time()``) at the end of the step, so throughput between two
    steps can be read back from the file (``benchmarks/ddp_scaling.py`` does).

    Args:
        filename: file name inside the trainer's log dir (or ``default_root_dir`` without a logger).
        prefixes: metric name prefixes to record.
    """

    def __init__(self, filename: str = "metrics.jsonl", prefixes: tuple[str, ...] = ("train/", "val/")):
        self.filename = filename
        self.prefixes = tuple(prefixes)
        self._last_step = -1
        self._path: Path | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: resolve it on every rank, once.
        self._path = Path(trainer.log_dir or trainer.default_root_dir) / self.filename

    @rank_zero_only
    def _write(self, trainer: L.Trainer, record: dict) -> None:
        p = self._path or Path(trainer.default_root_dir) / self.filename
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: record once per optimizer step
            return
        self._last_step = step
        vals = {k: v for k, v in _scalars(trainer.callback_metrics).items()
                if k.startswith(self.prefixes) and not k.startswith("val/")}
        self._write(trainer, {"step": step, "epoch": trainer.current_epoch, "time": time.time(), **vals})

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        vals = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val/")}
        if vals:
            self._write(trainer, {"step": trainer.global_step, "epoch": trainer.current_epoch, **vals})


class FailAtStep(L.Callback):
    """Raise ``RuntimeError`` once ``global_step`` reaches ``step`` (0: never). For resume tests."""

    def __init__(self, step: int = 0):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.step and trainer.global_step >= self.step:
            raise RuntimeError(f"FailAtStep: simulated crash at step {trainer.global_step}")


def read_metrics(path: str | Path) -> list[dict]:
    """Records of a ``metrics.jsonl`` file (a resumed run appends to the same file)."""
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
