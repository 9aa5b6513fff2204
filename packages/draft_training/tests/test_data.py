"""VideoTextDataModule: the batch contract, style filter, MCQ prompts, parity with decoding, resume order."""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.types import Request
from vidspec.draft_training.data import MCQ_INSTRUCTION, ResumableSampler, VideoTextDataModule
from vidspec.draft_training.sft import VLMSFTModule
from vidspec.draft_training.testbed.arch import ArchConfig
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


class _ShoutTransform:
    """A test transform: rows whose answer has ``word`` get it shouted, with chance ``chance``; may drop frames."""

    columns = ("style",)
    needs = "the word in the answer"

    def __init__(self, word: str, chance: float = 1.0, drop_frames: bool = False):
        self.word, self.chance, self.keeps_frame_count = word, chance, not drop_frames

    def annotate(self, row):
        return {"loud": row["answer"].upper()} if self.word in row["answer"] else None

    def __call__(self, example, rng):
        from dataclasses import replace

        if rng.random() >= self.chance:
            return example
        clip = example.clip if self.keeps_frame_count else replace(example.clip, frames=example.clip.frames[:2],
                                                                    timestamps=example.clip.timestamps[:2])
        return replace(example, clip=clip, answer=example.notes["loud"])


def test_example_transforms_change_the_rows_they_annotate(tiny_dataset):
    from vidspec.draft_training.transforms import ExampleTransform

    assert isinstance(_ShoutTransform("right"), ExampleTransform)
    m = _module(tiny_dataset, "qwen2.5-vl")
    plain = _dm(tiny_dataset, m, tables=["."])
    loud = _dm(tiny_dataset, m, tables=["."], transforms=[_ShoutTransform("right")])
    tok = m.tokenizer
    changed = 0
    for i, row in enumerate(loud.train_set.rows):
        a, b = plain.train_set[i], loud.train_set[i]
        if row.notes[0] is None:
            assert torch.equal(a["input_ids"], b["input_ids"])
            continue
        changed += 1
        assert tok.decode(b["labels"][b["labels"] != -100][:-1]) == row.notes[0]["loud"]
    assert changed > 0
    assert loud.val_set[0]["input_ids"].tolist() == plain.val_set[0]["input_ids"].tolist()  # validation as it is


def test_example_transform_draws_depend_on_seed_epoch_and_index(tiny_dataset):
    m = _module(tiny_dataset, "qwen2.5-vl")

    def answers(seed, epoch):
        dm = _dm(tiny_dataset, m, tables=["."], seed=seed, transforms=[_ShoutTransform("", chance=0.5)])
        return [dm.train_set[(i, epoch, 1)]["labels"].tolist() for i in range(len(dm.train_set))]

    first = answers(0, 0)
    assert answers(0, 0) == first  # a resumed run or another worker draws the same
    assert answers(0, 1) != first or answers(1, 0) != first  # other epochs/seeds draw afresh
    # the training loader passes the epoch to the dataset, so each epoch draws afresh
    dm = _dm(tiny_dataset, m, tables=["."], shuffle=False, transforms=[_ShoutTransform("", chance=0.5)])
    loader = dm.train_dataloader()
    epochs = []
    for epoch in (0, 1, 0):
        loader.sampler.set_epoch(epoch)
        epochs.append([row for b in loader for row in b["labels"].tolist()])
    assert epochs[0] == epochs[2] != epochs[1]


def test_example_transforms_are_checked(tiny_dataset):
    from vidspec.decoding.errors import ConfigError

    with pytest.raises(ConfigError, match="data.transforms: .* is not an example transform"):
        VideoTextDataModule(str(tiny_dataset), transforms=[object()])
    with pytest.raises(ConfigError, match="_ShoutTransform applies to no training row .*the word in the answer"):
        _dm(tiny_dataset, _module(tiny_dataset, "qwen2.5-vl"), transforms=[_ShoutTransform("zebra")])
    with pytest.raises(ConfigError, match="LLaVA-OV batches"):
        _dm(tiny_dataset, _module(tiny_dataset, "llava-ov"), transforms=[_ShoutTransform("right", drop_frames=True)])
