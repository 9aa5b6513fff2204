"""benchmarks/long_tau.py: issue 9's long-video τ bar from two eval runs, split by the target's spelling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from long_tau import analyse, spelt_right, vocabulary_words  # noqa: E402


def _recs(taus: dict[str, float], texts: dict[str, str]) -> list[dict]:
    out = []
    for sid, tau in taus.items():
        out.append({"sample_id": sid, "method": "ar", "text": texts[sid], "tau": 1.0, "num_new_tokens": 18,
                    "target_passes": 18})
        out.append({"sample_id": sid, "method": "sparrow", "text": texts[sid], "tau": tau, "num_new_tokens": 18,
                    "target_passes": round(18 / tau)})
    return out


def test_split_blames_the_target_when_its_long_caption_degenerates():
    good = "We see the red circle, which slowly slides left during the clip. Nothing disappears."
    bad = "We see the red circle, which slowly slides left during the clipe, which slowly"
    vocab = set(vocabulary_words())
    assert spelt_right(good, vocab) and not spelt_right(bad, vocab)
    short = _recs({"a": 9.0, "b": 9.0, "c": 6.0}, {"a": good, "b": good, "c": good})
    long_ = _recs({"a": 9.0, "b": 2.0, "c": 6.0}, {"a": good, "b": bad, "c": good})
    doc = analyse([(64, short), (1536, long_)])
    assert doc["videos"] == 3 and doc["clean_at_every_length"] == 2
    lo = doc["lengths"]["1536"]
    assert lo["clean_captions"] == 2 and lo["tau_not_clean"] == 2.0 and lo["tau_clean"] == 7.5
    assert abs(doc["bar"]["ratio"] - (17 / 3) / 8) < 1e-9 and not doc["bar"]["met"]
    assert doc["bar"]["ratio_clean_at_every_length"] == 1.0  # the draft kept up where the target did
    assert doc["same_text_at_every_length"] == 2  # "b" changed its caption with the length
    assert doc["bar"]["ratio_same_text_at_every_length"] == 1.0


def test_same_text_split_separates_a_caption_that_changes_with_the_length():
    still = "We see the red circle, which remains still during the clip. Nothing disappears."
    moves = "We see the red circle, which slowly slides left during the clip. Nothing disappears."
    short = _recs({"a": 9.0, "b": 9.0, "c": 9.0}, {"a": still, "b": still, "c": moves})
    long_ = _recs({"a": 9.0, "b": 6.0, "c": 4.5}, {"a": still, "b": moves, "c": moves})
    doc = analyse([(64, short), (1536, long_)])
    # every caption is spelt right, so the spelling split sees the whole drop; the text split finds it in "b"
    assert doc["clean_at_every_length"] == 3 and doc["same_text_at_every_length"] == 2
    assert doc["same_text_videos"] == ["a", "c"]
    assert doc["lengths"]["1536"]["tau_same_text_at_every_length"] == (9.0 + 4.5) / 2
    assert doc["bar"]["ratio_same_text_at_every_length"] == 0.75
    assert doc["same_text_passes"] == {"more": 1, "fewer": 0, "equal": 1}  # "c" took 4 passes instead of 2


def test_session12_archive_reproduces_the_summary_tau(tmp_path):
    base = REPO / "benchmarks/results/gpu_session12/eval"
    out = tmp_path / "long_tau.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/long_tau.py"), str(base / "eval-long64"),
                           str(base / "eval-long1536"), "--out", str(out), "--plot", str(tmp_path / "tau.png")],
                          capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    for f in ("64", "1536"):
        summary = json.loads((base / f"eval-long{f}/summary.json").read_text())
        assert abs(doc["lengths"][f]["tau"] - summary["methods"]["sparrow"]["tau"]) < 1e-9
    assert "missed" in proc.stdout and doc["bar"]["met"] is False
    assert (tmp_path / "tau.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the τ-by-length plot


def test_ceiling_counts_the_fewest_passes_a_caption_allows():
    from long_tau import ceiling
    assert ceiling(19, 16) == (2, 9.0)  # 18 tokens after the prefill's: 17 in one round, 1 in the next
    assert ceiling(18, 16) == (1, 17.0) and ceiling(1, 16) is None and ceiling(19, None) is None
    text = "We see the red circle, which slowly slides left during the clip. Nothing disappears."
    recs = []
    for sid, passes in (("a", 2), ("b", 5)):
        recs.append({"sample_id": sid, "method": "ar", "text": text, "tau": 1.0, "num_new_tokens": 19,
                     "target_passes": 18, "k": 0})
        recs.append({"sample_id": sid, "method": "sparrow", "text": text, "tau": 18 / passes, "num_new_tokens": 19,
                     "target_passes": passes, "k": 16})
    row = analyse([(64, recs), (1536, recs)])["lengths"]["64"]
    assert row["at_ceiling"] == 1 and row["tau_ceiling"] == 9.0 and row["passes_over_fewest"] == 7 / 4
    assert row["per_video"]["a"]["at_ceiling"] and not row["per_video"]["b"]["at_ceiling"]


def test_bootstrap_interval_of_the_ratio():
    from long_tau import bootstrap_ratio

    same = bootstrap_ratio([10.0] * 8, [8.0] * 8, draws=500)
    assert same["ci95"] == [0.8, 0.8] and same["share_met"] == 0.0  # no spread between videos: no uncertainty
    spread = bootstrap_ratio([10.0] * 10, [12.0, 6.0, 11.0, 7.0, 10.0, 8.0, 12.0, 6.0, 10.0, 9.0], draws=2000)
    lo, hi = spread["ci95"]
    assert lo < 0.91 < hi and 0.0 < spread["share_met"] < 1.0  # point estimate 0.91: the bar is not settled
    assert spread == bootstrap_ratio([10.0] * 10, [12.0, 6.0, 11.0, 7.0, 10.0, 8.0, 12.0, 6.0, 10.0, 9.0], draws=2000)
    short = _recs({"a": 9.0, "b": 9.0}, {"a": "x", "b": "x"})
    doc = analyse([(64, short), (1536, _recs({"a": 9.0, "b": 4.5}, {"a": "x", "b": "x"}))])
    assert doc["bar"]["bootstrap"]["ci95"][0] == 0.5 and doc["bar"]["bootstrap"]["ci95"][1] == 1.0


def test_extra_misses_name_the_words_the_long_reading_loses():
    """With ``rounds`` in the records, the tokens the draft missed are located, and on a caption that is the same at
    both lengths the misses only the long reading has are counted by token and label."""
    from long_tau import misses

    from vidspec.evaluation.synthvid.tokenizer import build_tokenizer

    text = "We see the orange star, which slowly drifts straight down during the clip. Nothing disappears."
    tok = build_tokenizer()
    ids = tok(text)["input_ids"] + [tok.eos_token_id]
    n = len(ids)

    def recs(rounds: list[list[int]]) -> list[dict]:
        assert sum(e for _, _, e in rounds) == n - 1
        base = {"sample_id": "a", "text": text, "token_ids": ids, "num_new_tokens": n}
        return [{**base, "method": "ar", "tau": 1.0, "target_passes": n - 1},
                {**base, "method": "sparrow", "k": 16, "rounds": rounds, "target_passes": len(rounds),
                 "tau": (n - 1) / len(rounds)}]

    short = [[16, 7, 8], [16, n - 10, n - 9]]  # one miss after 7 tokens, then the rest
    long_ = [[16, 2, 3], [16, 4, 5], [16, n - 10, n - 9]]  # a miss at the colour first
    assert misses(recs(short)[1]) == [8, n - 1] and misses(recs(long_)[1]) == [3, 8, n - 1]
    assert misses({"token_ids": ids}) is None  # records written before ``rounds``
    doc = analyse([(64, recs(short)), (1536, recs(long_))])
    extra = doc["extra_misses"]
    assert extra["videos"]["a"] == [{"index": 3, "token": " orange", "label": "colour"}]
    assert extra["by_label"] == {"colour": 1} and extra["misses_at_each_length"] == {"64": 2, "1536": 3}
    # without rounds in the records there is nothing to locate
    plain = [{k: v for k, v in r.items() if k != "rounds"} for r in recs(short)]
    assert "extra_misses" not in analyse([(64, plain), (1536, plain)])


def test_token_pieces_of_another_tokenizer_are_unknown():
    from long_tau import token_pieces

    assert token_pieces([892, 733]) == (["We", " see"], ["filler", "filler"])
    assert token_pieces([892, 100_000]) == (["?", "?"], ["unknown", "unknown"])
