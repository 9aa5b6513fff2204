"""VideoTextDataModule: the batch contract, style filter, MCQ prompts, parity with decoding, resume order."""

from __future__ import annotations

import json

import pytest
import torch

from vidspec.decoding.types import Request
from vidspec.draft_training.arch import ArchConfig
from vidspec.draft_training.data import MCQ_INSTRUCTION, ResumableSampler, VideoTextDataModule
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS


def _module(dataset, family, **options):
    torch.manual_seed(0)
    opts = {**QWEN_OPTIONS, **options} if family == "qwen2.5-vl" else None
    return VLMSFTModule(tokenizer=str(dataset / "tokenizer"), arch=ArchConfig(**ARCH[family]), max_frames=4,
                        adapter_options=opts)


def _dm(dataset, module, **kw):
    dm = VideoTextDataModule(str(dataset), **{"tables": [".", "mcq"], "batch_size": 3, "shuffle": False, **kw})
    dm.attach(module.input_spec())
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("family", ["llava-ov", "qwen2.5-vl"])
def test_batch_contract(tiny_dataset, family):
    m = _module(tiny_dataset, family)
    dm = _dm(tiny_dataset, m, caption_styles=["alpha"])
    b = next(iter(dm.train_dataloader()))
    tok = m.tokenizer
    B, L = b["input_ids"].shape
    assert B == 3 and b["input_ids"].dtype == torch.int64 and b["family"] == family
    assert b["attention_mask"].shape == b["labels"].shape == b["answer_mask"].shape == (B, L)
    assert b["answer_mask"].dtype == torch.bool and torch.equal(b["answer_mask"], b["labels"] != -100)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    for i in range(B):
        n = int(b["attention_mask"][i].sum())
        assert torch.all(b["input_ids"][i, n:] == tok.pad_token_id)  # right padding
        ans = b["labels"][i][b["answer_mask"][i]]
        assert torch.equal(ans, b["input_ids"][i, n - len(ans):n]) and ans[-1] == eos  # answer + eos at the end
        assert tok.decode(ans[:-1]).strip().endswith("moves to the right.")  # style alpha only
    if family == "qwen2.5-vl":
        assert b["video_grid_thw"].shape == (B, 3) and b["second_per_grid_ts"].shape == (B,)
        patches = int(b["video_grid_thw"].prod(dim=1).sum())
        assert b["pixel_values_videos"].shape == (patches, 3 * 2 * 14 * 14)
        vid = tok.convert_tokens_to_ids("<|video_pad|>")
        assert torch.equal(b["mm_token_type_ids"] == 2, b["input_ids"] == vid)
    else:
        assert b["pixel_values_videos"].shape == (B, 4, 3, 56, 56)


def test_mcq_rows_and_style_filter(tiny_dataset):
    m = _module(tiny_dataset, "llava-ov")
    dm = _dm(tiny_dataset, m, caption_styles=["beta"])
    rows = dm.train_set.rows
    assert len(rows) == 8  # 4 beta captions + 4 MCQs
    mcq = [r for r in rows if r.prompt.endswith(MCQ_INSTRUCTION)]
    assert len(mcq) == 4 and mcq[0].answer == "A" and "\nA. Red.\nB. Green." in mcq[0].prompt
    assert all(r.answer.startswith("The video shows") for r in rows if r not in mcq)


@pytest.mark.parametrize("family,options", [("llava-ov", {}), ("qwen2.5-vl", {}),
                                            ("qwen2.5-vl", {"frame_per_patch": True})])
def test_training_inputs_equal_decoding_inputs(tiny_dataset, family, options):
    """The training forward at the last prompt position gives the decoding adapter's prefill logits (Qwen2.5-VL
    also with each frame in a temporal patch of its own: the batch's grid and timing are the adapter's)."""
    m = _module(tiny_dataset, family, **options).eval()
    dm = _dm(tiny_dataset, m)
    row, sample = dm.train_set.rows[0], dm.train_set[0]
    target = m.as_target()
    if options.get("frame_per_patch"):  # 4 frames, 4 patches, one frame interval each
        fps = target.read_video(row.video).fps
        assert sample["video_grid_thw"][0, 0] == 4 and sample["second_per_grid_ts"].item() == pytest.approx(1 / fps)
    state = target.prefill(Request(prompt=row.prompt, clip=target.read_video(row.video)))
    n_prompt = int((sample["labels"] == -100).sum())
    assert torch.equal(state.prompt_ids, sample["input_ids"][:n_prompt])
    with torch.no_grad():
        h = m.hidden_states(dm.collator()([sample]))
        logits = m.model.lm_head(h[0, n_prompt - 1])
    torch.testing.assert_close(logits, state.first_logits, atol=1e-4, rtol=1e-4)


def test_resumable_sampler_continues_the_epoch():
    data = list(range(10))
    full = list(ResumableSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3, epoch=2))
    resumed = ResumableSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3, epoch=2, skip=4)
    assert list(resumed) == full[4:]
    assert list(resumed) == full  # the skip applies once
    resumed.set_epoch(3)
    assert list(resumed) == list(ResumableSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3, epoch=3))


