"""The judge's faults: a bad base URL is refused before any work, non-JSON replies are retried,
unparsable verdicts are asked again on a rerun (unless kept), and the timeout is an option."""

from __future__ import annotations

import time

import pytest

from vidspec.evaluation.judge import GPTJudge, JudgeConfig
from vidspec.evaluation.testing import ChatCompletionsServer

QUESTION = "Describe the video in detail."
REFERENCE = "A red circle moves from left to right."


class _FixedScore:
    """A judge model that always gives 4 (fast: no language model)."""

    name = "fixed-judge"

    def complete(self, messages, max_tokens):
        return '{"score": 4}'


@pytest.fixture(scope="module")
def server():
    with ChatCompletionsServer(_FixedScore()) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh(server):
    server.reset()


def _judge(server, **kw) -> GPTJudge:
    cfg = JudgeConfig(base_url=server.base_url, model="fixed-judge", backoff_base_s=0.0, backoff_max_s=0.0, **kw)
    return GPTJudge(cfg, sleep=lambda s: None)


@pytest.mark.parametrize("url", ["notaurl", "ftp://judge.example/v1", "http://"])
def test_a_bad_base_url_is_refused_before_any_decoding(tmp_path, capfd, url):
    from vidspec.decoding.cli import main

    out = tmp_path / "run"
    t0 = time.perf_counter()
    code = main(["eval", "--benchmark", "synthvid_captions", "--data", str(tmp_path / "missing"), "--out", str(out),
                 "--judge", "--judge-base-url", url, "--no-progress"])
    err = capfd.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "Traceback" not in err, err
    assert not (out / "records.jsonl").exists() and time.perf_counter() - t0 < 10


def test_a_non_json_reply_is_retried_like_a_5xx(server):
    server.inject("garbage", times=2)
    verdict = _judge(server).judge(QUESTION, "A red circle moves.", REFERENCE, protocol="score")
    assert verdict.status == "ok" and verdict.score == 4.0
    assert server.request_count == 3


def test_non_json_replies_that_never_end_are_unparsable_after_the_retries(server):
    server.inject("garbage", times=10)
    verdict = _judge(server, max_attempts=3).judge(QUESTION, "A red circle moves.", REFERENCE, protocol="score")
    assert verdict.status == "unparsable" and server.request_count == 3


def test_timeout_option(server):
    server.inject("timeout", times=1, sleep_s=1.5)
    t0 = time.perf_counter()
    verdict = _judge(server, timeout_s=0.3).judge(QUESTION, "A red circle moves.", REFERENCE, protocol="score")
    assert verdict.status == "ok" and time.perf_counter() - t0 < 1.4


def _synthvid(tmp_path):
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    return generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=1, preset="easy", size="64x64",
                                                             split="validation", mcq_per_video=0,
                                                             open_per_video=1), progress=False)


def test_a_rerun_asks_unparsable_verdicts_again_unless_kept(tmp_path, server, capfd):
    from vidspec.decoding.cli import main
    from vidspec.evaluation.records import read_jsonl

    data = _synthvid(tmp_path)
    out = tmp_path / "run"
    args = ["eval", "--benchmark", "synthvid_captions", "--data", str(data), "--out", str(out), "--methods", "ar",
            "--max-new-tokens", "4", "--warmup", "false", "--no-progress", "--report", "false", "--judge",
            "--judge-base-url", server.base_url, "--judge-model", "fixed-judge", "--judge-timeout", "5"]
    server.inject("unparsable", times=100)
    assert main(args) == 0, capfd.readouterr().err
    first = read_jsonl(out / "judgements.jsonl")
    assert first and all(j["judge_status"] == "unparsable" for j in first)
    asked = server.request_count

    assert main([*args, "--judge-keep-unparsable"]) == 0, capfd.readouterr().err
    assert server.request_count == asked  # kept: nothing asked
    assert all(j["judge_status"] == "unparsable" for j in read_jsonl(out / "judgements.jsonl"))

    server.reset()
    assert main(args) == 0, capfd.readouterr().err
    assert server.request_count == len(first)  # each unparsable verdict asked once more
    again = read_jsonl(out / "judgements.jsonl")
    keys = [(j["sample_id"], j["method"]) for j in again]
    assert len(keys) == len(set(keys)) == len(first)
    assert all(j["judge_status"] == "ok" and j["judge_score"] == 4.0 for j in again)
