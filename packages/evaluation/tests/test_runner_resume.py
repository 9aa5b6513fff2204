"""Kill a running ``vidspec eval`` with SIGKILL, rerun it, and lose nothing and redo nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from vidspec.evaluation.records import read_jsonl
from vidspec.evaluation.runner import EvalConfig, run_eval
from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid


def test_resume_after_sigkill(tmp_path):
    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=3, seed=1, preset="easy", size="64x64",
                                                             split="validation", mcq_per_video=0,
                                                             open_per_video=0), progress=False)
    out = tmp_path / "run"
    args = ["--benchmark", "synthvid_captions", "--data", str(data), "--out", str(out), "--methods", "ar,sd",
            "--max-new-tokens", "10", "--warmup", "false", "--no-progress", "--report", "false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vidspec.decoding.cli", "eval", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    records = out / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and records.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = read_jsonl(records)
    assert 2 <= len(before) < 6
    # A write torn by the kill (simulated: the kill itself may land between records).
    with open(records, "ab") as fh:
        fh.write(b'{"schema": 1, "sample_id": "sv1-000002#0", "method": "sd", "text": "hal')

    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(data), out=str(out), methods=("ar", "sd"),
                     max_new_tokens=10, warmup=False, progress=False)
    summary = run_eval(cfg)
    after = read_jsonl(records)
    keys = [(r["sample_id"], r["method"]) for r in after]
    assert len(keys) == len(set(keys)) == 6, "every (sample, method) exactly once"
    assert after[: len(before)] == before, "records written before the kill are kept, not redone"
    assert all(r["token_identical_to_ar"] for r in after)
    assert summary["methods"]["sd"]["n_samples"] == 3
    assert records.read_bytes().endswith(b"\n")


def test_read_jsonl_reads_archived_gzip_records_as_the_plain_file(tmp_path):
    """Runs archived under benchmarks/results are kept as records.jsonl.gz; read_jsonl gives the same records
    (a partial last line ignored in both), and a committed archive parses."""
    import gzip
    import json
    from pathlib import Path

    import pytest

    from vidspec.decoding.errors import ConfigError

    lines = [json.dumps({"schema": 1, "sample_id": f"s{i}", "method": "ar", "tau": 1.0}) for i in range(3)]
    text = "\n".join(lines) + "\n" + '{"schema": 1, "sample_'  # killed mid-write
    plain, packed = tmp_path / "records.jsonl", tmp_path / "records.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert read_jsonl(packed) == read_jsonl(plain) and [r["sample_id"] for r in read_jsonl(packed)] == ["s0", "s1", "s2"]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[:-6])
    with pytest.raises(ConfigError, match="cut.jsonl.gz: not a complete gzip file"):
        read_jsonl(cut)
    archive = Path(__file__).resolve().parents[3] / "benchmarks/results/long_sparrow_h200_64f/records.jsonl.gz"
    recs = read_jsonl(archive)
    assert {r["method"] for r in recs} == {"ar", "sparrow"} and len(recs) == 60
