"""The committed releases (data/releases/): the set is found as a whole by the demo's discovery, its models are of
the family its manifests name, its Sparrow draft belongs to its target, its weights are finite, and the strict
speculative paths with its drafts write the target's own greedy tokens on a fresh SynthVid clip. One set per family:
LLaVA-OneVision's in data/releases/ (the demo's default), Qwen2.5-VL's in data/releases/qwen2.5-vl/
(`vidspec demo --releases data/releases/qwen2.5-vl`). These float32 checks are what the project's lossless claim
rests on (docs/results.md, section 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SETS = {"llava-ov": REPO / "data" / "releases", "qwen2.5-vl": REPO / "data" / "releases" / "qwen2.5-vl"}


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path_factory.mktemp("sv"), SynthVidConfig(
        num_videos=1, seed=5, preset="easy", frames=8, size="64x64", split="validation", styles="alpha"), progress=False)
    videos = sorted(Path(data).rglob("*.mp4"))
    assert videos
    return videos[0]


@pytest.mark.parametrize("family", sorted(SETS))
def test_release_set_is_whole_and_of_its_family(family):
    from vidspec.evaluation.demo import discover_models

    choice = discover_models(SETS[family])
    assert choice.source == "release" and not choice.missing, choice.missing
    for path in (choice.target, choice.draft):
        manifest = json.loads((Path(path) / "manifest.json").read_text())
        assert manifest["family"] == family and manifest["kind"] == "video-llm"
    sparrow = json.loads((Path(choice.sparrow) / "manifest.json").read_text())
    assert (REPO / sparrow["target_id"]).resolve() == Path(choice.target).resolve()  # a repo-relative id
    assert len(json.loads((Path(choice.sparrow) / "draft_vocab.json").read_text())["token_ids"]) > 0


@pytest.mark.parametrize("family", sorted(SETS))
def test_strict_paths_are_token_identical_on_the_release(family, clip_path):
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.evaluation.demo import discover_models

    choice = discover_models(SETS[family])
    target = load_target(choice.target, device="cpu")
    draft = load_target(choice.draft, device="cpu")
    for model in (target, draft):
        assert all(torch.isfinite(p).all() for p in model.model.parameters())
    request = Request(prompt="Describe the video in detail.", clip=target.read_video(str(clip_path)))
    ar = build_decoder("ar", target=target).generate(request, max_new_tokens=24)
    assert len(ar.token_ids) >= 8  # a trained target writes a caption, not an immediate end of text
    for method, kw in (("sd", {"draft": draft}), ("sparrow", {"draft": choice.sparrow})):
        res = build_decoder(method, target=target, k=4, **kw).generate(request, max_new_tokens=24)
        assert res.token_ids == ar.token_ids, method
        assert sum(s.emitted for s in res.steps) / len(res.steps) > 1.5, method  # the drafts are trained: τ well above 1


@pytest.mark.parametrize("family", sorted(SETS))
def test_the_sparrow_release_is_a_hugging_face_model_with_a_card(family):
    """The Sparrow draft loads with ``from_pretrained`` (and ``AutoConfig``), and its card's YAML metadata parses and
    names no path of the machine that wrote it."""
    import yaml
    from transformers import AutoConfig

    from vidspec.decoding.drafters.sparrow import SparrowConfig, SparrowDraftModel

    folder = SETS[family] / "sparrow-synthvid"
    model = SparrowDraftModel.from_pretrained(folder)
    assert model.config.family == family and isinstance(AutoConfig.from_pretrained(folder), SparrowConfig)
    card = (folder / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "vidspec" and "sparrow" in meta["tags"]
    assert f"--sparrow {folder.relative_to(REPO)}" in card
    for text in (card, (folder / "manifest.json").read_text(), (folder / "config.json").read_text()):
        assert not any(p in text for p in ("/work/", "/root/", "/tmp/", "/home/"))
