"""The GPT judge against a real OpenAI-compatible server on localhost answering with SmolLM2-135M.

The model is loaded once per test session (~15-30 s on 2 cores); each request then takes about a
second. Faults are injected on the same server. The tiny model's scores are not asserted: only that
its replies are parsed or honestly reported as unparsable.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import time

import pytest

from vidspec.decoding.errors import VidspecError
from vidspec.evaluation.judge import (
    CORRECTNESS,
    PROMPT_VERSION,
    GPTJudge,
    JudgeCache,
    JudgeConfig,
    JudgeError,
    Secret,
    build_messages,
    get_protocol,
    parse_score,
    render_messages,
)
from vidspec.evaluation.judge.prompt import GOLDEN_EXAMPLE, GOLDEN_PATH
from vidspec.evaluation.testing import ChatCompletionsServer, SmolLM2Chat

KEY = "sk-test-0123456789abcdefSECRET"
QUESTION = "Describe the video in detail."
REFERENCE = "A red circle moves from left to right while a small blue square stays still."
ANSWER = "A red circle moves to the right. A blue square is visible."


@pytest.fixture(scope="session")
def smollm2() -> SmolLM2Chat:
    return SmolLM2Chat()


@pytest.fixture(scope="module")
def server(smollm2: SmolLM2Chat):
    with ChatCompletionsServer(smollm2, max_tokens_cap=12) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh_server(request):
    if "server" in request.fixturenames:
        request.getfixturevalue("server").reset()


class RecordingSleep:
    """Sleeps for real (the server's timing matters) and remembers each delay."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(seconds)


def make_judge(server: ChatCompletionsServer, *, cache=None, sleep=None, **overrides) -> GPTJudge:
    settings = dict(
        base_url=server.base_url,
        model="smollm2-judge",
        api_key=KEY,
        timeout_s=60.0,  # generous: the model is slow when the machine is busy
        max_attempts=4,
        backoff_base_s=0.05,
        backoff_max_s=0.2,
    )
    settings.update(overrides)
    return GPTJudge(JudgeConfig(**settings), cache=cache, sleep=sleep or RecordingSleep())


# -- prompt and parsing (no server) -----------------------------------------------------------


def test_prompt_matches_golden_file():
    rendered = render_messages(build_messages(**GOLDEN_EXAMPLE))
    if os.environ.get("VIDSPEC_UPDATE_GOLDEN") == "1":
        GOLDEN_PATH.write_text(rendered, encoding="utf-8")
    assert GOLDEN_PATH.is_file(), "golden file missing: run with VIDSPEC_UPDATE_GOLDEN=1 to create it"
    assert rendered == GOLDEN_PATH.read_text(encoding="utf-8"), (
        "the judge prompt changed; if on purpose, regenerate with VIDSPEC_UPDATE_GOLDEN=1 and say why"
    )


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 4}', 4.0),
        ("{'score': 3}", 3.0),  # the Python-dict form lmms-eval asks for
        ('```json\n{"score": 2}\n```', 2.0),
        ("Score: 5", 5.0),
        ("The answer is fine. score = 1.5", 1.5),
        ("0", 0.0),
        ("4.", 4.0),
        ("I cannot rate this", None),
        ("", None),
        ('{"score": 7}', None),
        ('{"score": -1}', None),
        ('{"score": true}', None),
        ('{"verdict": "good"}', None),
    ],
)
def test_parse_score(reply, score):
    assert parse_score(reply) == score


@pytest.mark.parametrize(
    ("reply", "score", "correct", "parsed"),
    [
        ("{'pred': 'yes', 'score': 4}", 4.0, True, True),
        ("{'pred': 'no', 'score': 4.8}", 4.0, False, True),  # the integer part, as lmms-eval keeps it
        ('```python\n{"pred": "YES", "score": 2}\n```', 2.0, True, True),
        ("{'pred': 'yes'}", 0.0, True, True),
        ("yes, 4", 0.0, False, False),
        ("", 0.0, False, False),
    ],
)
def test_read_correctness(reply, score, correct, parsed):
    r = CORRECTNESS.read(reply)
    assert (r.score, r.correct, r.parsed) == (score, correct, parsed)


