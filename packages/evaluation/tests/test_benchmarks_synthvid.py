"""The SynthVid loaders on a dataset written by the real generator (the schema contract between them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidspec.evaluation.benchmarks import BenchmarkError, load_benchmark
from vidspec.evaluation.synthvid.dataset import SynthVidConfig, generate_synthvid


def test_loaders_read_what_the_generator_writes(tmp_path):
    root = Path(generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=3, seed=0, split="validation", preset="easy")))
    captions = load_benchmark("synthvid_captions", root)
    assert len(captions) == 3
    for s in captions:
        assert Path(s.video_path).is_file() and s.reference and isinstance(s.extra["facts"], dict)
        assert s.metric == "synthvid_facts"
    mcq = load_benchmark("synthvid_mcq", root)
    assert mcq and len({s.sample_id for s in mcq}) == len(mcq)
    for s in mcq:
        assert s.answer_letter in "ABCDE"[: len(s.options)]
        assert s.reference == s.options["ABCDE".index(s.answer_letter)]
        assert Path(s.video_path).is_file()
    # The eval prompt is the training prompt, word for word: a SynthVid-trained target scored 0.29
    # instead of 0.85 when the task worded the instruction differently.
    from datasets import load_from_disk

    from vidspec.evaluation.synthvid.questions import mcq_prompt

    rows = load_from_disk(str(root / "mcq"))["validation"]
    assert [s.prompt for s in mcq] == [mcq_prompt(r["question"], r["options"]) for r in rows]
    # The generator writes only the splits that have videos; asking for another is a clear error.
    with pytest.raises(BenchmarkError, match="has no split 'test'; it has \\['validation'\\]"):
        load_benchmark("synthvid_captions", root, split="test")


def test_captions_keep_one_sample_per_video_and_prompt(tmp_path):
    """A set built with two caption rows per video (two reference wordings, one prompt) gives one
    sample per video; the limit counts those samples; a task without the option keeps every row."""
    root = Path(generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=3, seed=0, split="validation",
                                                                 preset="easy", captions_per_video=2)))
    from datasets import load_from_disk

    rows = load_from_disk(str(root))["validation"]
    assert len(rows) == 6 and len({r["video"] for r in rows}) == 3
    captions = load_benchmark("synthvid_captions", root)
    assert len(captions) == 3 and len({s.video_path for s in captions}) == 3
    assert [s.sample_id for s in captions] == [f"{r['videoID']}#{i}" for i, r in enumerate(rows) if i % 2 == 0]
    assert len(load_benchmark("synthvid_captions", root, limit=2)) == 2
    # The same rows through a task YAML without one_per_prompt: every row is a sample.
    import yaml

    from vidspec.evaluation.benchmarks.registry import _tasks_dir

    spec = yaml.safe_load((_tasks_dir() / "synthvid_captions.yaml").read_text())
    spec.pop("one_per_prompt")
    task = tmp_path / "every_row.yaml"
    task.write_text(yaml.safe_dump(spec))
    assert len(load_benchmark(task, root)) == 6
    assert len(load_benchmark(task, root, limit=4)) == 4
