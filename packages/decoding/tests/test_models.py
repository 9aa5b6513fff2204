"""Adapters, input building and model loading."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidspec.decoding.errors import ModelError
from vidspec.decoding.models import crop_cache, load_target
from vidspec.decoding.models.qwen2_5_vl import patchify
from vidspec.decoding.types import Request, VideoClip


def test_qwen_patchify_matches_hf_processor():
    """Our pixels equal Qwen2-VL's own (PIL) image processor for an image (= 2 identical frames)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from vidspec.decoding.video import resize_frames, smart_resize

    rng = np.random.default_rng(0)
    for hw in [(100, 150), (57, 300), (224, 224)]:
        img = rng.integers(0, 255, (*hw, 3), dtype=np.uint8)
        ref = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)(images=[img], return_tensors="pt")
        h, w = smart_resize(*hw, factor=28, min_pixels=56 * 56, max_pixels=112 * 112)
        frames = resize_frames(img[None], (h, w))
        ours, grid = patchify(np.concatenate([frames, frames]), 14, 2, 2)
        assert list(grid) == ref["image_grid_thw"][0].tolist()
        torch.testing.assert_close(ours, ref["pixel_values"], atol=1e-5, rtol=0)


def test_qwen_odd_frame_count_pads_last_frame():
    frames = np.random.default_rng(1).integers(0, 255, (3, 28, 28, 3), dtype=np.uint8)
    padded, grid = patchify(np.concatenate([frames, frames[-1:]]), 14, 2, 2)
    odd, grid_odd = patchify(frames, 14, 2, 2)
    assert grid == grid_odd == (2, 2, 2)
    torch.testing.assert_close(odd, padded)


@pytest.mark.parametrize("name,tokens", [("tiny-qwen2.5-vl", None), ("tiny-llava-ov", 8 * 4 + 1)])
def test_prompt_has_one_placeholder_run(tiny, clip, name, tokens):
    target = tiny(name)
    ids, vis = target.build_prompt(Request("Describe the video.", clip))
    mask = (ids == target.video_token_id).numpy()
    assert mask.sum() == vis.num_tokens
    run = np.flatnonzero(mask)
    assert (np.diff(run) == 1).all()  # contiguous
    if tokens is not None:
        assert vis.num_tokens == tokens  # LLaVA-OV: T * ceil(s/2)^2 + 1 newline
    text = target.tokenizer.decode(ids[mask == 0])
    assert text.count("<|im_start|>assistant") == 1 and "Describe the video." in text


def test_qwen_tokens_follow_pixel_budget(tiny):
    target = tiny("tiny-qwen2.5-vl")
    clip = VideoClip(frames=np.zeros((4, 300, 500, 3), np.uint8), fps=2.0, source="m")
    vis = target.visual_inputs(clip)
    t, h, w = vis.extra["video_grid_thw"][0].tolist()
    assert t == 2 and h * w * 14 * 14 <= target.max_pixels and h % 2 == 0 and w % 2 == 0
    assert vis.num_tokens == t * h * w // 4


def test_qwen_frame_per_patch_gives_each_frame_its_own_patch(clip):
    """frame_per_patch: every temporal patch holds one frame twice (an image's layout), twice the tokens, one frame
    interval a patch; the default pairs consecutive frames."""
    paired = load_target("tiny-qwen2.5-vl").visual_inputs(clip)
    target = load_target("tiny-qwen2.5-vl", frame_per_patch=True)
    single = target.visual_inputs(clip)
    t, h, w = single.extra["video_grid_thw"][0].tolist()
    assert (t, h, w) == (8, *paired.extra["video_grid_thw"][0].tolist()[1:])
    assert single.num_tokens == 2 * paired.num_tokens
    assert single.extra["second_per_grid_ts"].item() == pytest.approx(1 / clip.fps)
    assert paired.extra["second_per_grid_ts"].item() == pytest.approx(2 / clip.fps)
    # a patch row is (channel, time, y, x): both time slices of every patch are the same frame
    rows = single.tensors["pixel_values_videos"].reshape(t * h * w, 3, 2, -1)
    torch.testing.assert_close(rows[:, :, 0], rows[:, :, 1])
    # and the first patches are frame 0's, which the paired layout mixes with frame 1
    first = paired.tensors["pixel_values_videos"].reshape(-1, 3, 2, rows.shape[-1])[: h * w]
    torch.testing.assert_close(rows[: h * w, :, 0], first[:, :, 0])
    assert not torch.equal(first[:, :, 0], first[:, :, 1])  # the square moves between frames 0 and 1
    ids, vis = target.build_prompt(Request("Describe the video.", clip))
    assert int((ids == target.video_token_id).sum()) == vis.num_tokens
    state = target.prefill(Request("Describe the video.", clip))
    assert state.length == ids.shape[-1]


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_prefill_caches_visual_hidden_and_verify_hidden(tiny, clip, name):
    target = tiny(name)
    state = target.prefill(Request("Describe the video.", clip), frozenset({"penult", "mid", "visual"}))
    assert state.visual_hidden.shape == (len(state.visual_positions), target.hidden_size)
    assert state.prompt_hidden_penult.shape == (state.length, target.hidden_size)
    out = target.verify(state, [5, 6, 7], frozenset({"penult", "mid", "last"}))
    assert out.logits.shape == (3, target.vocab_size) and out.logits.dtype == torch.float32
    for h in (out.hidden_penult, out.hidden_mid, out.hidden_last):
        assert h.shape == (3, target.hidden_size)
    # hidden states are only computed when asked
    out2 = target.verify(state, [8])
    assert out2.hidden_mid is None and out2.hidden_penult is None