def test_train_loader_keeps_its_workers_across_epochs(tiny_dataset):
    """Workers start once per fit, not once per epoch, and the batches stay those of num_workers=0."""
    module = _module(tiny_dataset, "llava-ov")

    def epochs(num_workers):
        dm = _dm(tiny_dataset, module, num_workers=num_workers, shuffle=True)
        loader = dm.train_dataloader()
        out, iterators = [], []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            it = iter(loader)
            iterators.append(it)
            out.append([b["input_ids"].tolist() for b in it])
        return loader, out, iterators

    loader0, ref, _ = epochs(0)
    loader, got, its = epochs(2)
    assert not loader0.persistent_workers and loader.persistent_workers
    assert its[0] is its[1]  # the second epoch reuses the first epoch's worker processes
    assert got == ref and ref[0] != ref[1]  # same batches as in-process loading; epochs reshuffle


def _facts(*motions, **change):
    objs = [{"colour": "red", "motion": m, "first_frame": 0, "last_frame": 7, "turn_frame": None, "new_colour": None,
             "track": {"growth": 0.0, "spin": 0.0}} for m in motions]
    for k, v in change.items():
        objs[0][k] = v
    return json.dumps({"num_frames": 8, "events": [], "objects": objs})


def test_time_reversed_answers():
    from vidspec.draft_training.data import time_reversed_answer

    pieces = ["We", " see", " a", " red", " star", " which", " slides", " left", ".", " A", " blue", " cross",
              " stays", " still", "."]
    labels = ["filler"] * 7 + ["motion", "filler", "filler", "colour", "shape", "filler", "motion", "filler"]
    cap = {"question": "Describe the video.", "answer": "".join(pieces), "style": "alpha", "pieces": pieces,
           "labels": labels, "facts": _facts("left", "still")}
    assert time_reversed_answer(cap) == "We see a red star which slides right. A blue cross stays still."
    assert time_reversed_answer({**cap, "answer": "Something else."}) is None  # pieces that are not the answer
    assert time_reversed_answer({**cap, "labels": None}) is None  # a caption without labels
    options = ["A. Moves up.", "B. Stays still.", "C. Moves down.", "D. Grows."]
    mcq = {"question": "How does the red star move?", "options": options, "answer": "A", "task_type": "motion",
           "facts": _facts("up")}
    assert time_reversed_answer(mcq) == "C"
    assert time_reversed_answer({**mcq, "options": options[:2] + ["C. Moves left.", "D. Grows."]}) is None
    assert time_reversed_answer({**mcq, "answer": "B", "facts": _facts("still")}) == "B"
    assert time_reversed_answer({**mcq, "task_type": "colour", "answer": "D"}) == "D"  # not about motion
    assert time_reversed_answer({**mcq, "task_type": None}) is None
    open_q = {"question": "How does the red star move?", "answer": "moves up", "task_type": "motion",
              "facts": _facts("up")}
    assert time_reversed_answer(open_q) == "moves down"
    assert time_reversed_answer({**open_q, "task_type": "count", "answer": "1"}) == "1"
    # scenes whose reversal is not a swap of directions, and questions that name one
    assert time_reversed_answer({**open_q, "facts": _facts("up", first_frame=2)}) is None
    assert time_reversed_answer({**open_q, "facts": _facts("up", turn_frame=3)}) is None
    assert time_reversed_answer({**open_q, "facts": _facts("up", track={"growth": 0.1})}) is None
    assert time_reversed_answer({**open_q, "facts": json.dumps({"num_frames": 8, "events": [{"kind": "x"}],
                                                                "objects": []})}) is None
    assert time_reversed_answer({**open_q, "question": "What colour is the object moving left?"}) is None
    assert time_reversed_answer({k: v for k, v in open_q.items() if k != "facts"}) is None


def test_time_augments_need_probabilities_and_rows_they_fit(tiny_dataset):
    from vidspec.decoding.errors import ConfigError

    for name in ("reverse_time", "time_crop"):
        for bad in (-0.1, 1.5, True, "half"):
            with pytest.raises(ConfigError, match=f"data.{name}"):
                VideoTextDataModule(str(tiny_dataset), **{name: bad})
    for bad in (1, 2.5, True):
        with pytest.raises(ConfigError, match="data.time_crop_min"):
            VideoTextDataModule(str(tiny_dataset), time_crop=0.5, time_crop_min=bad)
    m = _module(tiny_dataset, "llava-ov")
    with pytest.raises(ConfigError, match="data.reverse_time: no training row"):  # the tiny set has no facts
        _dm(tiny_dataset, m, reverse_time=0.5)
    with pytest.raises(ConfigError, match="LLaVA-OV batches"):
        _dm(tiny_dataset, m, time_crop=0.5)
    with pytest.raises(ConfigError, match="data.time_crop: no training row"):
        _dm(tiny_dataset, _module(tiny_dataset, "qwen2.5-vl"), time_crop=0.5)


def test_plain_scene():
    from vidspec.draft_training.data import plain_scene

    assert plain_scene({"facts": _facts("left", "still")})
    assert not plain_scene({"facts": _facts("left", last_frame=5)})
    assert not plain_scene({"facts": _facts("left", new_colour="blue")})
    assert not plain_scene({"facts": _facts("zigzag")})
    assert not plain_scene({})
