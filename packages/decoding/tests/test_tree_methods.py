"""Tree methods (tree-sd, tree-sparrow) through ``build_decoder`` and ``vidspec generate``: lossless, checked early."""

from __future__ import annotations

import inspect
import json

import pytest

from vidspec.decoding import methods as methods_mod
from vidspec.decoding.cli import main
from vidspec.decoding.config import DEFAULT_TREE
from vidspec.decoding.drafters.sparrow import target_fingerprint
from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fast import FastTarget, TreeModelDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
from vidspec.decoding.methods import METHODS, build_decoder, method_names
from vidspec.decoding.types import Request

TREE_METHODS = method_names(loop="tree")
FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
ENGINES = ["eager", "fast"]
SHAPE = {"total_tokens": 10, "depth": 3, "top_k": 3}  # small trees: seconds on CPU
FAST = {"max_len": 512}




@pytest.fixture(scope="module")
def ar_ids(tiny, clip):
    cache: dict = {}

    def get(name: str, prompt: str, n: int):
        if (name, prompt, n) not in cache:
            cache[name, prompt, n] = SpeculativeDecoder(tiny(name)).generate(Request(prompt, clip), n).token_ids
        return cache[name, prompt, n]

    return get


def test_tree_methods_are_registered_and_lossless():
    assert TREE_METHODS == ("tree-sd", "tree-sparrow")
    assert all(METHODS[m].lossless and METHODS[m].greedy_only and METHODS[m].default_k is None for m in TREE_METHODS)
    assert DEFAULT_TREE.as_dict() == {"total_tokens": 48, "depth": 8, "top_k": 8}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", FAMILIES)
def test_tree_sparrow_is_token_identical_to_ar(tiny, clip, drafts, ar_ids, name, engine):
    target = tiny(name)
    dec = build_decoder("tree-sparrow", target=target, draft=drafts(name), engine=engine, fast_options=FAST,
                        tree=SHAPE)
    assert isinstance(dec, TreeSpeculativeDecoder) and isinstance(dec.drafter, TreeSparrowDrafter)
    assert (dec.total_tokens, dec.depth, dec.top_k, dec.method) == (10, 3, 3, "tree-sparrow")
    assert isinstance(dec.target, FastTarget) == (engine == "fast")
    res = dec.generate(Request("Describe the video.", clip), max_new_tokens=24)
    assert res.token_ids == ar_ids(name, "Describe the video.", 24)
    assert res.tau > 1.0 and all(s.drafted <= 10 and s.accepted <= 3 for s in res.steps)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", FAMILIES)
def test_tree_sd_is_token_identical_to_ar(tiny, clip, perturbed, ar_ids, name, engine):
    target = tiny(name)
    dec = build_decoder("tree-sd", target=target, draft=perturbed(name), engine=engine, fast_options=FAST,
                        tree=SHAPE)
    assert isinstance(dec, TreeSpeculativeDecoder) and isinstance(dec.drafter, TreeModelDrafter)
    assert dec.drafter.model.adapter is perturbed(name)
    res = dec.generate(Request("What happens in this video?", clip), max_new_tokens=24)
    assert res.token_ids == ar_ids(name, "What happens in this video?", 24)
    assert res.tau > 1.0


def test_defaults_k_ignored_and_stream(tiny, clip, drafts, ar_ids):
    """Without ``tree`` the default shape is used, ``k`` is ignored (as for ar), and streaming gives the same text."""
    name = "tiny-llava-ov"
    target = tiny(name)
    dec = build_decoder("tree-sparrow", target=target, draft=drafts(name), k=2)
    assert (dec.total_tokens, dec.depth, dec.top_k) == (48, 8, 8) and dec.k == 8
    req = Request("Describe the video.", clip)
    res = dec.generate(req, max_new_tokens=16, top_p=0.5, seed=1)  # top_p and seed: no effect under greedy
    assert res.token_ids == ar_ids(name, "Describe the video.", 16)
    assert res.timings.begin_s > 0
    assert "".join(dec.stream(req, max_new_tokens=16)) == res.text
    # the built-in tiny draft is tree-sd's default draft VLM
    assert build_decoder("tree-sd", target=target, tree=SHAPE).drafter.model.name == "tiny-llava-ov-draft"


@pytest.mark.parametrize("method", TREE_METHODS)
def test_temperature_is_refused_before_models_load(monkeypatch, method):
    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(methods_mod, "load_target", boom)
    with pytest.raises(ConfigError, match="greedy"):
        build_decoder(method, target="tiny-qwen2.5-vl", draft="somewhere", temperature=0.7)


@pytest.mark.parametrize("tree, needle", [
    ({"total_tokens": 0}, "--tree-total"),
    ({"depth": 0}, "--tree-depth"),
    ({"top_k": -2}, "--tree-top-k"),
    ({"depth": 2.5}, "--tree-depth"),
    ({"width": 4}, "width"),
])
def test_bad_tree_options_are_refused(monkeypatch, tree, needle):
    monkeypatch.setattr(methods_mod, "load_target", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match=needle):
        build_decoder("tree-sparrow", target="tiny-qwen2.5-vl", draft="somewhere", tree=tree)


