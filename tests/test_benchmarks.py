"""One smoke run per maintained benchmark in benchmarks/ (benchmarks/README.md lists them).

Each runs the real script as a user does, at toy size on the CPU where the script has such a mode, and checks
that it exits 0 and writes its result JSON with machine info. The GPU-only benchmarks (Triton kernels, CUDA
graphs at 7B shape) have their smoke run behind the ``gpu`` marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
RELEASES = REPO / "data" / "releases"


def _run(script: str, *args: str, timeout: int = 420) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _has_machine_info(doc: dict) -> None:
    assert doc["machine"] and ("device" in doc["machine"] or "gpu" in doc["machine"])


def test_sparrow_draft_step_smoke(tmp_path):
    """The one-layer draft's propose(K) cost, eager vs the fast drafter, at CPU size: both propose the same tokens."""
    _run("sparrow_draft_step_gpu.py", "--smoke", "--device", "cpu", "--families", "llava-ov", "--out", str(tmp_path))
    doc = json.loads((tmp_path / "sparrow_draft_step_gpu_smoke.json").read_text())
    _has_machine_info(doc)
    assert doc["rows"] and all(r["same_tokens"] for r in doc["rows"])
    assert all(r["fast_ms_per_round"] > 0 and r["eager_ms_per_round"] > 0 for r in doc["rows"])


def _records(path: Path) -> Path:
    """A records.jsonl as `vidspec eval` writes it, for two Sparrow samples with known rounds."""
    from vidspec.decoding.types import GenerationResult, StepRecord, Timings

    rows = []
    for i, rounds in enumerate(((4, 2, 0, 3), (1, 4, 4))):
        steps = tuple(StepRecord(drafted=4, accepted=n, emitted=n + 1) for n in rounds)
        res = GenerationResult(method="sparrow", text="", token_ids=tuple(range(sum(s.emitted for s in steps))),
                               steps=steps, timings=Timings(prefill_s=0.0, decode_s=1.0, wall_s=1.0),
                               finish_reason="eos")
        rows.append({"method": "sparrow", "sample_id": f"s{i}", "k": 4, "target_passes": len(steps),
                     "drafted": 4 * len(steps), "accepted": sum(rounds), "num_new_tokens": len(res.token_ids),
                     "acceptance_by_position": res.acceptance_by_position()})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_replay_7b_smoke(tmp_path):
    """Recorded acceptance replayed through the fast engine's code paths at tiny shapes on the CPU."""
    records = _records(tmp_path / "records.jsonl")
    _run("replay_7b.py", "--smoke", "--device", "cpu", "--records", str(records), "--methods", "sparrow",
         "--families", "llava-ov", "--out", str(tmp_path / "out"))
    docs = list((tmp_path / "out").glob("*.json"))
    assert docs, "replay_7b wrote no JSON"
    _has_machine_info(json.loads(docs[0].read_text()))


def test_sparrow_long_video_smoke(tmp_path):
    """Sparrow's acceptance at two frame budgets of the same video, with the committed releases."""
    out = tmp_path / "long.json"
    _run("sparrow_long_video.py", "--data", str(tmp_path / "sv"), "--gen-frames", "16", "--gen-videos", "2",
         "--frames", "8,16", "--limit", "1", "--max-new-tokens", "8", "--methods", "ar,sparrow", "--out", str(out))
    doc = json.loads(out.read_text())
    _has_machine_info(doc)
    text = json.dumps(doc)
    assert "sparrow" in text and "8" in text and "16" in text