@pytest.mark.parametrize(("reply", "score", "parsed"),
                         [("{'score': 3}", 3.0, True), ("{'score': 4.8}", 4.0, True), ("Score: 5", 0.0, False),
                          ("{'score': 'x'}", 0.0, False), ("{}", 0.0, True)])
def test_read_detail(reply, score, parsed):
    r = get_protocol("detail").read(reply)
    assert (r.score, r.parsed) == (score, parsed)


def test_protocols_are_versioned_and_distinct():
    versions = {name: get_protocol(name).version for name in ("detail", "correctness", "score")}
    assert versions["score"] == PROMPT_VERSION and len(set(versions.values())) == 3
    assert get_protocol(None).name == "score"  # callers naming no protocol keep the earlier judgement
    with pytest.raises(ValueError, match="unknown judge protocol"):
        get_protocol("nope")
    msgs = get_protocol("detail").messages(QUESTION, ANSWER, REFERENCE)
    assert REFERENCE in msgs[1]["content"] and ANSWER in msgs[1]["content"] and "'score'" in msgs[1]["content"]


def test_config_from_env_and_arguments(monkeypatch):
    env = {"OPENAI_BASE_URL": "http://a.example/v1", "VIDSPEC_JUDGE_MODEL": "m1", "OPENAI_API_KEY": KEY}
    cfg = JudgeConfig.from_env(environ=env)
    assert (cfg.base_url, cfg.model, cfg.api_key) == ("http://a.example/v1", "m1", Secret(KEY))
    assert cfg.endpoint == "http://a.example/v1/chat/completions"
    env["VIDSPEC_JUDGE_BASE_URL"] = "http://b.example/v1/"
    assert JudgeConfig.from_env(environ=env).base_url == "http://b.example/v1/"  # ours wins
    cfg = JudgeConfig.from_env(environ=env, base_url="http://c.example/v1/chat/completions", model="m2")
    assert (cfg.endpoint, cfg.model) == ("http://c.example/v1/chat/completions", "m2")
    assert JudgeConfig.from_env(environ={}).api_key is None
    monkeypatch.setenv("OPENAI_API_KEY", "from-os-environ")
    assert JudgeConfig.from_env().api_key == Secret("from-os-environ")
    with pytest.raises(ValueError, match="max_attempts"):
        JudgeConfig(max_attempts=0)


# -- against the real model -------------------------------------------------------------------


def test_real_model_round_trip(server, tmp_path):
    judge = make_judge(server, cache=tmp_path / "cache.jsonl")
    t0 = time.perf_counter()
    verdict = judge.judge(QUESTION, ANSWER, REFERENCE, protocol="score")
    elapsed = time.perf_counter() - t0
    assert verdict.status in ("ok", "unparsable") and verdict.protocol == "score"
    assert verdict.prompt_version == PROMPT_VERSION
    if verdict.status == "ok":
        assert 0.0 <= verdict.score <= 5.0
    else:
        assert verdict.score is None and verdict.detail
    assert verdict.reply  # the tiny model always says something
    (request,) = server.requests
    assert request.body["temperature"] == 0
    assert request.body["model"] == "smollm2-judge"
    assert request.body["messages"] == build_messages(QUESTION, ANSWER, REFERENCE)
    assert request.authorization == f"Bearer {KEY}"
    print(f"one judge call against SmolLM2: {elapsed:.2f} s, reply {verdict.reply!r}")


def test_cache_hit_sends_no_second_request(server, tmp_path):
    path = tmp_path / "judge" / "cache.jsonl"
    judge = make_judge(server, cache=path)
    first = judge.judge(QUESTION, ANSWER, REFERENCE)
    assert server.request_count == 1 and not first.cached
    again = judge.judge(QUESTION, ANSWER, REFERENCE)
    assert again.cached and server.request_count == 1
    assert (again.score, again.status, again.reply) == (first.score, first.status, first.reply)
    # The cache is on disk: a new process (here: a new judge) does not ask again either.
    reloaded = make_judge(server, cache=JudgeCache(path))
    assert reloaded.judge(QUESTION, ANSWER, REFERENCE).cached
    assert server.request_count == 1
    # Another judge model is another judgement.
    make_judge(server, cache=path, model="other-judge").judge(QUESTION, ANSWER, REFERENCE)
    assert server.request_count == 2
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2 and {r["model"] for r in records} == {"smollm2-judge", "other-judge"}


