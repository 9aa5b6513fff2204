"""On-disk cache of judge verdicts, so that no answer is judged twice.

One JSON object per line (JSONL), appended and flushed as each verdict arrives: a run that is
killed loses at most the line being written, and a truncated last line is skipped on reload.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def verdict_key(*, prompt_version: str, question: str, answer: str, reference: str, model: str) -> str:
    """The cache key of one judgement: a SHA-256 over everything that determines the verdict.

    The prompt version stands for the judge prompt's text, so editing the prompt invalidates old
    verdicts instead of silently reusing them.
    """
    payload = json.dumps(
        {"prompt": prompt_version, "question": question, "answer": answer, "reference": reference, "model": model},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class JudgeCache:
    """A JSONL file mapping :func:`verdict_key` to a verdict record (a JSON object).

    Thread-safe within one process. Two processes appending to the same file is not supported.

    Args:
        path: the JSONL file; created (with its folder) on the first write.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        bad = 0
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    self._records[record["key"]] = record
                except (json.JSONDecodeError, KeyError, TypeError):
                    bad += 1  # a line cut short by a killed run; it is judged again
        if bad:
            log.warning("judge cache %s: skipped %d unreadable line(s)", self.path, bad)

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under ``key``, or ``None``."""
        with self._lock:
            return self._records.get(key)

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store ``record`` under ``key`` and append it to the file at once."""
        record = {"key": key, **record}
        line = json.dumps(record, ensure_ascii=False, sort_keys=True)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
            self._records[key] = record

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._records

    def __repr__(self) -> str:
        return f"JudgeCache({str(self.path)!r}, {len(self)} verdicts)"
