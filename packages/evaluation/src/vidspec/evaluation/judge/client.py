"""A GPT judge over any OpenAI-compatible chat-completions endpoint.

Usage::

    from vidspec.evaluation.judge import GPTJudge, JudgeConfig

    # base URL, model and key from VIDSPEC_JUDGE_BASE_URL (or OPENAI_BASE_URL),
    # VIDSPEC_JUDGE_MODEL and OPENAI_API_KEY; any argument overrides its variable.
    judge = GPTJudge(JudgeConfig.from_env(), cache="out/judge_cache.jsonl")
    verdict = judge.judge(question, answer=prediction, reference=ground_truth, protocol="detail")
    verdict = judge.judge(question, answer=prediction, reference=truth, protocol="correctness")  # MovieChat
    verdict.score, verdict.correct, verdict.status, verdict.protocol, verdict.prompt_version

The API key is held in a :class:`Secret`: it goes into the ``Authorization`` header and nowhere
else. It is not in any ``repr``, log line, error message, cache record or ``dataclasses.asdict``
output that can be serialised.
"""

from __future__ import annotations

import email.utils
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal
from urllib.parse import urlsplit

import requests

from vidspec.decoding.errors import VidspecError
from vidspec.evaluation.judge.cache import JudgeCache, verdict_key
from vidspec.evaluation.judge.protocols import JudgeProtocol, get_protocol

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: lmms-eval's current default judge model; other models give other absolute scores.
DEFAULT_MODEL = "gpt-4o-2024-11-20"

ENV_BASE_URL = ("VIDSPEC_JUDGE_BASE_URL", "OPENAI_BASE_URL")
ENV_MODEL = "VIDSPEC_JUDGE_MODEL"
ENV_API_KEY = "OPENAI_API_KEY"

#: How much of a reply or error body is kept; enough to see what went wrong.
_SNIPPET = 300


class JudgeError(VidspecError):
    """The judge endpoint could not be used: it kept failing after retries, or refused the request.

    Attributes:
        endpoint: the URL that was called.
        status: the last HTTP status, or ``None`` when no response came (timeout, connection).
        attempts: how many requests were made.
    """

    def __init__(self, message: str, *, endpoint: str, status: int | None, attempts: int) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status
        self.attempts = attempts


class Secret:
    """A string that never shows itself: ``repr``/``str`` print ``***``; :meth:`reveal` returns it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value, for the one place that needs it (the HTTP header)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> Any:
        # Pickling would write the key into whatever file holds the pickle.
        raise TypeError("a Secret cannot be pickled")


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to call the judge.

    Attributes:
        base_url: the API root, e.g. ``https://api.openai.com/v1``; ``/chat/completions`` is
            appended unless the URL already ends with it.
        model: the judge model name sent in each request (also part of every cache key).
        api_key: bearer token; a ``str`` is wrapped in a :class:`Secret`. ``None`` sends no
            ``Authorization`` header (local servers).
        timeout_s: seconds to wait for one response before the attempt counts as timed out.
        max_attempts: requests made at most for one verdict (1 = no retry).
        backoff_base_s: delay before the second attempt; doubles for each further attempt.
        backoff_max_s: upper bound of the exponential delay.
        max_retry_after_s: upper bound on a server's ``Retry-After``, which otherwise replaces
            the exponential delay.
        max_tokens: reply length limit; the reply is a small JSON object.
    """

    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: Secret | None = None
    timeout_s: float = 60.0
    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    max_retry_after_s: float = 120.0
    max_tokens: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", Secret(self.api_key) if self.api_key else None)
        if self.api_key is not None and not isinstance(self.api_key, Secret):
            raise TypeError("JudgeConfig.api_key must be a str, a Secret or None")
        check_base_url(self.base_url)
        if not self.model:
            raise ValueError("JudgeConfig.model must not be empty")
        if self.max_attempts < 1:
            raise ValueError(f"JudgeConfig.max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("timeout_s", "backoff_base_s", "backoff_max_s", "max_retry_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"JudgeConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_tokens < 1:
            raise ValueError(f"JudgeConfig.max_tokens must be >= 1, got {self.max_tokens}")

    @classmethod
    def from_env(
        cls,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | Secret | None = None,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> JudgeConfig:
        """A config whose base URL, model and key come from the arguments, else the environment.

        Args:
            base_url: else ``VIDSPEC_JUDGE_BASE_URL``, else ``OPENAI_BASE_URL``, else OpenAI's.
            model: else ``VIDSPEC_JUDGE_MODEL``, else :data:`DEFAULT_MODEL`.
            api_key: else ``OPENAI_API_KEY``, else none.
            environ: the environment to read (default ``os.environ``).
            **kwargs: the other :class:`JudgeConfig` fields.
        """
        env = os.environ if environ is None else environ
        if base_url is None:
            base_url = next((env[k] for k in ENV_BASE_URL if env.get(k)), DEFAULT_BASE_URL)
        model = model or env.get(ENV_MODEL) or DEFAULT_MODEL
        if api_key is None:
            api_key = env.get(ENV_API_KEY) or None
        return cls(base_url=base_url, model=model, api_key=api_key, **kwargs)

    @property
    def endpoint(self) -> str:
        """The chat-completions URL requests go to."""
        url = self.base_url.rstrip("/")
        return url if url.endswith("/chat/completions") else url + "/chat/completions"

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values, with the key shown only as present or absent."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["api_key"] = "***" if self.api_key is not None else None
        return out


def check_base_url(url: str) -> str:
    """Refuse a judge base URL that is not ``http(s)://host[:port][/path]``; returns it.

    Raises:
        ValueError: naming the URL and what a valid one looks like.
    """
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"judge base URL {url!r} is not an http(s) URL with a host "
                         f"(e.g. {DEFAULT_BASE_URL} or http://localhost:8000/v1)")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"judge base URL {url!r} has an invalid port") from None
    return url


