"""The method registry and the typed decode configuration: one source for names, subsets and options."""

from __future__ import annotations

import re

import pytest

from vidspec.decoding import methods as methods_mod
from vidspec.decoding.config import DEFAULT_TREE, DecodeConfig, TreeShape
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import METHODS, MethodSpec, get_method, method_names, methods_table


def test_registry_names_and_derived_subsets():
    assert tuple(METHODS) == ("ar", "sd", "lvspec", "lvspec-pst", "fly", "sparrow", "sparrow-lvspec-pst", "tree-sd",
                              "tree-sparrow")
    assert all(isinstance(s, MethodSpec) and s.name == n for n, s in METHODS.items())
    assert method_names(lossless=True) == ("ar", "sd", "sparrow", "tree-sd", "tree-sparrow")
    assert method_names(drafter="sparrow") == ("sparrow", "sparrow-lvspec-pst", "tree-sparrow")
    assert method_names(drafter="vlm") == ("sd", "lvspec", "lvspec-pst", "fly", "tree-sd")
    assert method_names(loop="tree") == ("tree-sd", "tree-sparrow")
    assert method_names(relevance=True) == ("lvspec", "lvspec-pst", "sparrow-lvspec-pst")
    assert [get_method(m).draft_flag for m in ("ar", "sd", "sparrow")] == [None, "--draft", "--sparrow"]
    with pytest.raises(ConfigError, match="unknown method 'warp'"):
        get_method("warp")
    with pytest.raises(TypeError):
        METHODS["new"] = METHODS["sd"]  # type: ignore[index]  # read-only


def test_the_module_docstring_table_follows_the_registry():
    """Each registry row appears in methods.py's docstring table (method, loop and default K)."""
    doc = methods_mod.__doc__ or ""
    for spec in METHODS.values():
        k = "-" if spec.default_k is None else str(spec.default_k)
        assert re.search(rf"^{re.escape(spec.name)}\s+.*\s{spec.loop}\s+{re.escape(k)}\s*$", doc, re.M), spec.name
    assert len(methods_table().splitlines()) == 2 + len(METHODS)


def test_decode_config_validates_on_construction(tmp_path):
    cfg = DecodeConfig()
    assert cfg.tree == DEFAULT_TREE and cfg.fast_options() is None and cfg.loose_options()["lam"] == 1.0
    fast = DecodeConfig(engine="fast", fast_gemv="all", fast_compile=False, fast_max_len=512)
    assert fast.fast_options() == {"max_len": 512, "gemv": "all", "compile": False}
    for bad, needle in (({"k": 0}, "--k"), ({"engine": "turbo"}, "unknown engine"), ({"fast_gemv": "x"}, "fast-gemv"),
                        ({"tree_depth": 0}, "--tree-depth"), ({"lam": 2.0}, "lam"), ({"scorer": "entropy"}, "--scorer"),
                        ({"scorer": "probe"}, "--probe"), ({"probe": str(tmp_path / "p")}, "--scorer probe"),
                        ({"predicate": "maybe"}, "predicate"), ({"fast_max_len": 0}, "--fast-max-len")):
        with pytest.raises(ConfigError, match=needle):
            DecodeConfig(**bad)
    with pytest.raises(ConfigError, match="CUDA"):
        DecodeConfig(engine="fast", fast_gemv="decode").check_device("cpu")
    with pytest.raises(ConfigError, match="unknown tree option"):
        TreeShape.from_dict({"width": 3})
    decode, rest = DecodeConfig.split({"lam": 0.5, "method": "sd"})
    assert decode.lam == 0.5 and rest == {"method": "sd"}


def test_build_decoder_takes_config_fields_as_overrides(tiny):
    target = tiny("tiny-qwen2.5-vl")
    dec = methods_mod.build_decoder("sd", target=target, config=DecodeConfig(k=2), k=3)
    assert dec.k == 3
    assert methods_mod.build_decoder("fly", target=target).k == 15  # the method's default K
    with pytest.raises(ConfigError, match="unknown option"):
        methods_mod.build_decoder("sd", target=target, lamda=0.5)
