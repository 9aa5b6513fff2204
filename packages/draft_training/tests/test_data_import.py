"""`vidspec data import` on fixtures written in the public schemas: LLaVA-Video-178K (json and parquet, LLaVA
conversations with an ``<image>`` placeholder and several turns), ShareGPT4Video's caption jsonl (the whole-video
caption is the ``captions`` entry with idx "-1"), and the plain
conversations schema (user/assistant, absolute video path); unusable rows stop it with exit 2 naming the row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.data_import import import_dataset

LLAVA_VIDEO_178K = [
    {"id": "v_abc123-0", "conversations": [
        {"from": "human", "value": "<image>\nWhat is the person doing at the start of the video?"},
        {"from": "gpt", "value": "The person is opening a refrigerator."},
        {"from": "human", "value": "What do they take out?"},
        {"from": "gpt", "value": "A bottle of milk."}],
     "data_source": "0_30_s_academic_v0_1", "video": "academic_source/Charades/ABC12.mp4"},
    {"id": "ytb_xyz-1", "conversations": [
        {"from": "human", "value": "<image>\nDescribe this video in detail."},
        {"from": "gpt", "value": "A dog runs across a snowy field towards the camera."}],
     "data_source": "0_30_s_youtube_v0_1", "video": "liwei_youtube_videos/videos/youtube_video_2024/ytb_xyz.mp4"},
]
# sharegpt4video_40k.jsonl: the segments' captions and the whole video's (idx "-1") in one list; no summary field
SHAREGPT4VIDEO = [
    {"video_id": "mixkit-city-traffic-1", "video_path": "mixkit/mixkit-city-traffic-1.mp4",
     "zip_folder": "mixkit_videos_1.zip",
     "captions": [{"idx": "0", "content": "Cars drive through an intersection."},
                  {"idx": "1", "content": "A bus turns left."},
                  {"idx": "-1", "content": "The video shows busy city traffic at an intersection; cars pass and a bus "
                                           "turns left."}]},
]


def _videos(root: Path, rels: list[str]) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"\0")  # only existence is checked


def _load(out: Path):
    from datasets import load_from_disk

    return load_from_disk(str(out))["train"].to_list()


def test_llava_video_178k_json_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "LLaVA-Video-178K" / "0_30_s_academic_v0_1"
    root.mkdir(parents=True)
    _videos(root, [r["video"] for r in LLAVA_VIDEO_178K])
    (root / "qa.json").write_text(json.dumps(LLAVA_VIDEO_178K))
    pq.write_table(pa.Table.from_pylist(LLAVA_VIDEO_178K), root / "qa.parquet")
    for name in ("qa.json", "qa.parquet"):
        out = tmp_path / f"out-{name}"
        assert import_dataset(source=str(root / name), out=str(out)) == 0
        rows = _load(out)
        assert [r["question"] for r in rows] == ["What is the person doing at the start of the video?",
                                                  "What do they take out?", "Describe this video in detail."]
        assert rows[1]["answer"] == "A bottle of milk." and rows[1]["turn"] == 1
        assert rows[0]["video"] == str((root / "academic_source/Charades/ABC12.mp4").absolute())
        assert rows[2]["data_source"] == "0_30_s_youtube_v0_1" and rows[2]["source_id"] == "ytb_xyz-1"


def test_sharegpt4video_jsonl(tmp_path):
    src = tmp_path / "sharegpt4video_40k.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in SHAREGPT4VIDEO) + "\n")
    videos = tmp_path / "videos"
    _videos(videos, [r["video_path"] for r in SHAREGPT4VIDEO])
    out = tmp_path / "out"
    import_dataset(source=str(src), out=str(out), video_root=str(videos))
    (row,) = _load(out)
    assert row["question"] == "Describe this video in detail." and row["answer"].startswith("The video shows busy")
    assert row["video"].endswith("videos/mixkit/mixkit-city-traffic-1.mp4") and row["source_id"] == "mixkit-city-traffic-1"
    # without video_path, the file is named by its id
    (src.parent / "by_id.jsonl").write_text(json.dumps({k: v for k, v in SHAREGPT4VIDEO[0].items() if k != "video_path"}))
    _videos(videos, ["mixkit-city-traffic-1.mp4"])
    import_dataset(source=str(src.parent / "by_id.jsonl"), out=str(tmp_path / "out2"), video_root=str(videos))
    assert _load(tmp_path / "out2")[0]["video"].endswith("videos/mixkit-city-traffic-1.mp4")


def test_conversations_schema_user_assistant_absolute_paths(tmp_path):
    video = tmp_path / "clips" / "a.mp4"
    _videos(tmp_path, ["clips/a.mp4"])
    rows = [{"video": str(video), "conversations": [
        {"from": "system", "value": "You are a helpful assistant."},
        {"from": "user", "value": "<video>What colour is the car?"},
        {"from": "assistant", "value": "Red."}]}]
    (tmp_path / "c.json").write_text(json.dumps(rows))
    import_dataset(source=str(tmp_path / "c.json"), out=str(tmp_path / "out"), format="conversations")
    (row,) = _load(tmp_path / "out")
    assert (row["video"], row["question"], row["answer"]) == (str(video), "What colour is the car?", "Red.")


@pytest.mark.parametrize("bad, why", [
    ({"video": "a.mp4", "conversations": [{"from": "gpt", "value": "an answer first"}]}, "no question before it"),
    ({"video": "a.mp4", "conversations": [{"from": "human", "value": "q?"}, {"from": "bot", "value": "x"}]},
     "unknown speaker 'bot'"),
    ({"conversations": [{"from": "human", "value": "q?"}, {"from": "gpt", "value": "a"}]}, "no video path"),
    ({"video": "missing.mp4", "conversations": [{"from": "human", "value": "q?"}, {"from": "gpt", "value": "a"}]},
     "does not exist"),
    ({"video_path": "a.mp4", "captions": [{"idx": "0", "content": "x"}]}, "no whole-video caption"),
])
def test_unusable_row_is_named_and_exits_2(tmp_path, bad, why, capsys):
    from vidspec.decoding.cli import main

    _videos(tmp_path, ["a.mp4"])
    good = {"video": "a.mp4", "conversations": [{"from": "human", "value": "q?"}, {"from": "gpt", "value": "a"}]}
    src = tmp_path / "rows.json"
    src.write_text(json.dumps([good, bad]))
    with pytest.raises(ConfigError, match=rf"rows\.json: row 1: .*{why}"):
        import_dataset(source=str(src), out=str(tmp_path / "out"))
    assert main(["data", "import", "--source", str(src), "--out", str(tmp_path / "out2")]) == 2
    assert "row 1" in capsys.readouterr().err
    # --skip-invalid keeps the good row and says how many were skipped
    assert import_dataset(source=str(src), out=str(tmp_path / "out3"), skip_invalid=True) == 0
    assert len(_load(tmp_path / "out3")) == 1
