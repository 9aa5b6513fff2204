"""Sparrow drafts at inference: lossless, text-only KV (VATA), positions, releases, refusal."""

from __future__ import annotations

import json

import pytest
import torch

from vidspec.decoding.drafters.sparrow import SparrowDrafter, SparrowDraftModel, new_sparrow_for
from vidspec.decoding.errors import ModelError
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.methods import build_decoder
from vidspec.decoding.testing import random_clip as make_clip
from vidspec.decoding.testing import text_positions
from vidspec.decoding.types import Request

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("mode", ["target", "reindex"])
def test_random_sparrow_is_token_identical_to_ar(tiny, clip, name, mode):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    drafter = SparrowDrafter(new_sparrow_for(target, position_mode=mode))
    sp = SpeculativeDecoder(target, drafter, k=3, method="sparrow").generate(req, max_new_tokens=32)
    assert sp.token_ids == ar.token_ids
    assert all(s.drafted <= 3 for s in sp.steps)


@pytest.mark.parametrize("name", FAMILIES)
def test_build_decoder_sparrow_methods(tiny, clip, name, tmp_path):
    target = tiny(name)
    new_sparrow_for(target).save_pretrained(tmp_path / "rel", manifest={
        "target_fingerprint": new_sparrow_for(target).manifest["target_fingerprint"]})
    req = Request("What happens in this video?", clip)
    ar = build_decoder("ar", target=target).generate(req, max_new_tokens=24)
    sp = build_decoder("sparrow", target=target, draft=str(tmp_path / "rel"), k=4).generate(req, max_new_tokens=24)
    assert sp.token_ids == ar.token_ids
    loose = build_decoder("sparrow-lvspec-pst", target=target, draft=str(tmp_path / "rel"), k=4)
    assert type(loose.drafter).__name__ == "SparrowDrafter" and loose.verifier.name != "strict"
    out = loose.generate(req, max_new_tokens=16)
    assert 1 <= out.num_new_tokens <= 16


@pytest.mark.parametrize("name", FAMILIES)
def test_draft_never_holds_visual_kv(tiny, name):
    """Two clips with different frame counts give the same draft cache: text positions only."""
    target = tiny(name)
    lengths, visual = [], []
    for frames in (2, 12):
        req = Request("Describe the video.", make_clip(frames))
        state = target.prefill(req, frozenset({"penult"}))
        drafter = SparrowDrafter(new_sparrow_for(target))
        drafter.begin(target, state, int(state.first_logits.argmax()))
        n_text = text_positions(target, req)
        # prompt text positions from index 1 on
        assert drafter.cache_length == n_text - 1
        drafter.propose(4)
        # + x_last + 3 speculative entries (the 4th draft token is never fed)
        assert drafter.cache_length == n_text - 1 + 4
        (shape,) = drafter.cache_shapes()
        assert shape[2] == drafter.cache_length
        lengths.append(drafter.cache_length)
        visual.append(int(state.visual_positions.numel()))
    assert visual[1] > visual[0] > 0  # the videos really differ in visual tokens
    assert lengths[0] == lengths[1]


@pytest.mark.parametrize("name", FAMILIES)
def test_cache_rolls_back_to_committed_entries(tiny, clip, name):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    state = target.prefill(req, frozenset({"penult"}))
    first = int(state.first_logits.argmax())
    drafter = SparrowDrafter(new_sparrow_for(target))
    drafter.begin(target, state, first)
    base = drafter.cache_length
    prop = drafter.propose(4)
    out = target.verify(state, [first, *prop.tokens], frozenset({"penult"}))
    target.rollback(state, state.length - 4 + 1)
    drafter.commit(1, 7, out)
    # x_last stays; the speculative entries are gone; d_1 and the next token wait to be fed
    assert drafter.cache_length == base + 1
    drafter.propose(2)
    assert drafter.cache_length == base + 1 + 2 + 1


@pytest.mark.parametrize("name", FAMILIES)
def test_incremental_cache_equals_one_pass(tiny, clip, name):
    """Feeding the prompt in begin() then x_last gives what one uncached pass over all entries gives."""
    target = tiny(name)
    req = Request("Describe the video.", clip)
    state = target.prefill(req, frozenset({"penult"}))
    first = int(state.first_logits.argmax())
    model = new_sparrow_for(target)
    drafter = SparrowDrafter(model)
    drafter.begin(target, state, first)
    idx = list(drafter._cache_index) + [state.prompt_ids.shape[0]]
    tokens = [*state.prompt_ids.tolist(), first]
    hp = state.prompt_hidden_penult
    with torch.no_grad():
        z = model.fuse(model.embed(torch.tensor([[tokens[i] for i in idx]])), hp[[i - 1 for i in idx]][None])
        pos = torch.stack([drafter._position_of(i) for i in idx], -1)[:, None]
        n = len(idx)
        h = model.run_layer(z, pos, torch.ones(n, n, dtype=torch.bool).tril()[None, None])
        want = model.logits(h[0, -1])
    prop_logits = None
    real = model.logits

    def spy(h_last):
        nonlocal prop_logits
        prop_logits = real(h_last)
        return prop_logits

    model.logits = spy
    drafter.propose(1)
    torch.testing.assert_close(prop_logits, want, rtol=1e-4, atol=1e-4)


