"""benchmarks/round_profile_gpu.py on CPU: the per-round split, cProfile and torch.profiler outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

REPO = Path(__file__).resolve().parents[3]
RELEASES = REPO / "data" / "releases"


def test_round_profile_smoke(tmp_path):
    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=3, seed=0, preset="easy", size="64x64",
                                                             split="validation", mcq_per_video=1,
                                                             open_per_video=0), progress=False)
    out = tmp_path / "prof"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "round_profile_gpu.py"), "--device", "cpu",
                           "--target", str(RELEASES / "synthvid-target"),
                           "--sparrow", str(RELEASES / "sparrow-synthvid"),
                           "--draft", str(RELEASES / "synthvid-draft"), "--data", str(data), "--limit", "3",
                           "--methods", "ar,sparrow", "--max-new-tokens", "8", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads((out / "round_profile.json").read_text())
    assert set(res) == {"ar", "sparrow"}
    assert res["sparrow"]["drafter"] == "FastSparrowDrafter" and res["ar"]["drafter"] == "NoDrafter"
    assert res["ar"]["rounds"] == res["ar"]["tok"] - 1  # AR: one pass per token after the first
    assert res["sparrow"]["rounds"] < res["sparrow"]["tok"] - 1  # drafts were accepted
    for m in res:
        assert res[m]["verify_ms"] > 0 and res[m]["ms_per_token"] > 0
        for name in (f"cprof-{m}.txt", f"cprof-{m}-cum.txt", f"tprof-{m}.txt", f"trace-{m}.json"):
            assert (out / name).stat().st_size > 0, name


def test_git_info_prefers_the_commit_given_in_the_environment(monkeypatch):
    from vidspec.evaluation.runner import git_info

    monkeypatch.delenv("VIDSPEC_GIT_SHA", raising=False)
    here = git_info(REPO)
    assert here["sha"] is None or len(here["sha"]) == 40
    monkeypatch.setenv("VIDSPEC_GIT_SHA", "abc1234")
    assert git_info(REPO) == {"sha": "abc1234", "dirty": None, "source": "VIDSPEC_GIT_SHA"}
