"""``vidspec sparrow-vocab`` and ``--draft-vocab``: a release's draft vocabulary, end to end on CPU."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from vidspec.decoding.cli import main
from vidspec.decoding.drafters.sparrow import DRAFT_VOCAB_FILE, load_draft_vocab
from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.sparrow.vocab import count_tokens, rank_tokens
from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

REPO = Path(__file__).resolve().parents[3]
RELEASES = REPO / "data" / "releases"


class _Tok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [len(w) for w in text.split()]}


def test_rank_puts_always_first_then_by_count_ties_by_id():
    counts = count_tokens(["aa b cc", "dd e", "b"], _Tok())  # lengths: 2 1 2 / 2 1 / 1
    assert counts == Counter({2: 3, 1: 3})
    assert rank_tokens(counts, always=[9]) == [9, 1, 2]
    assert rank_tokens(counts, always=[2]) == [2, 1]  # no repeats


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab")
    data = generate_synthvid(root / "sv", SynthVidConfig(num_videos=4, seed=0, preset="easy", size="64x64",
                                                         split="train", mcq_per_video=1, open_per_video=0),
                             progress=False)
    sparrow = root / "sparrow"
    shutil.copytree(RELEASES / "sparrow-synthvid", sparrow)
    (sparrow / DRAFT_VOCAB_FILE).unlink(missing_ok=True)
    return data, sparrow


def _vidspec(capfd, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capfd.readouterr()
    return code, out, err


def test_sparrow_vocab_writes_the_release_vocabulary_and_generate_uses_it(capfd, world):
    data, sparrow = world
    target = str(RELEASES / "synthvid-target")
    code, out, err = _vidspec(capfd, "sparrow-vocab", "--data", str(data), "--target", target, "--out", str(sparrow))
    assert code == 0, err
    voc = json.loads((sparrow / DRAFT_VOCAB_FILE).read_text())
    ids, counts = voc["token_ids"], voc["counts"]
    assert ids[0] == 2 and len(set(ids)) == len(ids)  # the target's EOS first, no repeats
    assert counts[1:] == sorted(counts[1:], reverse=True) and min(counts[1:]) > 0
    assert torch.equal(load_draft_vocab(sparrow, 10), torch.tensor(ids[:10]))

    video = next((Path(data) / "videos").rglob("*.mp4"))
    common = ["generate", "--target", target, "--video", str(video), "--max-new-tokens", "24", "--json"]
    code, out, err = _vidspec(capfd, *common, "--method", "ar")
    assert code == 0, err
    ar = json.loads(out)
    code, out, err = _vidspec(capfd, *common, "--method", "sparrow", "--sparrow", str(sparrow), "--draft-vocab", "12")
    assert code == 0, err
    sp = json.loads(out)
    assert sp["token_ids"] == ar["token_ids"]  # lossless with 12 draft tokens


def test_draft_vocabulary_errors_are_one_line(capfd, world, tmp_path):
    data, sparrow = world
    target = str(RELEASES / "synthvid-target")
    bare = tmp_path / "bare"
    shutil.copytree(RELEASES / "sparrow-synthvid", bare)
    (bare / DRAFT_VOCAB_FILE).unlink(missing_ok=True)
    video = next((Path(data) / "videos").rglob("*.mp4"))
    cases = [
        (["generate", "--target", target, "--video", str(video), "--method", "sparrow", "--sparrow", str(bare),
          "--draft-vocab", "8"], "no draft_vocab.json"),
        (["generate", "--target", target, "--video", str(video), "--method", "ar", "--draft-vocab", "8"],
         "applies to the Sparrow methods"),
        (["eval", "--benchmark", "synthvid_captions", "--data", str(data), "--split", "train", "--target", target,
          "--sparrow", "random", "--methods", "ar,sparrow", "--draft-vocab", "8", "--out", str(tmp_path / "e")],
         "needs --sparrow DIR"),
        (["sparrow-vocab", "--data", str(data), "--target", target, "--out", str(tmp_path / "nope")], "not a folder"),
        (["sparrow-vocab", "--data", str(data), "--target", target, "--out", str(bare), "--column", "nope"],
         "no column 'nope'"),
    ]
    for argv, msg in cases:
        code, _, err = _vidspec(capfd, *argv)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert code == 2 and msg in lines[-1] and "Traceback" not in err, (argv, err)
    (bare / DRAFT_VOCAB_FILE).write_text("{}")
    with pytest.raises(ConfigError, match="not a draft vocabulary"):
        load_draft_vocab(bare, 4)
    with pytest.raises(ConfigError, match=">= 1"):
        load_draft_vocab(sparrow, 0)
