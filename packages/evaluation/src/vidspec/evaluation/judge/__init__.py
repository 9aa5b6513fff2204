"""The GPT judge: 0-5 scores of open-ended answers against references, over an OpenAI-compatible API.

See :mod:`vidspec.evaluation.judge.client` for usage and :mod:`vidspec.evaluation.judge.prompt` for
the prompt (pinned by a golden file).
"""

from vidspec.evaluation.judge.cache import JudgeCache, verdict_key
from vidspec.evaluation.judge.client import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    GPTJudge,
    JudgeConfig,
    JudgeError,
    Secret,
    Verdict,
)
from vidspec.evaluation.judge.prompt import PROMPT_VERSION, build_messages, parse_score, render_messages

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "PROMPT_VERSION",
    "GPTJudge",
    "JudgeCache",
    "JudgeConfig",
    "JudgeError",
    "Secret",
    "Verdict",
    "build_messages",
    "parse_score",
    "render_messages",
    "verdict_key",
]
