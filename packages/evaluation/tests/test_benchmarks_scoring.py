"""Per-benchmark MCQ readings (lmms-eval's protocols) and, under lmms-eval, agreement with its own functions."""

from __future__ import annotations

import pytest

from vidspec.evaluation.benchmarks import scoring
from vidspec.evaluation.benchmarks.scoring import (
    extract_letter,
    longvideobench_choice,
    mvbench_choice,
    score_mcq,
)

#: Replies as small and large models write them.
REPLIES = [
    "B", "B.", "(B)", "B. Two cars.", "The answer is C.", "The best answer is (D)", "A dog runs. Answer: C",
    "I think it is B because the car is red.", "Option D", "d", "", "None of them", "C) three", "B: yes",
    "The correct answer is A, not B.", "A", "answer is D", "Because of the crowd, A.", "E", "(a) blue",
    "The answer\nB", "Best option: E", "It shows a cat.", "BA", "C.\n", "'C'",
]


def test_videomme_reading():
    assert extract_letter("B") == "B"
    assert extract_letter("(C) the red car") == "C"
    assert extract_letter("The answer is D.") == "D"
    assert extract_letter("It must be C.") == "C"
    assert extract_letter("no letter here") == ""
    assert extract_letter("") == ""


def test_mvbench_reading():
    assert mvbench_choice("B. a cat") == "B"
    assert mvbench_choice("(c) the box") == "C"  # any case counts
    assert mvbench_choice("no option") == "no option"


def test_longvideobench_reading_is_seeded():
    assert longvideobench_choice("The best answer is D", "ABCDE", "x") == "D"
    drawn = {longvideobench_choice("no idea", "ABCDE", f"id{i}") for i in range(40)}
    assert drawn <= set("ABCDE") and len(drawn) > 1
    assert longvideobench_choice("no idea", "ABCDE", "id1") == longvideobench_choice("no idea", "ABCDE", "id1")


def test_score_mcq_names_its_scorer():
    out = score_mcq("videomme", "The answer is B", "B", 4)
    assert out["correct"] is True and out["score"] == 1.0 and out["scorer"].endswith("videomme")
    assert score_mcq("mvbench", "A. x", "B", 3)["correct"] is False
    assert score_mcq(None, "B", "B", 4)["scorer"] == "vidspec general"
    with pytest.raises(ValueError, match="unknown scoring protocol"):
        score_mcq("nope", "B", "B", 4)


def test_readings_agree_with_lmms_eval():
    """Under lmms-eval (make test-lmms), vidspec's readings give lmms-eval's answers on typical replies."""
    pytest.importorskip("lmms_eval", reason="lmms-eval is installed in its own environment (make install-lmms)")
    from lmms_eval.tasks._task_utils.mcq_extract import extract_mcq_answer
    from lmms_eval.tasks.longvideobench.utils import parse_multi_choice_response
    from lmms_eval.tasks.mvbench.utils import mcq_acc

    for reply in REPLIES:
        assert extract_letter(reply, "ABCD") == extract_mcq_answer(reply, choices=list("ABCD")), reply
        for gt in "ABCDE":
            assert (mvbench_choice(reply) == gt) == bool(mcq_acc(gt, reply)), (reply, gt)
        ours = longvideobench_choice(reply, "ABCDE", "k")
        if any(c in reply.replace("The best answer is", "") for c in "ABCDE"):
            assert ours == parse_multi_choice_response(reply, list("ABCDE"), {}), reply
    assert scoring.scorer_name("videomme").startswith("lmms-eval ")