def test_pair_projection_smoke(tmp_path):
    """The paper-pair projection at CPU size: every K of the cost table is measured, every recorded chain method is
    projected with the recorded tau, and tree methods are listed as not projected."""
    records = BENCH / "results" / "replay_7b_input_captions_h200.records.jsonl.gz"
    # Records listing their rounds in order, K changed within the request by the adaptive policy (8, then 4, then 0).
    adaptive = tmp_path / "adaptive.jsonl"
    adaptive.write_text(json.dumps({"benchmark": "captions", "sample_id": "a", "method": "ar", "k": 0, "score": 0.5,
                                    "target_passes": 18}) + "\n" + json.dumps(
        {"benchmark": "captions", "sample_id": "a", "method": "sd", "k": 8, "score": 0.4, "target_passes": 4,
         "drafted": 20, "accepted": 14, "acceptance_by_position": [1.0] * 4 + [0.5] * 4,
         "rounds": [[8, 8, 9], [8, 2, 3], [4, 4, 5], [0, 0, 1]]}) + "\n")
    _run("pair_projection_gpu.py", "--smoke", "--device", "cpu", "--records", f"{records},adaptive={adaptive}",
         "--ks", "4,16", "--sparrow-ks", "16", "--limit", "4", "--out", str(tmp_path))
    doc = json.loads((tmp_path / "pair_projection_smoke.json").read_text())
    _has_machine_info(doc)
    assert "PROJECTION" in doc["projection_note"] and doc["formula"]
    for ctx in ("long", "short"):
        assert set(doc["costs"]["target"]["contexts"][ctx]["verify_ms"]) == {"5", "17"}
        assert set(doc["costs"]["draft"]["contexts"][ctx]["round_ms"]["2"]) == {"1", "4", "16"}
    groups = {g["method"]: g for g in doc["projection"]["groups"] if g["records"] != "adaptive"}
    (adapt,) = [g for g in doc["projection"]["groups"] if g["records"] == "adaptive"]
    assert adapt["retention"]["retention"] == pytest.approx(0.8)
    for p in adapt["projection"].values():
        assert p["tau"] == pytest.approx(18 / 4) and p["k_used"] == [0, 4, 8] and p["rounds_in_order_samples"] == 1
    assert {"sd", "lvspec-pst", "fly", "sparrow"} <= set(groups)
    assert any(n["method"] == "tree-sparrow" for n in doc["projection"]["not_projected"])
    import gzip

    rows = [json.loads(x) for x in gzip.decompress(records.read_bytes()).decode().splitlines()]
    for method in ("sd", "sparrow"):
        recs = [r for r in rows if r["method"] == method][:4]
        tau = sum(r["accepted"] + r["target_passes"] for r in recs) / sum(r["target_passes"] for r in recs)
        for p in groups[method]["projection"].values():
            assert p["tau"] == pytest.approx(tau) and p["dsr"] > 0 and 0 < p["draft_share"] < 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_engine_gpu_quick(tmp_path):
    """The fast engine's AR and verify steps against the memory-bandwidth limit (2k context, Qwen shape)."""
    _run("engine_gpu.py", "--quick", "--out", str(tmp_path), timeout=900)
    _has_machine_info(json.loads(next(tmp_path.glob("*.json")).read_text()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gemv_sweep_gpu_one_shape(tmp_path):
    """The Triton GEMV block-size sweep on one weight shape writes a table the engine can read."""
    table = tmp_path / "table.json"
    _run("gemv_sweep_gpu.py", str(tmp_path), "--rows", "1", "--budget-s", "20", "--table-out", str(table),
         timeout=900)
    assert json.loads(table.read_text())


def test_loose_defaults_smoke(tmp_path):
    """The sweep behind the loose defaults: strict, the defaults and the paper rule on two captions and two MCQs;
    the defaults keep the strict twins' tokens (they are verified strictly), and parts merge into one file."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=3, preset="easy", frames=8,
                                                            size="64x64", split="validation", styles="alpha:1,beta:1",
                                                            mcq_per_video=1, open_per_video=0), progress=False)
    out = tmp_path / "check.json"
    _run("loose_defaults.py", "--data", str(data), "--grid", "check", "--limit", "2", "--max-new-tokens", "12",
         "--out", str(out))
    doc = json.loads(out.read_text())
    _has_machine_info(doc)
    rows = doc["settings"]
    assert set(rows) == {"strict", "defaults", "paper"} and set(doc["ar"]) == {"synthvid_captions", "synthvid_mcq"}
    for bench in ("synthvid_captions", "synthvid_mcq"):
        assert rows["strict"]["methods"]["sd"][bench]["token_identical"] == 2
        assert rows["defaults"]["methods"]["sparrow-lvspec-pst"][bench]["token_identical"] == 2
    merged = tmp_path / "merged.json"
    _run("loose_defaults.py", "merge", str(merged), f"set, seed 3:check:{out}")
    assert json.loads(merged.read_text())["runs"]["set, seed 3"]["defaults_label"] == "defaults"


def test_loose_ablation_smoke(tmp_path):
    """The speed x fidelity grid of the loose verifiers on the committed releases: every method decodes the
    same two captions and answers the same two questions; strict sd stays token-identical to AR."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=3, preset="easy", frames=8,
                                                            size="64x64", split="validation", styles="alpha"),
                             progress=False)
    out = tmp_path / "grid.json"
    _run("loose_ablation.py", "--data", str(data), "--limit", "2", "--mcq-limit", "2", "--max-new-tokens", "12",
         "--scorers", "cosine", "--out", str(out))
    doc = json.loads(out.read_text())
    _has_machine_info(doc)
    methods = doc["methods"]
    assert {"ar", "sd", "fly"} <= set(methods) and any(m.startswith("lvspec") for m in methods)
    assert methods["sd"]["identical_to_ar"] == 1.0 and methods["sd"]["loose_accepted_share"] == 0.0

    # --sweep: the Qwen2.5-VL pair through vidspec eval at two K, the records of one K and the acceptance plot
    qwen = RELEASES / "qwen2.5-vl"
    sweep, records = tmp_path / "pair.json", tmp_path / "rec"
    _run("loose_ablation.py", "--sweep", "--data", str(data), "--target", str(qwen / "synthvid-target"),
         "--draft", str(qwen / "synthvid-draft"), "--k", "4,6", "--records-k", "6", "--plot-k", "6", "--limit", "1",
         "--mcq-limit", "1", "--max-new-tokens", "12", "--runs", str(tmp_path / "runs"), "--records", str(records),
         "--out", str(sweep))
    doc = json.loads(sweep.read_text())
    _has_machine_info(doc)
    clip = doc["results"]["clip"]
    assert set(clip) == {"4", "6"}
    assert set(clip["6"]) == {"ar", "sd", "lvspec", "lvspec-pst", "fly", "lvspec-prob"}
    assert clip["6"]["sd"]["f1_retention"] == 1.0 and clip["6"]["sd"]["token_identical_share"] == 1.0
    assert len(clip["6"]["sd"]["acceptance_by_position"]) <= 6 and doc["settings"]["prob"]["decode"]["eps"] == 0.3
    import gzip

    recs = [json.loads(x) for x in gzip.decompress(Path(f"{records}_clip_cpu.jsonl.gz").read_bytes()).splitlines()]
    assert {r["k"] for r in recs if r["method"] != "ar"} == {6} and {r["method"] for r in recs} == set(clip["6"])
    assert {r["sweep_k"] for r in recs} == {6} and doc["settings"]["paper"]["decode"]["adaptive"] is False
    # K never changed within a request (adaptive K off; rounds draft fewer only where the token budget ends)
    assert all(len(r.get("k_history") or [[0, 6]]) == 1 for r in recs if r["method"] != "ar")
    assert Path(doc["plot"]).is_file()