def test_position_modes_on_mrope(tiny, clip):
    """target mode keeps Qwen2.5-VL's text positions (rope offset after the video); reindex counts text."""
    target = tiny("tiny-qwen2.5-vl")
    req = Request("Describe the video.", clip)
    state = target.prefill(req, frozenset({"penult"}))
    first = int(state.first_logits.argmax())
    ids = state.prompt_ids
    is_text = ids != target.video_token_id
    last = ids.shape[0] - 1
    kept = SparrowDrafter(new_sparrow_for(target, position_mode="target"))
    kept.begin(target, state, first)
    ref, _ = target.prefill_positions(ids[None], state.extra["visual"])
    assert torch.equal(kept._position_of(last), ref[:, 0, last])
    assert kept._position_of(last).tolist() == [last + state.extra["offset"]] * 3
    assert kept._position_of(last + 1).tolist() == [last + 1 + state.extra["offset"]] * 3
    re = SparrowDrafter(new_sparrow_for(target, position_mode="reindex"))
    re.begin(target, state, first)
    n_text = int(is_text.sum())
    assert re._position_of(last).tolist() == [n_text - 1] * 3
    assert re._position_of(last + 5).tolist() == [n_text + 4] * 3
    assert state.extra["offset"] != 0  # the video really shifts the target's positions


@pytest.mark.parametrize("name", FAMILIES)
def test_save_load_round_trip(tiny, clip, name, tmp_path):
    target = tiny(name)
    model = new_sparrow_for(target, position_mode="reindex", seed=3)
    model.save_pretrained(tmp_path / "rel", manifest=model.manifest)
    cfg = json.loads((tmp_path / "rel" / "config.json").read_text())
    assert cfg["model_type"] == "vidspec_sparrow" and cfg["position_mode"] == "reindex"
    loaded = SparrowDraftModel.from_pretrained(tmp_path / "rel", target=target)
    for k, v in model.own_state_dict().items():
        assert torch.equal(v, loaded.own_state_dict()[k]), k
    assert not any(k.startswith(("lm_head", "embed")) for k in loaded.state_dict())
    req = Request("Describe the video.", clip)
    a = SpeculativeDecoder(target, SparrowDrafter(model), k=3).generate(req, max_new_tokens=16)
    b = SpeculativeDecoder(target, SparrowDrafter(loaded), k=3).generate(req, max_new_tokens=16)
    assert [s.accepted for s in a.steps] == [s.accepted for s in b.steps]
    assert a.token_ids == b.token_ids


def test_wrong_target_is_refused(tiny, tmp_path):
    target, other = tiny("tiny-qwen2.5-vl"), tiny("tiny-qwen2.5-vl-draft")
    model = new_sparrow_for(target)
    model.save_pretrained(tmp_path / "rel", manifest=model.manifest)
    with pytest.raises(ModelError, match="distilled from target"):
        SparrowDrafter.from_pretrained(tmp_path / "rel", other)
    # the override loads it (the shapes fit: same width and vocabulary)
    d = SparrowDrafter.from_pretrained(tmp_path / "rel", other, allow_target_mismatch=True)
    assert d.model.shared.owner == id(other.model)
    # a different family fails the same way
    with pytest.raises(ModelError):
        build_decoder("sparrow", target=tiny("tiny-llava-ov"), draft=str(tmp_path / "rel"))


def test_not_a_release(tmp_path):
    with pytest.raises(ModelError, match="not a Sparrow release"):
        SparrowDraftModel.from_pretrained(tmp_path)


def test_cli_sparrow_needs_a_release(tmp_path, capfd):
    from vidspec.decoding.cli import main
    from vidspec.decoding.fixtures import make_moving_square_frames, write_test_video

    video = tmp_path / "v.mp4"
    write_test_video(video, make_moving_square_frames(8, 56, 84), fps=4)
    assert main(["generate", "--method", "sparrow", "--video", str(video)]) == 2
    assert "--sparrow" in capfd.readouterr().err


def test_damaged_release_is_a_model_error(tiny, tmp_path):
    from vidspec.decoding.drafters.sparrow import CONFIG_FILE, WEIGHTS_FILE

    t = tiny("tiny-qwen2.5-vl")
    rel = new_sparrow_for(t).save_pretrained(tmp_path / "rel")
    cfg = json.loads((rel / CONFIG_FILE).read_text())
    # an invalid config value
    (rel / CONFIG_FILE).write_text(json.dumps({**cfg, "position_mode": "sideways"}))
    with pytest.raises(ModelError, match="position_mode"):
        SparrowDraftModel.from_pretrained(rel)
    # weights of another width
    (rel / CONFIG_FILE).write_text(json.dumps(cfg))
    from safetensors.torch import load_file, save_file

    weights = load_file(str(rel / WEIGHTS_FILE))
    name = next(iter(weights))
    save_file({**weights, name: torch.zeros(*[s + 1 for s in weights[name].shape])}, str(rel / WEIGHTS_FILE))
    with pytest.raises(ModelError, match="do not match"):
        SparrowDraftModel.from_pretrained(rel)
    # a truncated weights file
    (rel / WEIGHTS_FILE).write_bytes(b"\x00\x01")
    with pytest.raises(ModelError, match="cannot read"):
        SparrowDraftModel.from_pretrained(rel)
