"""``vidspec export --format speculators``: a Sparrow draft in the EAGLE-3 layout vLLM and SGLang load.

The layout checks run everywhere. The round trip runs the ``speculators`` package itself, which pins
transformers <= 5.19 and so lives in its own environment (``make test-speculators`` builds
``.venv-speculators`` and runs this file; ``VIDSPEC_SPECULATORS_PYTHON`` names another interpreter):
it loads the export, validates its config, and computes the modules where EAGLE-3 and Sparrow
coincide on the same inputs; this side compares them with vidspec's draft.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vidspec.decoding.cli import main as vidspec

REPO = Path(__file__).resolve().parents[3]
RELEASES = [REPO / "data" / "releases" / "sparrow-synthvid", REPO / "data" / "releases" / "qwen2.5-vl" / "sparrow-synthvid"]
SPEC_PYTHON = Path(os.environ.get("VIDSPEC_SPECULATORS_PYTHON") or REPO / ".venv-speculators" / "bin" / "python")
#: the tensor names of speculators 0.9.0's Eagle3DraftModel (one layer, full draft vocabulary)
EAGLE3_KEYS = {
    "embed_tokens.weight", "fc.weight", "lm_head.weight", "norm.weight", "layers.0.hidden_norm.weight",
    "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight", "layers.0.mlp.down_proj.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", *(f"layers.0.self_attn.{p}_proj.{w}"
                                                                        for p in "qkvo" for w in ("weight", "bias")),
}


@pytest.fixture(scope="module", params=RELEASES, ids=["llava-ov", "qwen2.5-vl"])
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle3") / "sparrow-eagle3"
    cwd = os.getcwd()
    os.chdir(REPO)  # the releases name their target relative to the checkout
    try:
        assert vidspec(["export", "--release", str(request.param), "--out", str(out), "--format", "speculators"]) == 0
    finally:
        os.chdir(cwd)
    return request.param, out


def test_the_export_has_the_eagle3_layout(exported):
    release, out = exported
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["architectures"] == ["Eagle3DraftModel"]
    sc = cfg["speculators_config"]
    assert sc["algorithm"] == "eagle3" and sc["default_proposal_method"] == "greedy"
    assert sc["verifier"]["name_or_path"] == json.loads((release / "manifest.json").read_text())["target_id"]
    assert set(load_file(str(out / "model.safetensors"))) == EAGLE3_KEYS
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "visual positions" in card and "/work/" not in card


def _vidspec_side(release: Path, inputs: dict) -> dict:
    """vidspec's draft on the inputs the speculators side gets (see speculators_side.py)."""
    from vidspec.decoding.drafters.sparrow import SparrowDraftModel
    from vidspec.decoding.models import load_target

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        draft = SparrowDraftModel.from_pretrained(release)
        target = load_target(draft.manifest["target_id"], dtype="float32")
    finally:
        os.chdir(cwd)
    draft = SparrowDraftModel.from_pretrained(release, target=target).float()
    layer = draft.layer
    with torch.no_grad():
        a, b, r = inputs["a"][None], inputs["b"][None], inputs["r"][None]
        # Sparrow's layer input after its norm is g * z / rms(z); EAGLE-3's fused q/k/v read [a; b] directly.
        x = layer.input_layernorm.weight * draft.fc(torch.cat([a, b], dim=-1))
        pos = draft.position_ids(inputs["positions"][None])
        cos, sin = draft.rotary(x, pos)
        attn = layer.self_attn(hidden_states=x, position_embeddings=(cos, sin), attention_mask=None)[0]
        block = r + layer.mlp(layer.post_attention_layernorm(r))
        logits = draft.logits(inputs["r"])
    return {"attn": attn[0], "block": block[0], "logits": logits, "cos": cos[0], "sin": sin[0]}


@pytest.mark.skipif(not SPEC_PYTHON.exists(), reason="the speculators environment is missing: make test-speculators")
def test_speculators_loads_the_export_and_computes_what_vidspec_computes(exported, tmp_path):
    release, out = exported
    d = json.loads((out / "config.json").read_text())["transformer_layer_config"]["hidden_size"]
    g = torch.Generator().manual_seed(0)
    inputs = {"a": torch.randn(6, d, generator=g), "b": torch.randn(6, d, generator=g),
              "r": torch.randn(6, d, generator=g), "ids": torch.arange(3, 9), "positions": torch.arange(40, 46)}
    save_file(inputs, str(tmp_path / "in.safetensors"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([str(SPEC_PYTHON), str(Path(__file__).with_name("speculators_side.py")), str(out),
                          str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    info = json.loads(run.stdout.strip().splitlines()[-1])
    assert info["config"] == "Eagle3SpeculatorConfig" and info["model"] == "Eagle3DraftModel"
    theirs = load_file(str(tmp_path / "out.safetensors"))
    ours = _vidspec_side(release, inputs)
    for name in ("cos", "sin", "block", "logits", "attn"):
        torch.testing.assert_close(theirs[name], ours[name], rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    assert theirs["full"].shape == (6, d) and bool(torch.isfinite(theirs["full"]).all())


def test_a_video_llm_release_is_refused(tmp_path, capsys):
    target = REPO / "data" / "releases" / "synthvid-target"
    assert vidspec(["export", "--release", str(target), "--out", str(tmp_path / "x"), "--format", "speculators"]) == 2
    assert "speculators" in capsys.readouterr().err


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