def test_cache_survives_a_truncated_last_line(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = JudgeCache(path)
    cache.put("k1", {"score": 3.0, "status": "ok", "reply": "{}", "model": "m", "detail": ""})
    with path.open("a") as f:
        f.write('{"key": "k2", "sco')  # a run killed mid-write
    reloaded = JudgeCache(path)
    assert "k1" in reloaded and "k2" not in reloaded and len(reloaded) == 1


# -- fault injection --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["500", "429"])
def test_retries_recover_after_server_errors(server, mode):
    server.inject(mode, times=2, retry_after="0")
    sleep = RecordingSleep()
    verdict = make_judge(server, sleep=sleep).judge(QUESTION, ANSWER, REFERENCE)
    assert verdict.status in ("ok", "unparsable")
    assert server.request_count == 3
    assert [r.fault for r in server.requests] == [mode, mode, None]
    if mode == "500":
        assert sleep.delays == [0.05, 0.1]  # exponential backoff from backoff_base_s
    else:
        assert sleep.delays == [0.0, 0.0]  # Retry-After replaces it


def test_retry_after_is_honoured(server):
    server.inject("429", times=1, retry_after="0.7")
    sleep = RecordingSleep()
    t0 = time.perf_counter()
    make_judge(server, sleep=sleep).judge(QUESTION, ANSWER, REFERENCE)
    assert sleep.delays == [0.7]
    assert time.perf_counter() - t0 >= 0.7
    # A server asking for too long a wait is capped.
    server.inject("429", times=1, retry_after="3600")
    sleep = RecordingSleep()
    make_judge(server, sleep=sleep, max_retry_after_s=0.1).judge(QUESTION, "other answer", REFERENCE)
    assert sleep.delays == [0.1]


def test_timeouts_are_retried(server):
    # The retry is answered with a canned reply, so the test does not depend on how fast the
    # model generates on a busy machine.
    server.inject("timeout", times=1, sleep_s=3.0)
    server.inject("unparsable")
    t0 = time.perf_counter()
    verdict = make_judge(server, timeout_s=1.0).judge(QUESTION, ANSWER, REFERENCE)
    assert time.perf_counter() - t0 >= 1.0
    assert [r.fault for r in server.requests] == ["timeout", "unparsable"]
    assert verdict.status == "unparsable" and verdict.reply == "I cannot rate this"


def test_garbage_body_is_retried_then_unparsable(server, tmp_path):
    judge = make_judge(server, cache=tmp_path / "c.jsonl")
    attempts = judge.config.max_attempts
    server.inject("garbage", times=attempts)
    verdict = judge.judge(QUESTION, ANSWER, REFERENCE, protocol="detail")
    assert server.request_count == attempts  # retried like a 5xx
    # lmms-eval's rule under the detail protocol: unreadable scores 0, and is reported as such.
    assert verdict.status == "unparsable" and verdict.score == 0.0
    assert "not JSON" in verdict.reply and "not chat-completions JSON" in verdict.detail
    # A broken body is not cached: the next run asks again (and gets the model's answer).
    assert judge.judge(QUESTION, ANSWER, REFERENCE, protocol="detail").cached is False
    assert server.request_count == attempts + 1


def test_unparsable_reply_is_reported_not_zero_under_score(server, tmp_path):
    server.inject("unparsable")
    judge = make_judge(server, cache=tmp_path / "c.jsonl")
    verdict = judge.judge(QUESTION, ANSWER, REFERENCE, protocol="score")
    assert (verdict.score, verdict.status, verdict.reply) == (None, "unparsable", "I cannot rate this")
    # At temperature 0 the judge would say the same again: cached, reported, never turned into 0.
    cached = judge.judge(QUESTION, ANSWER, REFERENCE, protocol="score")
    assert cached.cached and cached.score is None and cached.status == "unparsable"
    assert server.request_count == 1


@pytest.mark.parametrize(("protocol", "correct"), [("detail", None), ("correctness", False)])
def test_unparsable_reply_scores_zero_under_lmms_protocols(server, tmp_path, protocol, correct):
    server.inject("unparsable")
    judge = make_judge(server, cache=tmp_path / "c.jsonl")
    verdict = judge.judge(QUESTION, ANSWER, REFERENCE, protocol=protocol)
    assert (verdict.score, verdict.status, verdict.correct) == (0.0, "unparsable", correct)
    assert verdict.protocol == protocol and verdict.prompt_version == get_protocol(protocol).version
    cached = judge.judge(QUESTION, ANSWER, REFERENCE, protocol=protocol)
    assert cached.cached and (cached.score, cached.status, cached.correct) == (0.0, "unparsable", correct)
    # Each protocol has its own cache key: the score protocol asks again.
    judge.judge(QUESTION, ANSWER, REFERENCE, protocol="score")
    assert server.request_count == 2


def test_protocol_messages_and_max_tokens(server):
    judge = make_judge(server)
    judge.judge(QUESTION, ANSWER, REFERENCE, protocol="correctness")
    (request,) = server.requests
    assert request.body["messages"] == CORRECTNESS.messages(QUESTION, ANSWER, REFERENCE)
    assert request.body["max_tokens"] == 64


@pytest.mark.parametrize("mode", ["500", "429"])
def test_exhausted_retries_raise_a_clear_error(server, mode, caplog):
    server.inject(mode, times=3, retry_after="0")
    judge = make_judge(server, max_attempts=3)
    with caplog.at_level(logging.DEBUG), pytest.raises(JudgeError) as info:
        judge.judge(QUESTION, ANSWER, REFERENCE)
    err = info.value
    assert isinstance(err, VidspecError)
    assert err.status == int(mode) and err.attempts == 3 and server.request_count == 3
    message = str(err)
    assert server.base_url in message and f"HTTP {mode}" in message and "3 attempt" in message
    assert KEY not in message and KEY not in repr(err) and KEY not in caplog.text


def test_client_errors_are_not_retried(server):
    judge = make_judge(server, base_url=f"http://127.0.0.1:{server.port}/wrong/path")
    with pytest.raises(JudgeError, match="HTTP 404") as info:
        judge.judge(QUESTION, ANSWER, REFERENCE)
    assert info.value.attempts == 1 and server.request_count == 1


def test_unreachable_endpoint_raises_after_retries(server, caplog):
    # A port that was free a moment ago: nobody listens there.
    idle = ChatCompletionsServer(server.model)
    port = idle.port
    idle.stop()
    judge = make_judge(server, base_url=f"http://127.0.0.1:{port}/v1", max_attempts=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(JudgeError, match="connection failed") as info:
        judge.judge(QUESTION, ANSWER, REFERENCE)
    assert info.value.status is None and f"127.0.0.1:{port}" in str(info.value)
    assert info.value.__cause__ is None
    assert KEY not in str(info.value) and KEY not in caplog.text


def test_the_key_never_leaks(server, tmp_path, caplog):
    cache_path = tmp_path / "cache.jsonl"
    with caplog.at_level(logging.DEBUG):
        judge = make_judge(server, cache=cache_path)
        server.inject("unparsable")
        judge.judge(QUESTION, ANSWER, REFERENCE)
        server.inject("garbage")
        judge.judge(QUESTION, "another answer", REFERENCE)
    cfg = judge.config
    shown = [repr(judge), str(judge), repr(cfg), str(cfg), repr(cfg.api_key), str(cfg.api_key)]
    shown.append(json.dumps(cfg.to_dict()))
    shown.append(cache_path.read_text())
    shown.append(caplog.text)
    for text in shown:
        assert KEY not in text
    assert cfg.to_dict()["api_key"] == "***"
    assert cfg.api_key.reveal() == KEY
    with pytest.raises(TypeError):
        pickle.dumps(cfg)
    assert PROMPT_VERSION  # part of every cache key
