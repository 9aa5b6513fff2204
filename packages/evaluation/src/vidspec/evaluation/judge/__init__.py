"""The GPT judge: open-ended answers judged against references, over an OpenAI-compatible API.

See :mod:`vidspec.evaluation.judge.client` for usage, :mod:`vidspec.evaluation.judge.protocols` for what
is asked (lmms-eval's detail-orientation and correctness judgements, in our words) and
:mod:`vidspec.evaluation.judge.prompt` for vidspec's earlier 0-5 prompt (pinned by a golden file).
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
from vidspec.evaluation.judge.protocols import (
    CORRECTNESS,
    DEFAULT_PROTOCOL,
    DETAIL,
    PROTOCOLS,
    JudgeProtocol,
    Reading,
    get_protocol,
)

__all__ = [
    "CORRECTNESS",
    "DEFAULT_PROTOCOL",
    "DETAIL",
    "PROTOCOLS",
    "JudgeProtocol",
    "Reading",
    "get_protocol",
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
