"""A localhost OpenAI-compatible chat-completions server for tests, with fault injection.

It answers ``POST /v1/chat/completions`` with a real model (any object with
``complete(messages, max_tokens) -> str``, e.g. :class:`~vidspec.evaluation.testing.smollm2.SmolLM2Chat`)
and can be told to misbehave for the next requests::

    with ChatCompletionsServer(SmolLM2Chat()) as server:
        server.inject("500", times=2)          # the next two requests get HTTP 500
        judge = GPTJudge(JudgeConfig(base_url=server.base_url, model="smollm2"))
        judge.judge(...)                       # recovers on the third request
        server.request_count                   # 3

Fault modes (:data:`FaultMode`):

- ``timeout``: stall ``sleep_s`` seconds (beyond the client's timeout), then answer 504.
- ``500``: HTTP 500 with an OpenAI-style error body.
- ``429``: HTTP 429 with ``Retry-After: <retry_after>``.
- ``garbage``: HTTP 200 with a body that is not JSON.
- ``unparsable``: a valid completion whose content is ``"I cannot rate this"``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

FaultMode = Literal["timeout", "500", "429", "garbage", "unparsable"]
FAULT_MODES: tuple[str, ...] = ("timeout", "500", "429", "garbage", "unparsable")
UNPARSABLE_REPLY = "I cannot rate this"


class ChatModel(Protocol):
    """Anything that can answer chat messages."""

    name: str

    def complete(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        """The assistant's reply to ``messages``, at most ``max_tokens`` tokens."""
        ...


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour.

    Attributes:
        mode: what to do instead of (or before) answering.
        retry_after: the ``Retry-After`` header value sent with a 429.
        sleep_s: for ``timeout``, how long to stall before answering.
    """

    mode: FaultMode
    retry_after: str = "1"
    sleep_s: float = 2.0


@dataclass(frozen=True)
class RecordedRequest:
    """What the server saw of one request (for assertions in tests).

    Attributes:
        path: the request path.
        body: the parsed JSON body, or ``None`` when it was not JSON.
        authorization: the ``Authorization`` header, or ``None``.
        fault: the fault injected into the answer, or ``None``.
    """

    path: str
    body: dict[str, Any] | None
    authorization: str | None
    fault: str | None


class ChatCompletionsServer:
    """An HTTP server on 127.0.0.1 (a free port) speaking OpenAI chat completions.

    Args:
        model: answers the requests that no fault intercepts.
        max_tokens_cap: replies are at most this many tokens, whatever the client asks, so that
            tests stay fast on a CPU.
        host: the interface to bind (keep it on loopback).
    """

    def __init__(self, model: ChatModel, *, max_tokens_cap: int = 16, host: str = "127.0.0.1") -> None:
        self.model = model
        self.max_tokens_cap = max_tokens_cap
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._httpd = ThreadingHTTPServer((host, 0), _make_handler(self))
        # A handler stalled by a "timeout" fault must not keep the test process alive.
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The API root to give a client, e.g. ``http://127.0.0.1:12345/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ChatCompletionsServer:
        """Serve on a background thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name="chat-server", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ChatCompletionsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- fault injection and bookkeeping -----------------------------------------------------
    def inject(self, mode: FaultMode, times: int = 1, *, retry_after: str = "1", sleep_s: float = 2.0) -> None:
        """Make the next ``times`` requests misbehave in ``mode`` (queued after earlier faults)."""
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r}; expected one of {FAULT_MODES}")
        with self._lock:
            self._faults.extend(Fault(mode, retry_after, sleep_s) for _ in range(times))

    def reset(self) -> None:
        """Forget queued faults and recorded requests."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()

    @property
    def request_count(self) -> int:
        """Requests received so far (all paths, faults included)."""
        with self._lock:
            return len(self.requests)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _make_handler(server: ChatCompletionsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass  # keep test output clean

        def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout fault); nothing to do

        def _json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json", headers)

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            fault = server._next_fault()
            server._record(
                RecordedRequest(
                    path=self.path,
                    body=body if isinstance(body, dict) else None,
                    authorization=self.headers.get("Authorization"),
                    fault=fault.mode if fault else None,
                )
            )
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._json(404, _error(f"no route {self.path}", "invalid_request_error"))
                return
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                self._json(400, _error("body must be a JSON object with 'messages'", "invalid_request_error"))
                return
            model_name = str(body.get("model") or server.model.name)
            if fault is not None:
                if fault.mode == "500":
                    self._json(500, _error("injected internal error", "server_error"))
                    return
                if fault.mode == "429":
                    self._json(429, _error("injected rate limit", "rate_limit_error"), {"Retry-After": fault.retry_after})
                    return
                if fault.mode == "garbage":
                    self._send(200, b"<html>upstream proxy error: this is not JSON", "text/html")
                    return
                if fault.mode == "unparsable":
                    self._json(200, _completion(model_name, UNPARSABLE_REPLY))
                    return
                if fault.mode == "timeout":
                    # Stall past the client's timeout, then give up without running the model:
                    # the client has gone, and the model's time belongs to its retry.
                    time.sleep(fault.sleep_s)
                    self._json(504, _error("injected stall", "timeout"))
                    return
            requested = body.get("max_tokens") or server.max_tokens_cap
            max_tokens = max(1, min(int(requested), server.max_tokens_cap))
            try:
                content = server.model.complete(body["messages"], max_tokens=max_tokens)
            except Exception as e:  # a server must answer, even when its model fails
                self._json(500, _error(f"model failed: {type(e).__name__}: {e}", "server_error"))
                return
            self._json(200, _completion(model_name, content))

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            server._record(RecordedRequest(path=self.path, body=None, authorization=None, fault=None))
            if self.path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": server.model.name, "object": "model"}]})
            else:
                self._json(404, _error(f"no route {self.path}", "invalid_request_error"))

    return Handler
