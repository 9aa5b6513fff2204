"""SpeculativeDecoder.stream: incremental decoding (linear work), whole characters, same text as generate()."""

from __future__ import annotations

import pytest

from vidspec.decoding.drafters import NoDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.testing import ScriptedTarget, oracle_drafter, sequence_logits
from vidspec.decoding.types import Request

# Byte pieces, SentencePiece-like: a leading space marks a word start and the first one of a decode
# is dropped, so decoding only the new tokens would lose spaces. "é", "€" and "😀" are split across
# tokens, so some rounds end inside a character.
PIECES = [b" The", b" caf", b"\xc3", b"\xa9", b" costs", b" 5", b"\xe2", b"\x82", b"\xac", b" \xf0\x9f",
          b"\x98\x80", b".", b" ok"]
SCRIPT = list(range(len(PIECES))) * 16


class ByteTarget(ScriptedTarget):
    def __init__(self):
        super().__init__(sequence_logits(SCRIPT, len(PIECES)), vocab=len(PIECES))
        self.decoded = 0  # tokens passed to decode()

    def decode(self, token_ids):
        self.decoded += len(token_ids)
        return b"".join(PIECES[i] for i in token_ids).decode("utf-8", errors="replace").removeprefix(" ")


@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_stream_is_incremental_and_equals_generate(k):
    target = ByteTarget()
    drafter = NoDrafter() if k == 0 else oracle_drafter(SCRIPT, wrong_at=lambda i: i % 7 == 0)
    dec = SpeculativeDecoder(target, drafter, k=max(k, 1))
    req = Request("p")
    want = dec.generate(req, max_new_tokens=len(SCRIPT)).text
    assert want.startswith("The café costs 5€ 😀. ok The")
    target.decoded = 0
    pieces = list(dec.stream(req, max_new_tokens=len(SCRIPT)))
    assert "".join(pieces) == want
    assert not any("\ufffd" in p for p in pieces)
    # Each round decodes its new tokens plus the previous piece's tokens (as context), twice:
    # linear in the output. Re-decoding everything each round would be about len(SCRIPT)**2 / 2.
    assert target.decoded <= 6 * len(SCRIPT), target.decoded


def test_stream_with_a_real_tokenizer_keeps_multibyte_text_whole(tiny):
    tok = tiny("tiny-qwen2.5-vl").tokenizer
    ids = tok.encode("The café costs 5€ 😀, 日本語の字幕 — ok. " * 4, add_special_tokens=False)

    class TokTarget(ScriptedTarget):
        def decode(self, token_ids):
            return tok.decode(list(token_ids), skip_special_tokens=True)

    target = TokTarget(sequence_logits(ids, len(tok)), vocab=len(tok))
    for drafter, k in ((NoDrafter(), 1), (oracle_drafter(ids, wrong_at=lambda i: i % 5 == 0), 4)):
        dec = SpeculativeDecoder(target, drafter, k=k)
        pieces = list(dec.stream(Request("p"), max_new_tokens=len(ids)))
        assert "".join(pieces) == tok.decode(ids) and not any("\ufffd" in p for p in pieces)