def _chat_content(response: requests.Response) -> str | None:
    """The reply text of a chat-completions body, or None when the body is not one."""
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


VerdictStatus = Literal["ok", "unparsable"]


@dataclass(frozen=True)
class Verdict:
    """The judge's score for one answer.

    Attributes:
        score: 0-5. An unreadable reply scores 0 under the ``detail`` and ``correctness`` protocols
            (lmms-eval's rule, so averages compare with its) and ``None`` under ``score``; either way its
            ``status`` is ``"unparsable"`` and reports count them.
        status: ``"ok"`` or ``"unparsable"``.
        reply: the judge's reply text (or the start of an invalid response body).
        model: the judge model asked.
        key: the cache key of this judgement.
        cached: whether the verdict came from the cache instead of a request.
        detail: why a verdict is unparsable; empty when ok.
        protocol: the judge protocol (:mod:`~vidspec.evaluation.judge.protocols`): ``detail``,
            ``correctness`` or ``score``.
        prompt_version: the protocol's version (a hash of its text).
        correct: the ``correctness`` protocol's yes/no (None for the others).
    """

    score: float | None
    status: VerdictStatus
    reply: str
    model: str
    key: str
    cached: bool = False
    detail: str = ""
    protocol: str = "score"
    prompt_version: str = ""
    correct: bool | None = None

    def to_record(self) -> dict[str, Any]:
        """The verdict as a JSON object (the cache's and the results' format)."""
        return {
            "score": self.score,
            "status": self.status,
            "reply": self.reply,
            "model": self.model,
            "detail": self.detail,
            "protocol": self.protocol,
            "prompt_version": self.prompt_version,
            "correct": self.correct,
        }