def test_rollback_then_verify_matches_fresh(tiny, clip):
    target = tiny("tiny-qwen2.5-vl")
    req = Request("Describe the video.", clip)
    a = target.prefill(req)
    base = a.length
    target.verify(a, [5, 6, 7, 8])
    target.rollback(a, base + 1)
    got = target.verify(a, [9]).logits
    b = target.prefill(req)
    ref = target.verify(b, [5, 9]).logits[-1:]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        target.rollback(a, a.length + 1)


def test_crop_cache_both_apis():
    class New:
        def __init__(self):
            self.n = 10

        def get_seq_length(self):
            return self.n

        def crop(self, k):
            if k > 0:
                raise ValueError("negative count required")
            self.n += k

    class Old(New):
        # transformers <= 5.17: crop(max_length); a negative value removes that many
        def crop(self, k):
            self.n = self.n + k if k < 0 else k

    for cls in (New, Old):
        c = cls()
        crop_cache(c, 6)
        assert c.n == 6
        crop_cache(c, 8)  # never grows
        assert c.n == 6


def test_tiny_tokenizer_is_what_the_builder_makes():
    """Golden check: the shipped tokenizer file is reproducible from the code."""
    from vidspec.decoding.models.tiny import build_tiny_tokenizer, load_tiny_tokenizer

    shipped, rebuilt = load_tiny_tokenizer(), build_tiny_tokenizer()
    assert shipped.get_vocab() == rebuilt.get_vocab()
    text = "<|im_start|>user\nDescribe the video: a red circle moves left.<|im_end|>"
    assert shipped(text)["input_ids"] == rebuilt(text)["input_ids"]
    assert shipped.decode(shipped(text)["input_ids"]) == text


def test_tiny_models_are_seeded_and_differ_from_drafts():
    a, b = load_target("tiny-llava-ov"), load_target("tiny-llava-ov")
    d = load_target("tiny-llava-ov-draft")
    wa = a.model.lm_head.weight
    assert torch.equal(wa, b.model.lm_head.weight)
    assert not torch.equal(wa, d.model.lm_head.weight)
    assert d.num_layers == 1 and a.num_layers == 2


@pytest.mark.parametrize("bad,needle", [
    ("tiny-nothing", "unknown model"),
    ("no spaces allowed/really", "unknown model"),
    ("some-org/some-model-that-is-not-here", "some-org/some-model-that-is-not-here"),
])
def test_load_target_errors(bad, needle):
    with pytest.raises(ModelError, match=needle.replace("/", ".")):
        load_target(bad)


def test_load_target_rejects_non_video_llm(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="not a supported Video-LLM"):
        load_target(str(tmp_path))


def test_relevance_layer_is_validated():
    from vidspec.decoding.errors import ConfigError

    with pytest.raises(ConfigError):
        load_target("tiny-llava-ov", relevance_layer=7)
    assert load_target("tiny-llava-ov").relevance_layer == 1


def test_damaged_model_directory_is_a_model_error(tiny, tmp_path):
    t = tiny("tiny-llava-ov")
    t.model.save_pretrained(tmp_path)  # weights + config, no tokenizer files
    with pytest.raises(ModelError, match="cannot load model"):
        load_target(str(tmp_path))
    t.tokenizer.save_pretrained(tmp_path)
    weights = next(tmp_path.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:200])  # truncated download
    with pytest.raises(ModelError, match="cannot load model"):
        load_target(str(tmp_path))


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_repeated_visual_inputs_equal_processing_the_repeated_clip(tiny, clip, name):
    """Training's length augmentation: a family's shortcut (LLaVA-OV repeats processed frames) gives exactly the
    inputs of the repeated clip, and build_prompt takes them as they are."""
    t = tiny(name)
    for factor in (2, 3):
        long_clip = clip.repeat_frames(factor)
        assert long_clip.num_frames == factor * clip.num_frames and long_clip.fps == factor * clip.fps
        assert np.array_equal(long_clip.frames[1], clip.frames[0]) == (factor > 1)
        want, got = t.visual_inputs(long_clip), t.repeated_visual_inputs(clip, factor)
        assert got.num_tokens == want.num_tokens
        assert want.tensors.keys() == got.tensors.keys()
        assert all(torch.equal(want.tensors[k], got.tensors[k]) for k in want.tensors)
        assert want.extra.keys() == got.extra.keys()
        assert all(torch.equal(torch.as_tensor(want.extra[k]), torch.as_tensor(got.extra[k])) for k in want.extra)
        req = Request("Describe the video.", long_clip)
        ids, vis = t.build_prompt(req, visual=got)
        assert vis is got and torch.equal(ids, t.build_prompt(req)[0])
