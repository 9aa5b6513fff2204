"""benchmarks/sparrow_rejections.py: the tally of rejections by word class, and a CPU smoke run."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_labels_come_from_the_synthvid_tokenizer():
    """The word labels are SynthVid's own token_labels on the target's tokenizer."""
    from sparrow_rejections import label_of

    from vidspec.decoding.models import load_target

    target = load_target("data/releases/synthvid-target")
    label = label_of(target)
    tok = target.tokenizer
    word = {w: tok.encode(" " + w, add_special_tokens=False)[0] for w in ("red", "circle", "left", "medium", "the")}
    assert [label(word[w]) for w in ("red", "circle", "left", "medium", "the")] == [
        "colour", "shape", "motion", "size", "filler"]
    assert label(min(target.eos_token_ids)) == "special"


def test_tally_counts_the_first_mismatch_of_each_round():
    from sparrow_rejections import tally

    classes = {1: "filler", 2: "colour", 3: "shape", 4: "filler"}  # token id -> label
    # Round 1: all four drafts accepted. Round 2: two accepted, then the target said 2 (a colour).
    # Round 3: nothing accepted, the target said 3 (a shape).
    rounds = [((1, 1, 4, 4), 4, 1), ((4, 1, 3, 3), 2, 2), ((2, 2, 2, 2), 0, 3)]
    emitted = [1, 1, 4, 4, 1, 4, 1, 2, 3]
    r = tally(rounds, emitted, classes.__getitem__)
    assert r["rounds"] == 3 and r["rejections"] == 2 and r["emitted"] == 9
    c = r["by_class"]
    assert c["colour"]["rejections"] == 1 and c["shape"]["rejections"] == 1 and c["filler"]["rejections"] == 0
    assert c["colour"]["share_of_rejections"] == 0.5 and c["colour"]["share_of_tokens"] == 1 / 9
    assert c["filler"]["checked"] == 6 and c["filler"]["rejection_rate"] == 0.0  # 4 + 2 accepted fillers
    assert c["shape"]["rejection_rate"] == 1.0
    p = r["by_position"]
    assert p["1"] == {"checked": 3, "accepted": 2, "acceptance": 2 / 3}
    assert p["3"] == {"checked": 2, "accepted": 1, "acceptance": 0.5}
    assert "4" in p and p["4"]["acceptance"] == 1.0


def test_benchmark_smoke(testbed_benchmark):
    """Two fresh SynthVid captions with the committed releases: the JSON is written and its counts add up."""
    doc, out, stdout = testbed_benchmark("sparrow_rejections.py", "sparrow_rejections.json",
        "--max-new-tokens", "24", seed=5)
    assert doc["captions"] == 2 and doc["machine"]["cpu_count"] >= 1
    assert doc["rejections"] == sum(v["rejections"] for v in doc["by_class"].values())
    assert abs(sum(v["share_of_tokens"] for v in doc["by_class"].values()) - 1.0) < 1e-9
    assert doc["tau"] >= 1.0
