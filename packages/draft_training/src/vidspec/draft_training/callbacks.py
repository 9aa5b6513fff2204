"""Callbacks the ``vidspec train`` CLI adds to every run.

- :class:`StepMetrics` writes every logged training metric per optimizer step to
  ``<log_dir>/metrics.jsonl`` (rank zero), next to TensorBoard's event files: a plain record that
  tests, benchmark scripts and ``vidspec export`` read without TensorBoard.
- :class:`FailAtStep` raises at a chosen step: fault injection, to test that a killed run resumes
  exactly (the CLI exposes it as ``--fail_at_step``; 0 disables it).
- :class:`ScheduleCheck` warns when a run ends before its learning-rate schedule does.
- :class:`TextProgress` prints one plain line every ``log_every_n_steps`` steps when the progress bar is off
  (cluster logs): step, loss, per-MTP-step accuracy, tokens/s, learning rate, memory, ETA.
- :class:`FinalCheckpoint` is the CLI's ``checkpoint`` callback: Lightning's ``ModelCheckpoint``, whose
  ``last.ckpt`` also holds the step the run ended on.
- :class:`PinNumerics` records in every checkpoint the process settings that change the arithmetic (torch's
  intra-op thread count, deterministic-algorithm and TF32 flags) and restores them on resume, so a resumed run
  computes what the uninterrupted one did.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only

log = logging.getLogger(__name__)


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

    @property
    def path(self) -> Path | None:
        """The file this callback appends to (None before ``setup``)."""
        return self._path

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


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class TextProgress(L.Callback):
    """With the progress bar off, log one plain line every ``every`` optimizer steps (rank zero), e.g.::

        step 1200/20000 | loss 2.314 | acc 0.612 0.431 | 5,019 tok/s | lr 4.20e-05 | mem 53.8 GiB | eta 4h11m

    The metrics are the module's last logged ``train/loss``, ``train/acc_step{s}``, ``train/tokens_per_s``,
    ``train/lr`` and ``train/gpu_mem_gb`` (those it logs); the ETA is the mean step time since this run started
    times the steps left to ``max_steps`` (or the epochs' estimated steps).

    Args:
        every: steps between lines (None: the trainer's ``log_every_n_steps``).
    """

    def __init__(self, every: int | None = None):
        self.every = every
        self._t0: float | None = None
        self._step0 = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self._t0, self._step0 = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        every = self.every or trainer.log_every_n_steps or 50
        step = trainer.global_step
        if not trainer.is_global_zero or step == 0 or step % every or self._t0 is None:
            return
        if getattr(self, "_last", None) == step:  # gradient accumulation: once per optimizer step
            return
        self._last = step
        print(self.line(trainer, step), flush=True)  # stdout, whatever the logging level: the job's log

    def line(self, trainer, step: int) -> str:
        m = _scalars(trainer.callback_metrics)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        if total is None:
            try:
                total = int(trainer.estimated_stepping_batches)
            except Exception:  # noqa: BLE001 -- an unsized loader: no total, no ETA
                total = None
        parts = [f"step {step}" + (f"/{total}" if total else "")]
        if "train/loss" in m:
            parts.append(f"loss {m['train/loss']:.4g}")
        accs = [m[k] for k in sorted(k for k in m if k.startswith("train/acc_step"))]
        if accs:
            parts.append("acc " + " ".join(f"{a:.3f}" for a in accs))
        if "train/tokens_per_s" in m:
            parts.append(f"{m['train/tokens_per_s']:,.0f} tok/s")
        if "train/lr" in m:
            parts.append(f"lr {m['train/lr']:.2e}")
        if "train/gpu_mem_gb" in m:
            parts.append(f"mem {m['train/gpu_mem_gb']:.1f} GiB")
        done = step - self._step0
        if total and done > 0 and self._t0 is not None:
            parts.append(f"eta {_duration((time.perf_counter() - self._t0) / done * (total - step))}")
        return " | ".join(parts)


class FailAtStep(L.Callback):
    """Raise ``RuntimeError`` once ``global_step`` reaches ``step`` (0: never). For resume tests."""

    def __init__(self, step: int = 0):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.step and trainer.global_step >= self.step:
            raise RuntimeError(f"FailAtStep: simulated crash at step {trainer.global_step}")


class ScheduleCheck(L.Callback):
    """Warn, at the end of a run, when it stopped before its learning-rate schedule ended.

    A run that ``trainer.max_time`` stops early keeps a learning rate near its peak, which the schedule was meant
    to decay: two warm-started Sparrow drafts stopped by their time budget at steps 166 and 201 of 520-step
    schedules, with the LR at 81% and 73% of its peak, and the first lost τ against the draft it continued. Reads
    the schedule's length from ``pl_module.lr_schedule_steps`` (:func:`~vidspec.draft_training.sft.adamw_cosine`).
    """

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        total = getattr(pl_module, "lr_schedule_steps", None)
        if not total or trainer.global_step >= total or not trainer.lr_scheduler_configs or not trainer.is_global_zero:
            return
        sched = trainer.lr_scheduler_configs[0].scheduler
        share = sched.get_last_lr()[0] / sched.base_lrs[0]
        log.warning(f"training ended at step {trainer.global_step} of its {total}-step learning-rate schedule, "
                    f"with the learning rate at {share:.0%} of its peak: the schedule did not finish. If "
                    f"trainer.max_time ended it, set trainer.max_steps (or model.init_args.optim.total_steps) to the "
                    f"steps that fit; a run resumed with --ckpt_path last goes on with the same schedule")


#: checkpoint key of :class:`PinNumerics`' record
NUMERICS_KEY = "vidspec_numerics"


def numerics_state() -> dict:
    """This process's settings that change floating-point results: torch's intra-op thread count (a CPU reduction
    is split into one chunk per thread, so another count sums in another order), the deterministic-algorithm
    flags, oneDNN on or off, and float32 matmul precision / TF32 / cuDNN choices (GPU)."""
    return {
        "torch_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "mkldnn": torch.backends.mkldnn.enabled,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def _apply_numerics(key: str, value) -> None:
    if key == "torch_threads":
        torch.set_num_threads(int(value))
    elif key == "deterministic_algorithms":
        torch.use_deterministic_algorithms(bool(value), warn_only=torch.is_deterministic_algorithms_warn_only_enabled())
    elif key == "deterministic_warn_only":
        torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(), warn_only=bool(value))
    elif key == "mkldnn":
        torch.backends.mkldnn.enabled = bool(value)
    elif key == "float32_matmul_precision":
        torch.set_float32_matmul_precision(str(value))
    elif key == "cuda_matmul_allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = bool(value)
    elif key == "cudnn_allow_tf32":
        torch.backends.cudnn.allow_tf32 = bool(value)
    elif key == "cudnn_deterministic":
        torch.backends.cudnn.deterministic = bool(value)
    elif key == "cudnn_benchmark":
        torch.backends.cudnn.benchmark = bool(value)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class PinNumerics(L.Callback):
    """Record the arithmetic-changing settings of :func:`numerics_state` in every checkpoint and restore them when a
    run resumes from one.

    Why: torch picks its intra-op thread count per process (from the usable cores, the CPU affinity,
    ``OMP_NUM_THREADS``), and on the CPU a sum split over 2 threads is added in another order than over 1: the same
    weights and batch give a loss a few ulps apart, and the gap grows over the steps: a tiny run killed with 2
    threads and resumed by a process that got 1 (another ``OMP_NUM_THREADS``, a job scheduler's CPU set) drifted
    from the uninterrupted run by ~5e-7 within 8 steps. On resume each setting that differs from the checkpoint's is set back to it, with one
    logged line; one that cannot be matched is a loud warning (the run goes on, no longer bit-exact). A thread count
    above the usable cores is still matched (the same sums, only slower), with a warning. A checkpoint written
    before these were recorded resumes as before, with a warning that exactness is not checked.
    """

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[NUMERICS_KEY] = numerics_state()

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        want = checkpoint.get(NUMERICS_KEY)
        if want is None:
            log.warning("resume: the checkpoint does not record the run's thread count and numeric flags (written "
                        "before they were recorded); this process uses %d intra-op threads, and a resume with "
                        "another count than the run's differs from it in the last bits", torch.get_num_threads())
            return
        now = numerics_state()
        for key, value in want.items():
            if key not in now or now[key] == value:
                continue
            try:
                _apply_numerics(key, value)
            except Exception as e:  # noqa: BLE001 -- reported below, the run goes on
                log.debug("cannot set %s: %s", key, e)
            got = numerics_state().get(key)
            if got == value:
                log.warning("resume: %s set to %s as the checkpointed run had it (this process started with %s), "
                            "so the resumed steps compute what the uninterrupted run did", key, value, now[key])
                if key == "torch_threads" and int(value) > _usable_cores():
                    log.warning("resume: %d intra-op threads on %d usable cores: exact but slower", value,
                                _usable_cores())
            else:
                log.warning("RESUME IS NOT BIT-EXACT: the checkpointed run had %s=%s, this process has %s and cannot "
                            "change it; its losses will drift from the uninterrupted run's", key, value, got)


class FinalCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that writes ``last.ckpt`` at the step the run ends on.

    Lightning saves ``last.ckpt`` when a periodic checkpoint is saved, and at the end of training only if none
    was: a run stopped by ``max_time``, or by a ``max_steps`` that is not a multiple of ``every_n_train_steps``,
    left ``last.ckpt`` (and so the release ``vidspec export`` makes from it) up to ``every_n_train_steps - 1``
    steps behind the run (16 steps of a 166-step distillation, once). This saves it after the batch on which
    the run stops (``max_steps`` reached, or ``trainer.should_stop`` set by ``max_time``), a mid-epoch state that
    resumes exactly like a periodic one (tests/test_cli.py); failing that (a stop outside a training batch), at
    the end of training.
    """

    def _save_last_now(self, trainer: L.Trainer) -> None:
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args, **kwargs) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        if trainer.should_stop or 0 <= trainer.max_steps <= trainer.global_step:
            self._save_last_now(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save_last_now(trainer)  # skipped where this step is saved already (or no step was taken)
        super().on_train_end(trainer, pl_module)


def read_metrics(path: str | Path) -> list[dict]:
    """Records of a ``metrics.jsonl`` file (a resumed run appends to the same file)."""
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def read_run_metrics(run: str | Path) -> list[dict]:
    """Records of every ``metrics.jsonl`` of a run folder in the order they were written: the folder's own (an
    unversioned logger) and then those of its ``version_N`` folders by N (the recipes version their logs, so a
    resume writes into the next version; a step that ran twice appears twice, the later record last)."""
    root = Path(run)
    versions = sorted((p for p in root.glob("version_*") if p.name[8:].isdigit()), key=lambda p: int(p.name[8:]))
    return [r for f in (root, *versions) for r in read_metrics(f / "metrics.jsonl")]