def test_train_7b_smoke(tmp_path):
    """The 7B Sparrow training benchmark at tiny shape on the CPU (DDP only: FSDP needs a GPU): each recipe takes
    its optimizer steps online and from a feature cache, and what the draft saw in a step equals inference's."""
    _run("train_7b.py", "--smoke", "--out", str(tmp_path))
    doc = json.loads((tmp_path / "train_7b.json").read_text())
    _has_machine_info(doc)
    assert doc["git"] is not None and set(doc["families"]) == {"qwen2.5-vl", "llava-ov"}
    for fam in doc["families"].values():
        assert set(fam["runs"]) == {"ddp-online", "ddp-cache"}
        assert fam["distill_data"]["batched"]["new_tokens_per_s"] > 0  # distill-data's batched generation
        for run in fam["runs"].values():
            assert run["optimizer_steps"] == doc["steps"], run
            rec = run["record"]
            assert rec["inv_freq_dtype"] == "torch.float32" and rec["positions_equal"] and rec["feature_max_abs_diff"] == 0
            assert run["short"]["step_s"] > 0 and run["long"]["text_tokens_per_s"] > 0


def test_user_path_smoke(tmp_path):
    """`vidspec generate` processes and the warm Python API at tiny shapes on the CPU: every part runs and reports
    its one-time costs apart from the per-token ones."""
    # (the opt-in compile-artifacts processes are left to the GPU runs; test_warm.py covers saving and loading them)
    _run("user_path_gpu.py", "--smoke", "--processes", "ar_first,sd", "--out", str(tmp_path))
    doc = json.loads((tmp_path / "user_path_smoke.json").read_text())
    _has_machine_info(doc)
    for name in ("ar_first", "sd"):
        proc = doc["processes"][name]
        assert proc["returncode"] == 0, proc.get("stderr_tail")
        rec = proc["records"][-1]
        assert rec["load_s"] > 0 and rec["warmup_s"] > 0 and rec["decode_ms_per_token"] > 0
        # where the warm-up went, from the warm-up's own log line
        assert proc["warmup_detail"]["decode_s"] > 0 and "compile" in proc["warmup_detail"]
    assert doc["goals"]["ar_processes_same_tokens"]["value"] is True
    assert len(doc["processes"]["sd"]["records"]) == 2  # a two-request JSONL, one line each
    assert doc["processes"]["sd"]["records"][0]["k_history"][0] == [0, 4]
    api = doc["api"]
    assert all("error" not in api["methods"][m] for m in ("ar", "sd", "sparrow")), api["methods"]
    assert api["engine_step_ms"] > 0 and api["hf_generate"]["decode_ms_per_token"] > 0
    assert api["eager_profile"] and set(doc["goals"]) >= {"eager_vs_hf_generate", "api_sd_vs_ar"}
