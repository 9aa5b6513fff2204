"""engine auto: fast on CUDA, eager elsewhere, eager with one line where fast cannot serve."""

from __future__ import annotations

import logging

import pytest

from vidspec.decoding import methods
from vidspec.decoding.config import DecodeConfig
from vidspec.decoding.errors import ConfigError


def test_default_is_auto_and_resolves_by_device():
    cfg = DecodeConfig()
    assert cfg.engine == "auto"
    assert cfg.resolve("cpu") == (cfg.replace(engine="eager"), None)
    assert cfg.resolve("cuda:1") == (cfg.replace(engine="fast"), None)
    assert DecodeConfig(engine="eager").resolve("cuda")[0].engine == "eager"
    assert DecodeConfig(engine="fast").resolve("cpu")[0].engine == "fast"


def test_attention_scorer_falls_back_to_eager_with_a_reason():
    cfg = DecodeConfig(scorer="attention")
    resolved, why = cfg.resolve("cuda", relevance=True)
    assert resolved.engine == "eager" and "attention" in why
    assert cfg.resolve("cuda", relevance=False)[0].engine == "fast"  # e.g. sd: it does not read relevance
    assert cfg.resolve("cuda", "lvspec")[0].engine == "eager"  # the name of a relevance method reads as true


def test_check_device_follows_the_resolution():
    DecodeConfig(fast_gemv="decode").check_device("cuda")
    with pytest.raises(ConfigError):
        DecodeConfig(fast_gemv="decode").check_device("cpu")


def test_build_decoder_on_cpu_runs_eager():
    dec = methods.build_decoder("ar", target="tiny-qwen2.5-vl")
    assert dec.engine == "eager" and not methods.is_fast(dec.target)


def test_fast_failure_falls_back_with_one_line(monkeypatch, caplog):
    monkeypatch.setattr(DecodeConfig, "resolve", lambda self, device, relevance=None: (self.replace(engine="fast"), None))

    def refuse(model, options=None):
        raise NotImplementedError("fast path supports full attention only (no sliding-window layers)")

    monkeypatch.setattr(methods, "as_fast", refuse)
    with caplog.at_level(logging.WARNING, logger="vidspec.decoding.methods"):
        dec = methods.build_decoder("ar", target="tiny-qwen2.5-vl")
    assert dec.engine == "eager"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "sliding-window" in lines[0] and "\n" not in lines[0]


def test_explicit_fast_does_not_fall_back(monkeypatch):
    def refuse(model, options=None):
        raise NotImplementedError("no")

    monkeypatch.setattr(methods, "as_fast", refuse)
    with pytest.raises(NotImplementedError):
        methods.build_decoder("ar", target="tiny-qwen2.5-vl", engine="fast")
