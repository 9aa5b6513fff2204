"""The SynthVid dataset on disk and ``vidspec data synthvid``: schema, determinism, splits, atomicity, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from vidspec.decoding.cli import main as vidspec_main
from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid import dataset as ds_mod
from vidspec.evaluation.synthvid.dataset import (
    SynthVidConfig,
    generate_synthvid,
    is_synthvid_dataset,
    load_synthvid,
)
from vidspec.evaluation.synthvid.judge import judge_caption
from vidspec.evaluation.synthvid.tokenizer import load_tokenizer

CFG = SynthVidConfig(num_videos=12, seed=5, frames=8, size="64x48", styles="alpha,beta", captions_per_video=2)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sv")
    a = generate_synthvid(root / "a", CFG, progress=False)
    b = generate_synthvid(root / "b", CFG, progress=False)
    return a, b


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes(built):
    a, b = built
    fa, fb = _files(a), _files(b)
    assert fa.keys() == fb.keys()
    different = [k for k in fa if fa[k] != fb[k]]
    assert different == []


def test_other_seed_differs(tmp_path, built):
    c = generate_synthvid(tmp_path / "c", SynthVidConfig(**{**CFG.__dict__, "seed": 6}), progress=False)
    assert datasets.load_from_disk(str(c))["train"]["answer"] != datasets.load_from_disk(str(built[0]))["train"]["answer"]


def test_schema_and_splits(built):
    root = built[0]
    assert is_synthvid_dataset(root)
    caps = datasets.load_from_disk(str(root))
    mcq = load_synthvid(root, "mcq")
    openqa = load_synthvid(root, "openqa")
    assert set(caps) == {"train", "validation", "test"}
    for col in ("video", "question", "answer", "videoID", "facts", "style", "pieces", "labels"):
        assert col in caps["train"].column_names
    for col in ("videoID", "question", "options", "answer", "task_type", "video"):
        assert col in mcq["train"].column_names
    seen: dict[str, str] = {}
    for split in caps:
        for row in caps[split]:
            # No scene (video) is in two splits.
            assert seen.setdefault(row["scene_id"], split) == split
            assert (root / row["video"]).is_file() and row["video"].startswith(f"videos/{split}/")
            assert "".join(row["pieces"]) == row["answer"] and len(row["labels"]) == len(row["pieces"])
            assert judge_caption(row["answer"], json.loads(row["facts"])).precision == 1.0
            assert row["style"] in ("alpha", "beta")
        assert {r["videoID"] for r in mcq[split]} <= {r["videoID"] for r in caps[split]}
    assert len(seen) == CFG.num_videos
    assert sum(len(caps[s]) for s in caps) == CFG.num_videos * CFG.captions_per_video
    for row in mcq["train"]:
        assert len(row["options"]) == 4 and row["answer"] in "ABCD"
    assert len(openqa["train"]) > 0
    manifest = json.loads((root / "synthvid.json").read_text())
    assert manifest["config"]["num_videos"] == CFG.num_videos and manifest["world"]["width"] == 64


def test_tokenizer_ships_with_dataset(built):
    tok = load_tokenizer(built[0])
    row = datasets.load_from_disk(str(built[0]))["train"][0]
    assert tok.convert_ids_to_tokens(tok(row["answer"])["input_ids"]) == row["pieces"]


def test_video_matches_frame_count(built):
    decord = pytest.importorskip("decord")
    row = datasets.load_from_disk(str(built[0]))["test"][0]
    vr = decord.VideoReader(str(built[0] / row["video"]))
    assert len(vr) == 8 and vr[0].shape == (48, 64, 3)


def test_workers_do_not_change_output(tmp_path, built):
    cfg = SynthVidConfig(**{**CFG.__dict__, "workers": 2})
    c = generate_synthvid(tmp_path / "w", cfg, progress=False)
    fa, fc = _files(built[0]), _files(c)
    videos = [k for k in fa if k.endswith(".mp4")]
    assert videos and all(fa[k] == fc[k] for k in videos)
    assert datasets.load_from_disk(str(c))["train"]["answer"] == datasets.load_from_disk(str(built[0]))["train"]["answer"]


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    real = ds_mod._make_video
    calls = {"n": 0}

    def flaky(task):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(ds_mod, "_make_video", flaky)
    with pytest.raises(KeyboardInterrupt):
        generate_synthvid(tmp_path / "out", SynthVidConfig(num_videos=5, frames=4, size="48x48"), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_regenerates_over_synthvid_but_refuses_other_folders(tmp_path):
    small = SynthVidConfig(num_videos=2, frames=4, size="48x48", mcq_per_video=0, open_per_video=0)
    out = generate_synthvid(tmp_path / "d", small, progress=False)
    generate_synthvid(out, SynthVidConfig(**{**small.__dict__, "seed": 1}), progress=False)
    assert json.loads((out / "synthvid.json").read_text())["config"]["seed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError):
        generate_synthvid(other, small, progress=False)
    assert (other / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "kwargs",
    [{"num_videos": 0}, {"num_videos": 2, "size": "33x32"}, {"num_videos": 2, "size": "big"},
     {"num_videos": 2, "mcq_per_video": -1}, {"num_videos": 2, "split": "train=0"}, {"num_videos": 2, "styles": "zeta"},
     {"num_videos": 2, "max_objects": 9}, {"num_videos": 2, "frames": 0}],
)
def test_bad_configs(kwargs):
    with pytest.raises(ConfigError):
        SynthVidConfig(**kwargs)


def test_cli_generates(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = vidspec_main(["data", "synthvid", "--out", str(out), "--num-videos", "3", "--seed", "2", "--frames", "4",
                       "--size", "48x48", "--split", "test", "--no-progress", "true"])
    assert rc == 0
    caps = datasets.load_from_disk(str(out))
    assert list(caps) == ["test"] and len(caps["test"]) == 3


@pytest.mark.parametrize(
    "args",
    [
        ["--num-videos", "0"],
        ["--num-videos", "-3"],
        ["--num-videos", "x"],
        ["--num-videos", "2", "--size", "10x10"],
        ["--num-videos", "2", "--size", "64"],
        ["--num-videos", "2", "--frames", "0"],
        ["--num-videos", "2", "--preset", "nope"],
        ["--num-videos", "2", "--bogus", "1"],
        [],
    ],
)
def test_cli_bad_input_exits_2(tmp_path, capsys, args):
    rc = vidspec_main(["data", "synthvid", "--out", str(tmp_path / "o"), *args])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err
    assert not (tmp_path / "o").exists()


def test_cli_refuses_foreign_out_and_unknown_dataset(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert vidspec_main(["data", "synthvid", "--out", str(tmp_path / "f"), "--num-videos", "1"]) == 2
    # A file where a parent folder should be: one line, not an OSError traceback.
    assert vidspec_main(["data", "synthvid", "--out", str(tmp_path / "f" / "sv"), "--num-videos", "1"]) == 2
    assert vidspec_main(["data", "imagenet"]) == 2
    assert vidspec_main(["data", "--help"]) == 0


def test_split_assignment_is_disjoint_and_complete():
    for n in (1, 2, 7, 100):
        parts = ds_mod.assign_splits(n, {"train": 0.8, "validation": 0.1, "test": 0.1}, seed=3)
        allidx = [i for v in parts.values() for i in v]
        assert sorted(allidx) == list(range(n))
    assert np.array_equal(
        ds_mod.assign_splits(50, {"train": 0.5, "test": 0.5}, 1)["test"],
        ds_mod.assign_splits(50, {"train": 0.5, "test": 0.5}, 1)["test"],
    )


def test_a_video_keeps_its_split_when_the_dataset_grows():
    shares = {"train": 0.8, "validation": 0.1, "test": 0.1}
    for seed in (0, 1, 5):
        big = ds_mod.assign_splits(1000, shares, seed)
        split_of = {i: name for name, idx in big.items() for i in idx}
        for n in (1, 7, 12, 50, 333):
            small = ds_mod.assign_splits(n, shares, seed)
            assert {i: name for name, idx in small.items() for i in idx} == {i: split_of[i] for i in range(n)}, (seed, n)


def test_split_shares_are_met_closely_at_every_size():
    shares = {"train": 0.8, "validation": 0.1, "test": 0.1}
    for seed in range(5):
        counts = dict.fromkeys(shares, 0)
        for i in range(2000):
            counts[ds_mod.split_of(seed, i, shares)] += 1
            if i + 1 >= 13:
                # Every split is non-empty from 13 videos on, and no share is off by more than 4 videos.
                assert all(abs(counts[k] - (i + 1) * v) <= 4 for k, v in shares.items()), (seed, i, counts)
    # The order the shares are written in does not matter; a zero share gets no video.
    a = ds_mod.assign_splits(100, {"test": 0.5, "train": 0.5}, 3)
    assert a == ds_mod.assign_splits(100, {"train": 0.5, "test": 0.5}, 3)
    assert ds_mod.assign_splits(50, {"train": 1.0, "test": 0.0}, 3) == {"train": list(range(50)), "test": []}


def test_grown_dataset_keeps_videos_in_their_splits(tmp_path):
    small = SynthVidConfig(num_videos=8, seed=2, frames=2, size="48x48", mcq_per_video=0, open_per_video=0)
    grown = SynthVidConfig(**{**small.__dict__, "num_videos": 20})
    where = []
    for cfg, name in ((small, "small"), (grown, "grown")):
        caps = datasets.load_from_disk(str(generate_synthvid(tmp_path / name, cfg, progress=False)))
        where.append({vid: split for split in caps for vid in caps[split]["videoID"]})
    assert where[0] == {vid: where[1][vid] for vid in where[0]}
    assert len(where[1]) == 20
