"""Draft/target pairs whose LM heads differ only by padding rows (Qwen2.5-VL-3B drafting for the 7B).

The 3B head has 151,936 rows and the 7B 152,064 over one tokenizer. ``check_compatible`` accepts such a
pair, and the draft proposes only real token ids, so decoding stays token-identical to the target alone.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vidspec.decoding.drafters import ModelDrafter, NoDrafter
from vidspec.decoding.errors import ModelError
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.models import check_compatible, load_target, real_vocab_size
from vidspec.decoding.types import Request

PAD = 8
N = 24


def pad_head(adapter, extra: int, bias: float) -> None:
    """Give ``adapter``'s LM head ``extra`` padding rows whose logits are ``bias`` (the real rows unchanged)."""
    old = adapter.model.lm_head
    rows, d = old.weight.shape
    new = nn.Linear(d, rows + extra, bias=True, dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:rows] = old.weight
        new.bias.zero_()
        new.bias[rows:] = bias
    adapter.model.lm_head = new
    adapter.vocab_size = rows + extra


@pytest.fixture(scope="module")
def pair():
    return lambda: (load_target("tiny-qwen2.5-vl"), load_target("tiny-qwen2.5-vl-draft"))


def test_padding_rows_are_past_the_tokenizer(pair):
    target, _ = pair()
    assert real_vocab_size(target.tokenizer, target.vocab_size) <= len(target.tokenizer)
    assert real_vocab_size(target.tokenizer, 10) == 10


@pytest.mark.parametrize("padded", ["draft", "target"])
def test_padded_pair_is_accepted_and_token_identical_to_ar(pair, clip, padded):
    target, draft = pair()
    if padded == "draft":  # padding rows the draft would always choose if they were not masked
        pad_head(draft, PAD, bias=1e4)
    else:  # the larger head is the target's (the 7B case); its padding is never the argmax
        pad_head(target, PAD, bias=-1e4)
    assert check_compatible(target, draft) == real_vocab_size(target.tokenizer, min(target.vocab_size,
                                                                                   draft.vocab_size))
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target, NoDrafter()).generate(req, max_new_tokens=N)
    sd = SpeculativeDecoder(target, ModelDrafter(draft), k=3).generate(req, max_new_tokens=N)
    assert sd.token_ids == ar.token_ids
    if padded == "draft":  # the draft's real rows are the unpadded draft's: it still agrees with the target
        assert sd.target_passes < len(sd.token_ids)


def test_padded_draft_samples_only_real_ids(pair, clip):
    target, draft = pair()
    pad_head(draft, PAD, bias=1e4)
    drafter = ModelDrafter(draft, temperature=1.0)
    proposals = []
    propose = drafter.propose
    drafter.propose = lambda k: proposals.append(propose(k)) or proposals[-1]
    out = SpeculativeDecoder(target, drafter, k=3).generate(Request("Describe the video.", clip),
                                                             max_new_tokens=12, temperature=1.0, seed=0)
    n_real = real_vocab_size(target.tokenizer, target.vocab_size)
    assert len(out.token_ids) == 12 and proposals
    for p in [p for p in proposals if p.tokens]:  # q over the target's rows, zero on the padding the draft would otherwise sample
        assert all(t < n_real for t in p.tokens)
        assert p.probs.shape[-1] == target.vocab_size and float(p.probs[:, n_real:].sum()) == 0.0


def test_other_tokenizer_is_still_refused(pair):
    target, draft = pair()
    pad_head(draft, PAD, bias=0.0)
    vocab = dict(draft.tokenizer.get_vocab())
    vocab["<not-in-target>"] = len(vocab)
    draft.tokenizer.get_vocab = lambda: vocab
    with pytest.raises(ModelError, match="does not share the vocabulary"):
        check_compatible(target, draft)
