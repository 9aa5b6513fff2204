"""Evaluation CI: passes against a baseline it just wrote, fails on a doctored one."""

from __future__ import annotations

import json

import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation import runner as runner_mod
from vidspec.evaluation.eval_ci import Thresholds, compare, run_eval_ci


def test_eval_ci_baseline_roundtrip(tmp_path, capsys, monkeypatch):
    out, baseline = tmp_path / "ci", tmp_path / "baseline.json"
    kw = dict(out=str(out), baseline=str(baseline), limit=2, max_new_tokens=8, releases=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="--reason"):
        run_eval_ci(update_baseline=True, **kw)
    assert run_eval_ci(update_baseline=True, reason="test baseline", **kw) == 0
    data = json.loads(baseline.read_text())
    (entry,) = data["setups"].values()
    assert entry["reason"] == "test baseline" and data["history"][0]["reason"] == "test baseline"
    assert set(entry["methods"]) == {"ar", "sd", "lvspec", "lvspec-pst", "fly", "sparrow", "sparrow-lvspec-pst",
                                     "tree-sd", "tree-sparrow"}

    # The rerun resumes the same folder, so it decodes nothing: it only compares.
    monkeypatch.setattr(runner_mod, "load_models", lambda *a: pytest.fail("decoded again"))
    capsys.readouterr()
    assert run_eval_ci(**kw) == 0
    printed = capsys.readouterr().out
    assert "| sparrow-lvspec-pst |" in printed and "eval-ci: passed" in printed

    for m in entry["methods"].values():
        m["tau"] *= 1.2  # a baseline 20% better than what the code does now
    baseline.write_text(json.dumps(data))
    assert run_eval_ci(**kw) == 1
    printed = capsys.readouterr().out
    assert "eval-ci: FAILED" in printed
    assert printed.count("FAIL sd: τ") == 1

    baseline.write_text(json.dumps({**data, "setups": {}}))
    assert run_eval_ci(**kw) == 1
    assert "no baseline for models" in capsys.readouterr().out


def _m(tau=2.0, identical=1.0, retention=0.9):
    return {"tau": tau, "token_identical_share": identical, "retention": retention, "dsr": 1.5}


def test_compare_rules():
    base = {"methods": {"sd": _m(), "lvspec": _m(tau=3.0, identical=0.2), "fly": _m()}}
    th = Thresholds()
    checks = {c.method: c for c in compare({"sd": _m(identical=0.5), "lvspec": _m(tau=2.75, identical=0.0,
                                                                                  retention=0.86)}, base, th)}
    assert any("token-identical" in p for p in checks["sd"].problems)
    assert checks["lvspec"].problems == []  # 8% τ drop and 4 points retention: within the margins
    assert checks["fly"].problems == ["method no longer runs"]
    worse = compare({"lvspec": _m(tau=2.6, identical=0.0, retention=0.8)}, base, th)[0]
    assert len(worse.problems) == 2


def test_unreadable_baseline_fails_before_evaluating(tmp_path, monkeypatch):
    bad = tmp_path / "baseline.json"
    bad.write_text("{not json")
    monkeypatch.setattr(runner_mod, "run_eval", lambda *a, **k: pytest.fail("evaluated with a bad baseline"))
    with pytest.raises(ConfigError, match="baseline"):
        run_eval_ci(out=str(tmp_path / "ci"), baseline=str(bad), limit=1, releases=str(tmp_path / "none"))


def test_a_replaced_release_needs_a_new_baseline(tmp_path):
    """The baseline is keyed by the release folders; their weights fingerprints are recorded with it, so a release
    replaced in the same folder fails the gate until the baseline is updated on purpose."""
    from vidspec.evaluation.demo import discover_models
    from vidspec.evaluation.eval_ci import weight_problems

    target = str(tmp_path / "synthvid-target")
    for name, extra in (("synthvid-target", {"kind": "video-llm"}),
                        ("sparrow-synthvid", {"kind": "sparrow-draft", "target_id": target})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({**extra, "fingerprint": f"{name}-1"}))
    models = discover_models(tmp_path).describe()
    assert models["fingerprints"] == {"target": "synthvid-target-1", "sparrow": "sparrow-synthvid-1"}
    base = {"models": models}
    assert weight_problems(base, models) == []
    (tmp_path / "synthvid-target" / "manifest.json").write_text(json.dumps({"kind": "video-llm", "fingerprint": "t-2"}))
    (problem,) = weight_problems(base, discover_models(tmp_path).describe())
    assert "other weights for target" in problem and "--update-baseline" in problem
    # a baseline from before fingerprints were recorded, against releases: also asks for an update
    assert weight_problems({"models": {"target": models["target"]}}, models)
    # the built-in tiny models have none, and need none
    tiny = discover_models(tmp_path / "none").describe()
    assert "fingerprints" not in tiny and weight_problems({"models": tiny}, tiny) == []
