"""Tree methods in the side-by-side runner: lossless records, tree options recorded and fixed on resume."""

from __future__ import annotations

import json
import typing

import pytest

from vidspec.decoding.cli import main
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import method_names
from vidspec.decoding.testing import aligned_sparrow
from vidspec.evaluation import runner as runner_mod
from vidspec.evaluation.records import SampleRecord, read_jsonl
from vidspec.evaluation.runner import EvalConfig, EvalModels, build_decoders, run_eval, tree_verify_sizes

TREE = dict(tree_total=10, tree_depth=3, tree_top_k=3)



@pytest.fixture(scope="module")
def models():
    from vidspec.decoding.models import load_target
    from vidspec.evaluation.benchmarks import get_task

    target = load_target("tiny-qwen2.5-vl", max_frames=get_task("synthvid_captions").frames)
    return EvalModels(target=target, sparrow=aligned_sparrow(target), notes={"target": "tiny-qwen2.5-vl"})


@pytest.fixture(scope="module")
def run(synthvid, models, tmp_path_factory):
    out = tmp_path_factory.mktemp("tree")
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(out), sparrow="random",
                     methods="ar,tree-sparrow", max_new_tokens=16, progress=False, **TREE)
    return cfg, run_eval(cfg, models=models)


def test_tree_records_are_token_identical_to_ar(run):
    cfg, summary = run
    records = read_jsonl(f"{cfg.out}/records.jsonl")
    assert sorted(r["method"] for r in records) == ["ar", "ar", "tree-sparrow", "tree-sparrow"]
    for r in records:
        hints = set(typing.get_type_hints(SampleRecord))
        # Every field but the benchmark-dependent ones (a scoring protocol's scorer, categories) and the
        # adaptation's (only where a policy adapted) is always there.
        optional = {"scorer", "categories", "k_history", "drafting_stopped_at", "loose_stopped_at", "loose_rounds",
                    "loose_helped_rounds"}
        assert hints - optional <= set(r) <= hints, "records follow the TypedDict"
        if r["method"] != "tree-sparrow":
            continue
        assert r["token_identical_to_ar"] and r["dsr"] is not None
        assert r["k"] == 3 and len(r["acceptance_by_position"]) <= 3  # the path's positions, not the tree's nodes
        assert r["drafted"] >= r["accepted"] > 0 and r["target_passes"] >= 1
        assert r["draft_ms_per_round"] > 0 and r["verify_ms_per_round"] > 0
        assert r["drafter"] == "TreeSparrowDrafter"
    s = summary["methods"]["tree-sparrow"]
    assert s["token_identical_share"] == 1.0 and s["tau"] > 1.0
    on_disk = json.loads(open(f"{cfg.out}/config.json").read())["decode"]
    assert (on_disk["tree_total"], on_disk["tree_depth"], on_disk["tree_top_k"]) == (10, 3, 3)


def test_resume_with_another_tree_is_refused(run, no_decoding):
    cfg, _ = run
    again = run_eval(cfg)  # same config: nothing to decode
    assert again["methods"].keys() == {"ar", "tree-sparrow"}
    for field, value in (("tree_depth", 4), ("tree_total", 12), ("tree_top_k", 2)):
        with pytest.raises(ConfigError, match=field):
            run_eval(EvalConfig.from_flags(**{**cfg.to_dict(), "methods": cfg.methods, field: value}))


