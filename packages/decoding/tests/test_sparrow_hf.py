"""Sparrow drafts as Hugging Face models: config class, save/load by folder or hub id, dtypes, Auto classes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vidspec.decoding.drafters import NoDrafter
from vidspec.decoding.drafters.sparrow import (
    MODEL_TYPE,
    SparrowConfig,
    SparrowDrafter,
    SparrowDraftModel,
    new_sparrow_for,
)
from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.types import Request

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "data" / "releases" / "sparrow-synthvid"


def test_the_committed_release_loads_with_from_pretrained():
    model = SparrowDraftModel.from_pretrained(COMMITTED)
    assert isinstance(model.config, SparrowConfig) and model.config.model_type == MODEL_TYPE
    raw = json.loads((COMMITTED / "config.json").read_text())
    assert raw["model_type"] == MODEL_TYPE and raw["architectures"] == ["SparrowDraftModel"]
    assert not any(k in raw for k in ("format", "layer_class", "config_class", "rotary_class"))  # no import paths
    assert model.manifest["target_fingerprint"]


def test_auto_classes_load_a_release():
    from transformers import AutoConfig, AutoModel

    assert isinstance(AutoConfig.from_pretrained(COMMITTED), SparrowConfig)
    auto = AutoModel.from_pretrained(COMMITTED)
    ours = SparrowDraftModel.from_pretrained(COMMITTED)
    assert isinstance(auto, SparrowDraftModel)
    for k, v in ours.own_state_dict().items():
        assert torch.equal(v, auto.own_state_dict()[k]), k


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_save_in_either_dtype_decodes_losslessly(tiny, clip, tmp_path, dtype):
    from safetensors import safe_open

    target = tiny("tiny-qwen2.5-vl")
    model = new_sparrow_for(target, seed=5)
    model.save_pretrained(tmp_path / "rel", manifest=model.manifest, dtype=dtype)
    assert sorted(p.name for p in (tmp_path / "rel").iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
    with safe_open(str(tmp_path / "rel" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {getattr(torch, dtype)}
    loaded = SparrowDraftModel.from_pretrained(tmp_path / "rel", target=target)
    for k, v in model.own_state_dict().items():  # bfloat16 keeps the rounded weights
        assert torch.equal(v.to(getattr(torch, dtype)).float(), loaded.own_state_dict()[k].float()), k
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target, NoDrafter()).generate(req, max_new_tokens=12)
    sd = SpeculativeDecoder(target, SparrowDrafter(loaded), k=3).generate(req, max_new_tokens=12)
    assert sd.token_ids == ar.token_ids


def test_other_dtypes_are_refused(tiny, tmp_path):
    model = new_sparrow_for(tiny("tiny-qwen2.5-vl"))
    with pytest.raises(ConfigError, match="float32 or bfloat16"):
        model.save_pretrained(tmp_path / "rel", dtype="float16")


def test_a_hub_id_is_downloaded_with_snapshot_download(tiny, tmp_path, monkeypatch):
    import huggingface_hub

    target = tiny("tiny-qwen2.5-vl")
    model = new_sparrow_for(target, seed=2)
    model.save_pretrained(tmp_path / "snap", manifest=model.manifest)
    calls = []

    def fake_snapshot_download(repo_id, revision=None, token=None, **kw):
        calls.append((repo_id, revision))
        return str(tmp_path / "snap")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr("vidspec.decoding.hub.offline_reason", lambda: None)  # as if the hub were reachable
    drafter = SparrowDrafter.from_pretrained("someone/sparrow-tiny", target)
    assert calls == [("someone/sparrow-tiny", None)]
    assert drafter.model.release_dir == tmp_path / "snap"


def test_an_unreachable_hub_id_is_one_line(monkeypatch):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("offline mode is enabled\nmore")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setattr("vidspec.decoding.hub.offline_reason", lambda: None)  # the download itself fails
    with pytest.raises(ModelError, match="cannot download the Sparrow release 'someone/nothing': offline mode"):
        SparrowDraftModel.from_pretrained("someone/nothing")
    with pytest.raises(ModelError, match="no such Sparrow release folder"):
        SparrowDraftModel.from_pretrained("/no/such/release")


def test_a_release_of_the_earlier_layout_still_loads(tiny, tmp_path):
    from safetensors.torch import save_file

    target = tiny("tiny-llava-ov")
    model = new_sparrow_for(target, seed=4)
    old = tmp_path / "old"
    old.mkdir()
    cfg = model.config
    layer, rotary = cfg.layer_class, cfg.rotary_class
    (old / "config.json").write_text(json.dumps({
        "format": "vidspec-sparrow", "format_version": 1, "text_config": cfg.layer_config,
        "config_class": "transformers.models.qwen2.configuration_qwen2:Qwen2Config", "layer_class": layer,
        "rotary_class": rotary, "family": cfg.family, "target_id": "", "position_mode": "target",
        "head_norm": "own", "fc_bias": False, "attn_implementation": "sdpa", "ivsb_layer": None}))
    save_file({k: v.contiguous() for k, v in model.own_state_dict().items()}, str(old / "model.safetensors"))
    loaded = SparrowDraftModel.from_pretrained(old)
    for k, v in model.own_state_dict().items():
        assert torch.equal(v, loaded.own_state_dict()[k]), k


def test_inference_overrides_replace_config_fields(tiny, tmp_path):
    model = new_sparrow_for(tiny("tiny-qwen2.5-vl"))
    model.save_pretrained(tmp_path / "rel", manifest=model.manifest)
    loaded = SparrowDraftModel.from_pretrained(tmp_path / "rel", attn_implementation="eager")
    assert loaded.config.attn_implementation == "eager"
    assert loaded.text_config._attn_implementation == "eager"