def test_tree_sparrow_needs_a_draft_and_tree_sd_no_draft_vocab(tiny, perturbed):
    target = tiny("tiny-qwen2.5-vl")
    with pytest.raises(ConfigError, match="--sparrow"):
        build_decoder("tree-sparrow", target=target)
    with pytest.raises(ConfigError, match="draft-vocab"):
        build_decoder("tree-sd", target=target, draft=perturbed("tiny-qwen2.5-vl"), draft_vocab=8)


def test_fast_max_tree_holds_the_verify_tree(tiny, drafts):
    name = "tiny-qwen2.5-vl"
    target, draft = tiny(name), drafts(name)
    # wrapped by build_decoder: max_tree is raised to hold total_tokens + 1 nodes
    dec = build_decoder("tree-sparrow", target=target, draft=draft, engine="fast", fast_options=FAST,
                        tree={"total_tokens": 80})
    assert dec.target.lm.max_tree == 81
    from vidspec.decoding.fast.target import DEFAULT_MAX_TREE

    assert inspect.signature(FastTarget).parameters["max_tree"].default == DEFAULT_MAX_TREE
    assert build_decoder("tree-sparrow", target=target, draft=draft, engine="fast",
                         fast_options=FAST).target.lm.max_tree == 64  # the default shape fits FastTarget's default
    # too small, given explicitly or as a FastTarget: refused, naming the option
    with pytest.raises(ConfigError, match="max_tree"):
        build_decoder("tree-sparrow", target=target, draft=draft, engine="fast",
                      fast_options={**FAST, "max_tree": 16}, tree={"total_tokens": 20})
    with pytest.raises(ConfigError, match="max_tree"):
        build_decoder("tree-sparrow", target=FastTarget(target, max_len=512, max_tree=16), draft=draft,
                      tree={"total_tokens": 20})


# ---- vidspec generate ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    from vidspec.decoding.fixtures import make_moving_square_frames, write_test_video

    path = tmp_path_factory.mktemp("video") / "v.mp4"
    write_test_video(path, make_moving_square_frames(8, 56, 84), fps=4)
    return str(path)


@pytest.fixture(scope="module")
def release(tiny, drafts, tmp_path_factory):
    """The aligned tiny-qwen2.5-vl Sparrow draft as a release, with a draft vocabulary of every other id."""
    target = tiny("tiny-qwen2.5-vl")
    out = drafts("tiny-qwen2.5-vl").save_pretrained(tmp_path_factory.mktemp("rel") / "sparrow",
                                                     manifest={"target_fingerprint": target_fingerprint(target)})
    (out / "draft_vocab.json").write_text(json.dumps({"token_ids": list(range(0, 512, 2))}))
    return str(out)


def _generate(capfd, *args):
    code = main(["generate", "--target", "tiny-qwen2.5-vl", *args])
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize("extra", [[], ["--draft-vocab", "256"], ["--engine", "fast", "--fast-max-len", "1024"]],
                         ids=["eager", "draft-vocab", "fast"])
def test_cli_tree_sparrow(capfd, video, release, extra):
    code, out, err = _generate(capfd, "--method", "ar", "--video", video, "--max-new-tokens", "20", "--json")
    assert code == 0, err
    ar = json.loads(out.strip().splitlines()[-1])
    code, out, err = _generate(capfd, "--method", "tree-sparrow", "--sparrow", release, "--video", video,
                               "--max-new-tokens", "20", "--tree-total", "12", "--tree_depth", "4",
                               "--tree-top-k", "3", "--json", *extra)
    assert code == 0, err
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["method"] == "tree-sparrow" and rec["tau"] > 1.0
    assert rec["tree"] == {"total_tokens": 12, "depth": 4, "top_k": 3} and rec["k"] == 4
    assert len(rec["acceptance_by_position"]) <= 4
    assert rec["token_ids"] == ar["token_ids"]


def test_cli_tree_sd_streams(capfd, video):
    code, out, err = _generate(capfd, "--method", "tree-sd", "--video", video, "--max-new-tokens", "8",
                               "--tree-total", "6", "--tree-depth", "2", "--tree-top-k", "3")
    assert code == 0, err
    assert out.strip() and "[tree-sd]" in err


@pytest.mark.parametrize("args, needle", [
    (["--method", "tree-sparrow", "--tree-total", "0"], "--tree-total"),
    (["--method", "tree-sd", "--tree-depth", "0"], "--tree-depth"),
    (["--method", "tree-sd", "--tree-top-k", "0"], "--tree-top-k"),
    (["--method", "tree-sd", "--temperature", "0.5"], "greedy"),
    (["--method", "tree-sparrow"], "--sparrow"),
    (["--method", "tree-sd", "--draft-vocab", "8"], "draft-vocab"),
])
def test_cli_bad_tree_options_are_one_line(capfd, video, args, needle):
    code, out, err = _generate(capfd, "--video", video, "--max-new-tokens", "4", *args)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert out == ""