def test_runs_recorded_before_the_tree_options_resume_with_the_defaults(tmp_path):
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", out=str(tmp_path), methods="ar,sd")
    old = cfg.flat()
    del old["tree_total"], old["tree_depth"], old["tree_top_k"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    runner_mod._check_resume(tmp_path, cfg)  # no error
    assert not {"tree_total", "tree_depth", "tree_top_k"} & runner_mod.RESUMABLE_CHANGES
    with pytest.raises(ConfigError, match="tree_depth"):
        runner_mod._check_resume(tmp_path, EvalConfig.from_flags(**{**cfg.to_dict(), "tree_depth": 4}))


def test_bad_tree_options_are_refused():
    for field, flag in (("tree_total", "--tree-total"), ("tree_depth", "--tree-depth"), ("tree_top_k", "--tree-top-k")):
        with pytest.raises(ConfigError, match=flag):
            EvalConfig.from_flags(benchmark="b", out="x", methods="ar,tree-sparrow", sparrow="random", **{field: 0})
    with pytest.raises(ConfigError, match="--sparrow"):
        EvalConfig.from_flags(benchmark="b", out="x", methods="ar,tree-sparrow")


def test_eval_cli_tree_methods(capfd, synthvid, tmp_path):
    out = tmp_path / "cli"
    args = ["eval", "--benchmark", "synthvid_captions", "--data", str(synthvid), "--out", str(out), "--limit", "1",
            "--max-new-tokens", "6", "--no-progress", "--warmup", "false", "--report", "false"]
    code = main([*args, "--methods", "ar,tree-sd,tree-sparrow", "--sparrow", "random", "--tree-total", "6",
                 "--tree-depth", "2", "--tree_top_k", "3"])
    _, err = capfd.readouterr()
    assert code == 0, err
    records = read_jsonl(out / "records.jsonl")
    assert {r["method"] for r in records} == {"ar", "tree-sd", "tree-sparrow"}
    assert all(r["token_identical_to_ar"] for r in records)
    code = main([*args, "--methods", "ar,tree-sd", "--tree-depth", "0"])
    _, err = capfd.readouterr()
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "--tree-depth" in lines[0], err


def test_fast_engine_tree_decoders_share_the_target(models, tmp_path):
    from vidspec.decoding.fast import FastTarget
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

    cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), methods="ar,sparrow,tree-sparrow", sparrow="random",
                     engine="fast", fast_max_len=512, tree_total=80)
    decs = build_decoders(cfg, models)
    fast_target = decs["ar"].target
    assert isinstance(fast_target, FastTarget) and all(d.target is fast_target for d in decs.values())
    assert isinstance(decs["tree-sparrow"], TreeSpeculativeDecoder) and decs["tree-sparrow"].total_tokens == 80
    assert fast_target.lm.max_tree == 81  # raised so the verify tree (80 + 1 nodes) fits
    assert runner_mod.capture_fast_graphs(decs["tree-sparrow"], 8) == 0  # nothing to capture off CUDA


def test_fast_tree_draft_graphs_are_captured_before_timing(models, tmp_path, monkeypatch):
    """On the fast engine tree-sparrow drafts with FastTreeSparrowDrafter, and the runner's warm-up
    asks it for the round graphs of the method's tree shape (on CUDA they would otherwise be captured
    inside the first timed decodes)."""
    from vidspec.decoding.fast.sparrow_tree_drafter import FastTreeSparrowDrafter

    cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), methods="ar,tree-sparrow", sparrow="random", engine="fast",
                     fast_max_len=512, tree_total=10, tree_depth=3, tree_top_k=4)
    dec = build_decoders(cfg, models)["tree-sparrow"]
    assert isinstance(dec.drafter, FastTreeSparrowDrafter)
    calls = []
    monkeypatch.setattr(dec.drafter, "warmup", lambda target, depth, top_k, max_text=None, total=None: calls.append(
        (target, depth, top_k, max_text, total)) or 7)
    assert runner_mod.capture_fast_graphs(dec, 8) == 7
    # Device rounds (the default) also need the post-processing graphs of a 10-node tree.
    assert calls == [(dec.target, 3, 4, dec.drafter.cache_length + 8 + 3 + 1, 10)]
    dec.device_rounds = False
    runner_mod.capture_fast_graphs(dec, 8)
    assert calls[-1][-1] is None


def test_tree_verify_sizes():
    # depth 1: top_k nodes; depth 2: top_k + top_k^2, capped at total; + x_last; 1 when no level is left
    assert tree_verify_sizes(48, 8, 8) == (1, 9, 49)
    assert tree_verify_sizes(10, 3, 3) == (1, 4, 11)
    assert tree_verify_sizes(100, 3, 2) == (1, 3, 7, 11)


def test_eval_ci_runs_the_tree_methods(tmp_path, monkeypatch):
    """eval-ci gates every method the models can run, the tree methods included (they are in its baseline)."""
    from vidspec.evaluation import demo, eval_ci

    seen = {}

    class Stop(Exception):
        pass

    def fake_run_eval(cfg):
        seen["methods"] = cfg.methods
        raise Stop

    monkeypatch.setattr(demo, "build_validation_set", lambda path, num_videos, seed=0: tmp_path)
    monkeypatch.setattr(runner_mod, "run_eval", fake_run_eval)
    with pytest.raises(Stop):
        eval_ci.run_eval_ci(out=str(tmp_path / "ci"), baseline=str(tmp_path / "none.json"),
                            releases=str(tmp_path / "no-releases"))
    assert "sd" in seen["methods"] and "sparrow" in seen["methods"]
    assert set(method_names(loop="tree")) <= set(seen["methods"])
    assert set(method_names(loop="tree")) <= set(demo.available_methods(demo.discover_models(str(tmp_path / "no-releases"))))
