"""``vidspec eval`` interrupted by a Ctrl-C that lands in the video reader's ``__del__``: exit 130, then resumes."""

from __future__ import annotations

import signal

import pytest

from vidspec.decoding import video


class _InterruptOnDel:
    """Wraps a decord reader; freeing it delivers a real SIGINT while its ``__del__`` runs."""

    def __init__(self, inner, armed):
        self._inner = inner
        self._armed = armed

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __len__(self):
        return len(self._inner)

    def __del__(self):
        if self._armed():
            signal.raise_signal(signal.SIGINT)  # the default handler raises KeyboardInterrupt here...
            self._inner = None  # ...at the next bytecode of this finaliser, where Python only prints it


def _arm(monkeypatch, when):
    if not video.AutoReader.decord_available():
        pytest.skip("decord is not installed")
    real = video.DecordReader._open
    count = {"n": 0}

    def _open(self, path):
        count["n"] += 1
        n = count["n"]
        return _InterruptOnDel(real(self, path), lambda: when(n))

    monkeypatch.setattr(video.DecordReader, "_open", _open)
    return count


@pytest.fixture(autouse=True)
def _default_sigint():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_eval_interrupted_in_reader_cleanup_exits_130_and_resumes(tmp_path, monkeypatch, capfd):
    from vidspec.decoding.cli import main
    from vidspec.evaluation.records import read_jsonl
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=3, seed=1, preset="easy", size="64x64",
                                                             split="validation", mcq_per_video=0,
                                                             open_per_video=0), progress=False)
    out = tmp_path / "run"
    args = ["eval", "--benchmark", "synthvid_captions", "--data", str(data), "--out", str(out), "--methods", "ar,sd",
            "--max-new-tokens", "4", "--warmup", "false", "--no-progress", "--report", "false"]
    count = _arm(monkeypatch, lambda n: n == 4)  # the second video read
    assert main(args) == 130
    assert count["n"] == 4, "the run stopped at the interrupted read"
    assert "interrupted" in capfd.readouterr().err
    done = read_jsonl(out / "records.jsonl")
    assert 0 < len(done) < 6
    monkeypatch.undo()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert main(args) == 0, capfd.readouterr().err
    keys = [(r["sample_id"], r["method"]) for r in read_jsonl(out / "records.jsonl")]
    assert len(keys) == len(set(keys)) == 6
