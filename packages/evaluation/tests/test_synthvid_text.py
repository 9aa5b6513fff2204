"""SynthVid text: caption grammar and styles, tokenizer, token labels, questions, MCQ scoring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid.grammar import (
    STYLES,
    VISUAL_LABELS,
    CaptionStyle,
    greedy_caption,
    parse_style_mixture,
    sample_caption,
)
from vidspec.evaluation.synthvid.mcq import MCQAccuracy, extract_choice, mcq_accuracy
from vidspec.evaluation.synthvid.questions import LETTERS, make_mcqs, make_open_questions, mcq_prompt
from vidspec.evaluation.synthvid.tokenizer import (
    SPECIAL_TOKENS,
    build_tokenizer,
    load_tokenizer,
    token_labels,
    visual_mask,
)
from vidspec.evaluation.synthvid.world import PRESETS, sample_scene


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer().save_pretrained(str(path))
    return load_tokenizer(path)  # the saved form is what datasets ship


def _facts(n, seed=0):
    rng = np.random.default_rng(seed)
    names = ["default", "hard", "long", "easy"]
    return [sample_scene(rng, PRESETS[names[i % 4]]).facts() for i in range(n)]


def test_special_tokens(tok):
    vocab = tok.get_vocab()
    for t in SPECIAL_TOKENS:
        assert t in vocab
        assert tok.convert_tokens_to_ids(t) in tok.all_special_ids
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    text = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe the video in detail.<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    for w in ("system", "user", "assistant", "\n"):
        assert len(tok(w)["input_ids"]) == 1
    assert 300 <= len(tok) <= 2000


def test_unknown_text_round_trips(tok):
    for text in ["Zebras  jump über 12 fences (B)!", "naïve 日本 \t tab", ""]:
        assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.unk_token_id not in tok("Zebras über 日本")["input_ids"]


def test_captions_tokenize_one_token_per_piece_with_exact_labels(tok):
    rng = np.random.default_rng(1)
    for facts in _facts(60):
        for style in STYLES:
            cap = sample_caption(facts, rng, style)
            assert "".join(cap.pieces) == cap.text
            ids = tok(cap.text)["input_ids"]
            assert tok.decode(ids) == cap.text
            assert tok.convert_ids_to_tokens(ids) == list(cap.pieces)
            assert token_labels(ids, tok) == list(cap.labels)
    assert visual_mask(tok("A red circle moves left.")["input_ids"], tok) == [False, True, True, False, True, False]


def test_labels_cover_all_visual_facts():
    facts = _facts(1, seed=4)[0]
    cap = greedy_caption(facts, "verbose")
    visual = {p.strip().lower() for p, lab in zip(cap.pieces, cap.labels) if lab != "filler"}
    for o in facts["objects"]:
        assert {o["colour"], o["shape"]} <= visual
    assert set(cap.labels) <= set(VISUAL_LABELS) | {"filler"}


def test_questions_tokenize_and_round_trip(tok):
    rng = np.random.default_rng(2)
    for facts in _facts(30):
        for q in make_mcqs(facts, rng, 6):
            text = mcq_prompt(q["question"], q["options"])
            assert tok.decode(tok(text)["input_ids"]) == text
            assert len(q["options"]) == 4 and len(set(q["options"])) == 4
            assert [o[:3] for o in q["options"]] == [f"{L}. " for L in LETTERS]
            assert q["answer"] in LETTERS
        for q in make_open_questions(facts, rng, 6):
            assert tok.decode(tok(q["answer"])["input_ids"]) == q["answer"]


def test_mcq_answers_are_correct():
    rng = np.random.default_rng(5)
    for facts in _facts(40):
        for q in make_mcqs(facts, rng, 6):
            right = q["options"]["ABCD".index(q["answer"])][3:].rstrip(".").lower()
            if q["task_type"] == "count":
                assert right == ["zero", "one", "two", "three", "four", "five"][facts["count"]]
            elif q["task_type"] == "order":
                first = facts["events"][0]
                o = facts["objects"][first["objects"][0]]
                assert right.startswith(f"the {o['colour']} {o['shape']}")


def test_styles_are_deterministic_and_differ():
    facts = _facts(20, seed=9)
    for f in facts:
        assert greedy_caption(f, "alpha").text == greedy_caption(f, "alpha").text
        a = sample_caption(f, np.random.default_rng(0), "beta").text
        assert a == sample_caption(f, np.random.default_rng(0), "beta").text
    differ = sum(greedy_caption(f, "alpha").text != greedy_caption(f, "beta").text for f in facts)
    assert differ >= 18


def test_style_mixture_parsing():
    mix = parse_style_mixture("alpha:3, beta:1")
    assert [s.name for s, _ in mix] == ["alpha", "beta"] and mix[0][1] == pytest.approx(0.75)
    for bad in ("nope", "alpha:-1", "alpha:x", ""):
        with pytest.raises(ConfigError):
            parse_style_mixture(bad)
    with pytest.raises(ConfigError):
        CaptionStyle("x", sharpness=2.0)


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("The answer is (B).", "B"),
        ("B", "B"),
        ("b) red", "B"),
        ("Answer: C", "C"),
        ("answer: c", "C"),
        ("(D) It rotates.", "D"),
        ("D. Grows.", "D"),
        ("I think it is option A", "A"),
        ("The correct answer is C.", "C"),
        ("[A]", "A"),
        ("a", "A"),
        ("A red circle moves left.", None),
        ("I don't know.", None),
        ("", None),
        (None, None),
        ("E", None),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_extract_choice_by_option_text():
    assert extract_choice("Red", options=["A. Blue.", "B. Red."]) == "B"


def test_mcq_accuracy_torchmetrics():
    m = MCQAccuracy()
    m.update(["The answer is (B).", "c", "nonsense"], ["B", "D", "A"])
    m.update(["A"], ["A"])
    assert float(m.compute()) == pytest.approx(0.5)
    m.reset()
    m.update(["A"], ["A"])
    assert isinstance(m.compute(), torch.Tensor) and float(m.compute()) == 1.0
    assert mcq_accuracy([], []) == 0.0
