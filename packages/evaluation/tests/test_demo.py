"""``vidspec demo`` in fallback mode (no releases yet), and release discovery."""

from __future__ import annotations

import json
from pathlib import Path

from vidspec.decoding.cli import main
from vidspec.decoding.methods import METHODS
from vidspec.evaluation.demo import available_methods, discover_models


def test_demo_falls_back_to_tiny_models(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--limit", "1", "--max-new-tokens", "8", "--out", str(out), "--data-dir",
                 str(tmp_path / "sv"), "--releases", str(tmp_path / "no-releases"), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "missing: no target release" in printed and "random-weight" in printed
    report = (out / "report.md").read_text()
    for m in METHODS:
        assert f"| {m}" in report and f"| {m}" in printed
    assert (out / "plots" / "synthvid_captions-pareto.png").is_file()
    assert json.loads((out / "eval" / "summary.json").read_text())["n_samples"] == 1
    cfg = json.loads((out / "eval" / "config.json").read_text())["decode"]  # the headline's probability gate by default
    assert (cfg["lam"], cfg["predicate"], cfg["eps"], cfg["pst_window"]) == (1.0, "prob", 0.5, 0)
    assert "probability gate" in printed
    paper = tmp_path / "demo-paper"
    assert main(["demo", "--limit", "1", "--max-new-tokens", "4", "--out", str(paper), "--data-dir", str(tmp_path / "sv"),
                 "--releases", str(tmp_path / "no-releases"), "--no-progress", "--paper_rule", "true"]) == 0
    cfg = json.loads((paper / "eval" / "config.json").read_text())["decode"]
    assert (cfg["lam"], cfg["predicate"]) == (0.7, "always") and "LVSpec's own rule" in capsys.readouterr().out


def _release(path, **manifest):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_discover_releases(tmp_path):
    _release(tmp_path / "synthvid-target-cpu", kind="video-llm")
    _release(tmp_path / "synthvid-draft-cpu", kind="video-llm")
    _release(tmp_path / "sparrow-synthvid-cpu", kind="sparrow-draft", target_id="synthvid-target-cpu")
    c = discover_models(tmp_path)
    assert c.source == "release" and c.missing == []
    assert c.target.endswith("synthvid-target-cpu") and c.draft.endswith("synthvid-draft-cpu")
    assert c.sparrow.endswith("sparrow-synthvid-cpu")
    assert available_methods(c) == tuple(METHODS)

    other = tmp_path / "only-target"
    _release(other / "synthvid-target-cpu", kind="video-llm")
    c = discover_models(other)
    assert c.draft is None and c.sparrow == "random" and len(c.missing) == 2
    assert "sd" not in available_methods(c) and "sparrow" in available_methods(c)


def test_train_says_what_is_not_available(tmp_path, monkeypatch):
    from vidspec.evaluation import demo

    monkeypatch.setattr(demo, "TRAIN_RECIPES", {"target": str(tmp_path / "none.yaml")})
    monkeypatch.setattr(demo, "_run_step", lambda cmd: (_ for _ in ()).throw(AssertionError(cmd)))
    releases, missing = demo.train_models(tmp_path)
    assert releases == {} and "no recipe" in missing[0]


def test_recipe_header_commands(tmp_path):
    from vidspec.evaluation.demo import _recipe_commands

    recipe = tmp_path / "r.yaml"
    recipe.write_text("# Data:\n#   vidspec data synthvid --out d \\\n#       --num-videos 3\n# Train:\n"
                      "#   vidspec train fit --config r.yaml\nseed_everything: 0\n# vidspec data ignored\n")
    assert _recipe_commands(recipe, "vidspec data") == [
        ["vidspec", "data", "synthvid", "--out", "d", "--num-videos", "3"]]


def test_demo_and_eval_ci_videos_are_not_training_scenes(tmp_path):
    """Every training recipe and release uses --seed 0; the evaluation videos must be other scenes."""
    from datasets import load_from_disk

    from vidspec.evaluation.demo import build_validation_set
    from vidspec.evaluation.eval_ci import CI_SEED
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    train = generate_synthvid(tmp_path / "train", SynthVidConfig(num_videos=4, seed=0, preset="easy", size="64x64",
                                                                 split="train", mcq_per_video=0, open_per_video=0),
                              progress=False)
    seen = set(load_from_disk(str(train))["train"]["scene_id"])
    for seed in (None, CI_SEED):
        kw = {} if seed is None else {"seed": seed}
        held = build_validation_set(tmp_path / f"held-{seed}", num_videos=4, **kw)
        assert not seen & set(load_from_disk(str(held))["validation"]["scene_id"])


def test_train_resolves_every_recipe_and_distils_sparrow_from_the_retrained_target(tmp_path, monkeypatch):
    """`vidspec demo --train`'s steps, without running them: every role's recipe exists, each runs its header's
    data steps then `train fit`, and the Sparrow draft is distilled from the target retrained in the same run."""
    from vidspec.evaluation import demo

    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # the recipes are named from the repository root
    steps, missing = demo.train_steps(tmp_path)
    assert missing == []
    assert [role for role, *_ in steps] == ["target", "draft", "sparrow"]
    for role, commands, run_dir, release in steps:
        fit = commands[-1]
        assert fit[:3] == ["train", "fit", "--config"] and Path(fit[3]).is_file() and fit[3] == demo.TRAIN_RECIPES[role]
        assert run_dir == tmp_path / "train" / role and release == tmp_path / "releases" / role
    sparrow = dict((role, commands) for role, commands, *_ in steps)["sparrow"]
    target = str(tmp_path / "releases" / "target")
    distill = [c for c in sparrow if c[0] == "distill-data"]
    assert distill and all(c[c.index("--target") + 1] == target for c in distill)
    assert sparrow[-1][-2:] == ["--model.init_args.target", target]
