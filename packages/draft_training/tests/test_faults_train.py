"""Training faults: a truncated checkpoint to resume from is one line (exit 2); a run killed (SIGKILL) at a
random step resumes to the uninterrupted run's losses bit for bit, also in a process with another thread count; the
checkpoint's numeric settings are restored on resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from vidspec.decoding.cli import main as vidspec
from vidspec.draft_training.callbacks import read_metrics
from vidspec.draft_training.testing import tiny_recipe


def _losses(run) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r}


def test_resuming_from_a_truncated_checkpoint_is_one_line_exit_2(tmp_path, tiny_dataset, capsys):
    run = tmp_path / "run"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=2, every=2))
    assert vidspec(["train", "fit", "--config", recipe]) == 0
    last = run / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # a kill or a full disk while it was written
    capsys.readouterr()
    for ckpt in (str(last), "last"):
        assert vidspec(["train", "fit", "--config", recipe, "--ckpt_path", ckpt]) == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and str(last) in lines[0] and "truncated" in lines[0], err
    assert vidspec(["train", "fit", "--config", recipe, "--ckpt_path", str(tmp_path / "nope.ckpt")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_run_killed_at_a_random_step_resumes_bit_exact(tmp_path, tiny_dataset):
    """Killed at a random step with 2 intra-op threads, resumed by a process that got 1 (another OMP_NUM_THREADS,
    a scheduler's CPU set): the checkpoint's thread count is restored, and every loss equals the uninterrupted
    run's. Without that, the CPU sums of the resumed steps split over another thread count and drift."""
    steps = 8
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    exe = [sys.executable, "-m", "vidspec.decoding.cli", "train", "fit", "--config"]
    full = tmp_path / "full"
    subprocess.run([*exe, str(tiny_recipe(full, tiny_dataset, max_steps=steps, every=2, num_workers=1))],
                   env=env, check=True, capture_output=True, timeout=600)
    run = tmp_path / "killed"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=steps, every=2, num_workers=1))
    kill_after = random.Random().randint(2, steps - 2)  # a new step each time: the kill lands anywhere
    proc = subprocess.Popen([*exe, recipe], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        done = _losses(run) if (run / "metrics.jsonl").exists() else {}
        # a kill before the first checkpoint (step 2) is fully written leaves nothing to resume and the rerun starts
        # over: kill only once a later step is logged (the checkpoint is saved before the next step runs)
        if done and max(done) >= max(kill_after, 3):
            break
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.fail("the run ended before it could be killed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run([*exe, recipe, "--ckpt_path", "last"], env={**env, "OMP_NUM_THREADS": "1"},
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    want, got = _losses(full), _losses(run)
    assert sorted(got) == sorted(want) == list(range(1, steps + 1))
    assert got == want, f"killed after step {kill_after}: " + ", ".join(
        f"step {s}: {got[s] - want[s]:+.3e}" for s in want if got[s] != want[s])
    assert "torch_threads set to 2 as the checkpointed run had it (this process started with 1)" in resumed.stderr


def test_checkpoint_records_the_thread_count_and_a_resume_restores_it(tmp_path, tiny_dataset, caplog):
    """In one process: a run saved with 2 intra-op threads, resumed after the count changed to 1, trains its
    resumed steps with 2 again (and says so); an old checkpoint without the record resumes with a warning."""
    import torch

    from vidspec.draft_training.callbacks import NUMERICS_KEY

    before = torch.get_num_threads()
    run = tmp_path / "run"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=4, every=2))
    seen = []
    try:
        torch.set_num_threads(2)
        assert vidspec(["train", "fit", "--config", recipe, "--trainer.max_steps", "2"]) == 0
        ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
        assert ckpt[NUMERICS_KEY]["torch_threads"] == 2
        torch.set_num_threads(1)
        import vidspec.draft_training.sft as sft

        step = sft.VLMSFTModule.training_step

        def spy(self, *a, **k):
            seen.append(torch.get_num_threads())
            return step(self, *a, **k)

        sft.VLMSFTModule.training_step = spy
        try:
            with caplog.at_level("WARNING"):
                assert vidspec(["train", "fit", "--config", recipe, "--ckpt_path", "last"]) == 0
        finally:
            sft.VLMSFTModule.training_step = step
        assert seen == [2, 2], seen
        assert "torch_threads set to 2" in caplog.text
        del ckpt[NUMERICS_KEY]  # a checkpoint from before the record
        torch.save(ckpt, run / "old.ckpt")
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert vidspec(["train", "fit", "--config", recipe, "--ckpt_path", str(run / "old.ckpt")]) == 0
        assert "does not record the run's thread count" in caplog.text
    finally:
        torch.set_num_threads(before)