def _scrub(text: str, secret: Secret | None) -> str:
    """``text`` with any occurrence of the key replaced, in case a server echoes it back."""
    if secret is not None and secret.reveal():
        text = text.replace(secret.reveal(), "***")
    return text


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class GPTJudge:
    """Judges answers against references with a chat-completions model at temperature 0 (lmms-eval's protocols).

    Retries with exponential backoff on timeouts, connection errors, HTTP 429 and 5xx, and on a 200
    whose body is not chat-completions JSON (a ``Retry-After`` header replaces the computed delay);
    other HTTP errors fail at once. Verdicts
    are cached on disk when ``cache`` is given, so an answer is never sent twice.

    Args:
        config: endpoint, model, key and retry policy; default :meth:`JudgeConfig.from_env`.
        cache: a :class:`JudgeCache` or the path of its JSONL file; ``None`` caches nothing.
        session: the ``requests.Session`` to use (one is made otherwise).
        sleep: the function used to wait between attempts (tests may replace it).

    Attributes:
        n_requests: HTTP requests made so far, retries included.
    """

    def __init__(
        self,
        config: JudgeConfig | None = None,
        *,
        cache: JudgeCache | str | os.PathLike[str] | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config if config is not None else JudgeConfig.from_env()
        self.cache = cache if isinstance(cache, JudgeCache) or cache is None else JudgeCache(cache)
        self._session = session if session is not None else requests.Session()
        self._sleep = sleep
        self.n_requests = 0

    def __repr__(self) -> str:
        key = "set" if self.config.api_key is not None else "none"
        return f"GPTJudge(endpoint={self.config.endpoint!r}, model={self.config.model!r}, api_key={key})"

    __str__ = __repr__

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    def __enter__(self) -> GPTJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def judge(self, question: str, answer: str, reference: str,
              protocol: str | JudgeProtocol | None = None, reask_unparsable: bool = False) -> Verdict:
        """Judge ``answer`` against ``reference``, from the cache when judged before.

        Args:
            question: the prompt the video model answered.
            answer: the video model's output.
            reference: the benchmark's reference answer.
            protocol: ``detail``, ``correctness`` or ``score`` (the default)
                (:mod:`~vidspec.evaluation.judge.protocols`).
            reask_unparsable: ask again when the cache holds an unparsable verdict for this question
                (a rerun's default in ``vidspec eval``), instead of returning it.

        Returns:
            A :class:`Verdict`. ``status == "unparsable"`` when the reply could not be read or the body
            is not chat-completions JSON; under ``detail`` and ``correctness`` an unreadable reply
            scores 0 (lmms-eval's rule), under ``score`` it has no score.

        Raises:
            JudgeError: the endpoint failed after all attempts, or refused the request (4xx).
        """
        proto = get_protocol(protocol)
        model = self.config.model
        key = verdict_key(
            prompt_version=proto.version, question=question, answer=answer, reference=reference, model=model
        )
        tags = dict(protocol=proto.name, prompt_version=proto.version)
        record = self.cache.get(key) if self.cache is not None else None
        if record is not None and reask_unparsable and record.get("status") == "unparsable":
            record = None  # asked again; the new verdict replaces the cached one
        if record is not None:
            return Verdict(
                score=record["score"],
                status=record["status"],
                reply=record["reply"],
                model=record["model"],
                key=key,
                cached=True,
                detail=record.get("detail", ""),
                correct=record.get("correct"),
                **tags,
            )
        payload = {
            "model": model,
            "messages": proto.messages(question, answer, reference),
            "temperature": 0,
            "max_tokens": max(self.config.max_tokens, proto.max_tokens),
        }
        response = self._post(payload)
        content = _chat_content(response)
        if content is None:
            # Retried like a 5xx by _post; still broken after the last attempt. Not cached: a broken body
            # says nothing about the answer, a later run may do better.
            body = _scrub(response.text[:_SNIPPET], self.config.api_key)
            log.warning("judge %s: response is not chat-completions JSON: %r", self.config.endpoint, body)
            empty = proto.read("")
            return Verdict(
                score=empty.score,
                status="unparsable",
                reply=body,
                model=model,
                key=key,
                detail="response is not chat-completions JSON",
                correct=empty.correct,
                **tags,
            )
        content = _scrub(content, self.config.api_key)
        reading = proto.read(content)
        if not reading.parsed:
            log.warning("judge %s: no readable verdict in reply %r", self.config.endpoint, content[:_SNIPPET])
            verdict = Verdict(score=reading.score, status="unparsable", reply=content, model=model, key=key,
                              detail=f"no readable {proto.name} verdict in the reply", correct=reading.correct,
                              **tags)
        else:
            verdict = Verdict(score=reading.score, status="ok", reply=content, model=model, key=key,
                              correct=reading.correct, **tags)
        # An unparsable reply is cached too and reported; whether a later run asks again is the caller's
        # choice (reask_unparsable: vidspec eval does, unless --judge-keep-unparsable).
        if self.cache is not None:
            self.cache.put(key, verdict.to_record())
        return verdict

    def _post(self, payload: dict[str, Any]) -> requests.Response:
        cfg = self.config
        headers = {"Content-Type": "application/json"}
        if cfg.api_key is not None:
            headers["Authorization"] = f"Bearer {cfg.api_key.reveal()}"
        status: int | None = None
        problem = ""
        for attempt in range(1, cfg.max_attempts + 1):
            retry_after: float | None = None
            self.n_requests += 1
            try:
                response = self._session.post(cfg.endpoint, json=payload, headers=headers, timeout=cfg.timeout_s)
            except requests.Timeout:
                status, problem = None, f"no response within {cfg.timeout_s:g} s"
            except requests.ConnectionError as e:
                status, problem = None, f"connection failed ({type(e).__name__})"
            except requests.RequestException as e:
                raise JudgeError(
                    f"judge request to {cfg.endpoint} failed: {type(e).__name__}",
                    endpoint=cfg.endpoint,
                    status=None,
                    attempts=attempt,
                ) from None  # the chained exception would carry the request with its header
            else:
                status = response.status_code
                if status == 200:
                    # A body that is not chat-completions JSON (a proxy's error page, a cut connection) is a
                    # fault of the way there, like a 5xx: retried; the last one goes back to judge().
                    if _chat_content(response) is not None or attempt == cfg.max_attempts:
                        return response
                    body = _scrub(response.text[:_SNIPPET], cfg.api_key).strip()
                    problem = "HTTP 200 with a body that is not chat-completions JSON" + (f": {body}" if body else "")
                else:
                    body = _scrub(response.text[:_SNIPPET], cfg.api_key).strip()
                    problem = f"HTTP {status}" + (f": {body}" if body else "")
                if status != 200 and status != 429 and not 500 <= status < 600:
                    raise JudgeError(
                        f"judge endpoint {cfg.endpoint} refused the request with {problem}",
                        endpoint=cfg.endpoint,
                        status=status,
                        attempts=attempt,
                    )
                retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
            if attempt == cfg.max_attempts:
                break
            if retry_after is not None:
                delay = min(retry_after, cfg.max_retry_after_s)
            else:
                delay = min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempt - 1))
            log.warning(
                "judge %s: %s; attempt %d of %d, retrying in %.2f s",
                cfg.endpoint,
                problem,
                attempt,
                cfg.max_attempts,
                delay,
            )
            self._sleep(delay)
        raise JudgeError(
            f"judge endpoint {cfg.endpoint} failed after {cfg.max_attempts} attempt(s): last {problem}",
            endpoint=cfg.endpoint,
            status=status,
            attempts=cfg.max_attempts,
        )
