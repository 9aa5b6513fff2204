"""benchmarks/release_shape_cpu.py: candidate release target shapes, timed on this CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from release_shape_cpu import main, parse_shape  # noqa: E402


def test_parse_shape(capsys):
    assert parse_shape("24x128/2") == {"layers": 24, "hidden": 128, "heads": 2, "kv_heads": 2, "intermediate": None}
    assert parse_shape("16x192/3")["kv_heads"] == 1  # odd heads: one key/value head
    assert parse_shape("24x96/2:f192")["intermediate"] == 192  # the MLP's width given
    for bad in ("24x128", "24x130/4", "0x128/2", "axb/c", "24x96/2:g192", "24x96/2:f", "24x96/2:f0"):
        with pytest.raises(ValueError, match="LAYERSxHIDDEN/HEADS|multiple"):
            parse_shape(bad)
    with pytest.raises(SystemExit) as e:  # on the command line: a usage error naming the shape
        main(["--shapes", "6x192/6,24x130/4"])
    assert e.value.code == 2 and "'24x130/4'" in capsys.readouterr().err


def test_two_shapes_decode_the_asked_length(tmp_path, capsys):
    out = tmp_path / "shapes.json"
    assert main(["--shapes", "2x64/2,3x64/1", "--videos", "1", "--repeats", "1", "--new-tokens", "6",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    a, b = doc["shapes"]
    assert (a["layers"], b["layers"]) == (2, 3) and a["parameters"] < b["parameters"]
    assert a["new_tokens"] == b["new_tokens"] == 6 and a["seconds_per_caption"] > 0
    assert a["bf16_mb"] == pytest.approx(a["parameters"] * 2 / 1e6) and doc["machine"]["device"] == "cpu"
    assert "| 3x64/1 |" in capsys.readouterr().out


def test_qwen_family_times_a_qwen_target(tmp_path, capsys):
    # A shape is built with the release tower train_releases_gpu.sh gives a Qwen target (random weights), written as
    # a release folder that load_target reads, and decoded to the asked length.
    from release_shape_cpu import QWEN_TOWER

    out = tmp_path / "qwen.json"
    assert main(["--family", "qwen2.5-vl", "--shapes", "2x64/2", "--videos", "1", "--repeats", "1",
                 "--new-tokens", "5", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = doc["shapes"]
    assert doc["family"] == "qwen2.5-vl" and row["new_tokens"] == 5 and row["seconds_per_caption"] > 0
    from transformers import AutoTokenizer

    from vidspec.draft_training.arch import ArchConfig, build_hf_config, hf_model_class

    committed = REPO / "data" / "releases" / "synthvid-target"
    arch = ArchConfig(**{**json.loads((committed / "manifest.json").read_text())["arch"], **QWEN_TOWER,
                         "num_layers": 2, "hidden_size": 64, "num_heads": 2, "num_kv_heads": 2})
    model = hf_model_class("qwen2.5-vl")(build_hf_config(arch, AutoTokenizer.from_pretrained(committed)))
    assert row["parameters"] == sum(p.numel() for p in model.parameters())  # that Qwen model, tower included
    assert "Qwen2.5-VL tower" in doc["note"]


def test_qwen_tower_width_and_mlp_width_reach_the_model(tmp_path, capsys):
    # --tower h192 and a shape's :fMLP build the model they name (issue 4's release budget is decided by these sizes:
    # docs/RESULTS.md 37.1), and the committed releases' size is reported beside them.
    out = tmp_path / "qwen.json"
    assert main(["--family", "qwen2.5-vl", "--tower", "h192", "--shapes", "2x64/2:f96", "--videos", "1",
                 "--repeats", "1", "--new-tokens", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = doc["shapes"]
    from release_shape_cpu import QWEN_TOWER
    from transformers import AutoTokenizer

    from vidspec.draft_training.arch import ArchConfig, build_hf_config, hf_model_class

    committed = REPO / "data" / "releases" / "synthvid-target"
    arch = ArchConfig(**{**json.loads((committed / "manifest.json").read_text())["arch"], **QWEN_TOWER,
                         "vision_hidden_size": 192, "vision_heads": 6, "intermediate_size": 96,
                         "num_layers": 2, "hidden_size": 64, "num_heads": 2, "num_kv_heads": 2})
    model = hf_model_class("qwen2.5-vl")(build_hf_config(arch, AutoTokenizer.from_pretrained(committed)))
    assert row["parameters"] == sum(p.numel() for p in model.parameters())
    assert model.config.text_config.intermediate_size == 96 and row["intermediate"] == 96 and doc["tower"] == "h192"
    releases = sum(f.stat().st_size for f in committed.parent.rglob("*") if f.is_file()) / 1e6
    assert doc["releases_mb"] == pytest.approx(releases) and "committed releases take" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # a wider tower is a Qwen2.5-VL option only
        main(["--tower", "h256", "--shapes", "2x64/2"])
    assert e.value.code == 2 and "--tower" in capsys.readouterr().err


def test_release_is_timed_as_it_is(tmp_path, capsys):
    # --release: the committed Qwen2.5-VL target with its trained weights writes the asked length (its end of text off)
    out = tmp_path / "release.json"
    qwen = REPO / "data" / "releases" / "qwen2.5-vl" / "synthvid-target"
    assert main(["--release", str(qwen), "--videos", "1", "--repeats", "1", "--new-tokens", "7", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["releases"]
    assert row["new_tokens"] == 7 and row["seconds_per_caption"] > 0
    assert row["parameters"] == json.loads((qwen / "manifest.json").read_text())["parameters"]
    assert main(["--release", str(tmp_path), "--videos", "1", "--new-tokens", "2"]) == 2
    assert "not an exported target" in capsys.readouterr().err
