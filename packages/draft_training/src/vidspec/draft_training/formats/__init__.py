"""Release layouts for other tools: :mod:`.speculators` (EAGLE-3, as vLLM and SGLang load it)."""
