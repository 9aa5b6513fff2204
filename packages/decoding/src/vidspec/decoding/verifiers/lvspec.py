"""LVSpec: loose verification guided by visual relevance, with PST and protected tokens.

docs/algorithms.md, LVSpec. Per round:

1. A :class:`~vidspec.decoding.verifiers.relevance.RelevanceScorer` scores every draft position.
2. The λ rule marks the positions in the lowest λ quantile of relevance as *loose*
   (:func:`lowest_quantile_mask`; the reference is a running window, the round, or a fixed
   threshold from :func:`calibrate`). λ = 0 marks nothing: lossless strict SD.
3. Walk the draft: a match is accepted ("strict"); a mismatch at a loose, non-protected
   position where the predicate holds is accepted **keeping the draft token** ("loose");
   otherwise PST may accept it ("shift"); otherwise the round stops with the target's token.

Protected tokens (negations, comparatives, numbers; :func:`protected_token_ids`) are always
verified strictly: the paper names them as LVSpec's weakness. So is a mismatch where the draft or
the target has an end-of-sequence token (``VerifyContext.stop_ids``): a one-letter MCQ answer
("A" + EOS) must not run on with the draft's words.

Usage::

    ids = protected_token_ids(target.tokenizer)
    verifier = LVSpecVerifier(LVSpecConfig(lam=0.7, pst=True), CosineTopNScorer(), ids)
    decision = verifier.verify(proposal, out, ctx)
"""

from __future__ import annotations

import bisect
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import AcceptKind, Decision, Proposal, VerifyContext, VerifyOutput
from vidspec.decoding.verifiers.relevance import CosineTopNScorer, RelevanceScorer
from vidspec.decoding.verifiers.strict import StrictVerifier, accept_by_ratio, draft_probs, target_probs

Predicate = Literal["always", "topk", "prob"]
QuantileSource = Literal["running", "round", "threshold"]
ScoreRow = Literal["token", "predictor"]

#: Words that change a sentence's meaning without being visual, verified strictly by default.
#: Negations (with the contraction pieces "'t"/"n't" of byte-level BPE), comparatives, and
#: number words (counts are what the digit rule catches when written as digits).
DEFAULT_PROTECTED_WORDS: tuple[str, ...] = (
    # negations
    "no", "not", "never", "without", "none", "nothing", "neither", "nor", "nobody", "nowhere",
    "cannot", "'t", "n't",
    # comparatives
    "more", "less", "fewer", "bigger", "smaller", "larger",
    # number words
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
)  # fmt: skip

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
# Word-start markers: byte-level BPE (GPT-2, Qwen, Llama-3) "Ġ", SentencePiece "▁", plain space.
_WORD_MARKERS = ("Ġ", "▁", " ")
_DIGITS = frozenset("0123456789")


def _piece_text(piece: str) -> str:
    """The surface text of a vocabulary entry, without word-start/end markers."""
    m = _BYTE_FALLBACK.match(piece)
    if m:  # SentencePiece byte fallback: "<0x31>" is the byte "1"
        code = int(m.group(1), 16)
        return chr(code) if code < 128 else ""
    for marker in _WORD_MARKERS:
        if piece.startswith(marker):
            piece = piece[len(marker) :]
            break
    if piece.endswith("</w>"):  # CLIP-style BPE word end
        piece = piece[:-4]
    return piece


def _special_ids(tokenizer: Any) -> set[int]:
    ids = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ())}
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if added is None and callable(getattr(tokenizer, "get_added_tokens_decoder", None)):
        added = tokenizer.get_added_tokens_decoder()  # a bare `tokenizers.Tokenizer`
    for i, tok in (added or {}).items():
        if getattr(tok, "special", True):
            ids.add(int(i))
    return ids


def _encode(tokenizer: Any, text: str) -> list[int]:
    enc = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(enc, "ids", enc))


def protected_token_ids(
    tokenizer: Any,
    words: Iterable[str] = DEFAULT_PROTECTED_WORDS,
    digits: bool = True,
    split_words: Literal["skip", "all"] = "skip",
) -> frozenset[int]:
    """Token ids that LVSpec always verifies strictly.

    A vocabulary entry is protected when its text, stripped of a leading word marker (``Ġ``,
    ``▁`` or a space) and compared case-insensitively, is one of ``words``, or (``digits``)
    when it contains an ASCII digit (SentencePiece byte-fallback pieces ``<0xHH>`` count as
    the byte they stand for). Special/control tokens are never protected.

    A word with no single-token form (a small BPE splits "not" into "Ġn" + "ot") cannot be
    protected token by token without also protecting its pieces' other uses. ``split_words``
    decides: "skip" (default) leaves it unprotected (see :func:`unmapped_protected_words`);
    "all" protects every piece of its encodings (on the 512-token tiny tokenizer that is ~15%
    of the vocabulary, single letters included, which would swamp a protection ablation). The
    large HF tokenizers (Qwen2/2.5, Llama, LLaVA-OV) have every default word as one token.

    Args:
        tokenizer: a Hugging Face tokenizer or a bare ``tokenizers.Tokenizer`` (anything with
            ``get_vocab()`` and ``encode(text, add_special_tokens=False)``).
        words: the protected words.
        digits: also protect every token containing a digit.
        split_words: what to do with words that have no single-token form ("skip" or "all").

    Returns:
        The protected ids.
    """
    vocab: dict[str, int] = dict(tokenizer.get_vocab())
    special = _special_ids(tokenizer)
    wanted = {w.lower() for w in words}
    found: set[str] = set()
    ids: set[int] = set()
    for piece, i in vocab.items():
        if i in special:
            continue
        text = _piece_text(piece)
        low = text.lower()
        if low in wanted:
            ids.add(int(i))
            found.add(low)
        elif digits and any(c in _DIGITS for c in text):
            ids.add(int(i))
    if split_words == "all":
        for w in sorted(wanted - found):
            # contraction fragments such as "'t" would split into "'" and "t": never fall back
            if not w.isalpha():
                continue
            for variant in (w, " " + w, w.capitalize(), " " + w.capitalize()):
                ids.update(i for i in _encode(tokenizer, variant) if i not in special)
    elif split_words != "skip":
        raise ConfigError(f"split_words must be skip or all, got {split_words!r}")
    return frozenset(ids)


def unmapped_protected_words(tokenizer: Any, words: Iterable[str] = DEFAULT_PROTECTED_WORDS) -> list[str]:
    """The protected words that have no single-token form in ``tokenizer`` (so are unprotected
    under ``split_words="skip"``); report them beside any protection ablation."""
    wanted = {w.lower() for w in words}
    special = _special_ids(tokenizer)
    found = {_piece_text(p).lower() for p, i in tokenizer.get_vocab().items() if i not in special}
    return sorted(wanted - found)


def lowest_quantile_mask(scores: Sequence[float], reference: Sequence[float], frac: float) -> list[bool]:
    """Which ``scores`` fall in the lowest ``frac`` quantile of ``reference``.

    A score s is in it when at most ``frac * len(reference)`` reference scores are <= s. Ties
    are conservative: a block of equal scores is in only if the whole block fits, so
    constant scores (no video) relax nothing unless ``frac == 1``, and ``frac == 0`` never
    marks anything.

    Args:
        scores: the scores to classify.
        reference: the distribution the quantile is taken over (usually contains ``scores``).
        frac: λ in [0, 1].

    Returns:
        One bool per score.
    """
    if frac <= 0 or not reference:
        return [False] * len(scores)
    ref = sorted(reference)
    limit = frac * len(ref) + 1e-9  # guard 0.57 * 100 = 56.999...
    return [bisect.bisect_right(ref, s) <= limit for s in scores]


def calibrate(scores_list: Iterable[torch.Tensor | Sequence[float] | float], lam: float) -> float:
    """A fixed relevance threshold that makes a fraction ``lam`` of calibration scores loose.

    Use the returned value as ``LVSpecConfig(quantile="threshold", threshold=...)``; a position
    is then loose when its score is ``<= threshold``. The threshold lies halfway between the
    highest loose and the lowest non-loose calibration score (so it generalises to unseen
    scores); ties are conservative as in :func:`lowest_quantile_mask`.

    Args:
        scores_list: relevance scores from a few calibration prompts (tensors, lists or floats).
        lam: λ in [0, 1].

    Returns:
        The threshold; ``-inf`` when nothing may be loose, ``+inf`` when everything is.

    Raises:
        ConfigError: ``lam`` outside [0, 1] or no scores.
    """
    if not 0.0 <= lam <= 1.0:
        raise ConfigError(f"lam must be in [0, 1], got {lam}")
    flat: list[float] = []
    for item in scores_list:
        flat.extend(torch.as_tensor(item, dtype=torch.float64).reshape(-1).tolist())
    if not flat:
        raise ConfigError("calibrate needs at least one score")
    flat.sort()
    m = math.floor(lam * len(flat) + 1e-9)  # at most m scores may be loose
    if m >= len(flat):
        return math.inf
    first_strict = flat[m]
    below = [s for s in flat[:m] if s < first_strict]
    if not below:
        return -math.inf
    return (below[-1] + first_strict) / 2


@dataclass(frozen=True)
class LVSpecConfig:
    """Options of :class:`LVSpecVerifier` (docs/algorithms.md, LVSpec; the defaults are the paper's).

    Attributes:
        lam: λ, the fraction of positions verified loosely (lowest relevance). 0 = lossless
            (also with ``quantile="threshold"``, where otherwise the threshold alone decides).
        quantile: where the λ quantile comes from: "running" (a window of the last ``window``
            draft scores of this request, this round's included), "round" (this round's draft
            scores only) or "threshold" (the fixed ``threshold``, see :func:`calibrate`).
        window: size of the running window.
        threshold: fixed relevance threshold for ``quantile="threshold"`` (loose when <=).
        predicate: when a loose mismatch is accepted: "always", "topk" (draft token in the
            target's top ``top_k``) or "prob" (target probability of the draft token >= ``eps``).
        top_k: k of the "topk" predicate.
        eps: ε of the "prob" predicate.
        pst: enable position-shift tolerance.
        pst_window: w: PST accepts d_i when the target's token is among d_{i-w}..d_{i+w}; 0 turns PST off.
        pst_lam: fraction of lowest-relevance positions where PST may act (same quantile
            source as ``lam``). None = ``lam``: PST only at loose positions, so "visually
            relevant" means "not loose" and PST only rescues loose positions whose predicate
            failed (a no-op with predicate "always"). A value above ``lam`` lets PST act in the
            band between the loose and the most relevant positions.
        pst_threshold: for ``quantile="threshold"``: PST may act where the score is <= this.
            None = ``threshold``.
        score_row: which relevance row judges draft token d_i: "token" (row i, the hidden state
            of d_i itself, as the paper describes) or "predictor" (row i-1, the state that
            predicted d_i).
        device_walk: on a fast target, greedy and relevance-blind (``lam=1`` with predicate "prob" or
            "always"), compute the round's decision inside the verify step on the device
            (:func:`loose_accept`, see :meth:`LVSpecVerifier.device_spec`) and read it back with the
            verify step's other outputs, instead of walking the draft on the host. Same rule, so the same
            tokens; on by default because an H200 A/B measured 0.07-0.12 ms less per verify round with
            160 of 160 decodes token- and pass-identical (docs/results.md). Elsewhere the host walk runs.
    """

    lam: float = 0.7
    quantile: QuantileSource = "running"
    window: int = 256
    threshold: float | None = None
    predicate: Predicate = "always"
    top_k: int = 5
    eps: float = 0.01
    pst: bool = False
    pst_window: int = 3
    pst_lam: float | None = None
    pst_threshold: float | None = None
    score_row: ScoreRow = "token"
    device_walk: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"lam must be in [0, 1], got {self.lam}")
        if self.quantile not in ("running", "round", "threshold"):
            raise ConfigError(f"quantile must be running, round or threshold, got {self.quantile!r}")
        if self.window < 1:
            raise ConfigError(f"window must be >= 1, got {self.window}")
        if self.quantile == "threshold" and self.threshold is None:
            raise ConfigError(
                "quantile='threshold' needs threshold= (see vidspec.decoding.verifiers.lvspec.calibrate)"
            )
        if self.predicate not in ("always", "topk", "prob"):
            raise ConfigError(f"predicate must be always, topk or prob, got {self.predicate!r}")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be >= 1, got {self.top_k}")
        if not 0.0 < self.eps <= 1.0:
            raise ConfigError(f"eps must be in (0, 1], got {self.eps}")
        if self.pst_window < 0:
            raise ConfigError(f"pst_window must be >= 0 (0: no PST), got {self.pst_window}")
        if self.pst_lam is not None and not self.lam <= self.pst_lam <= 1.0:
            raise ConfigError(f"pst_lam must be in [lam, 1] = [{self.lam}, 1], got {self.pst_lam}")
        if self.score_row not in ("token", "predictor"):
            raise ConfigError(f"score_row must be token or predictor, got {self.score_row!r}")


@dataclass(frozen=True)
class LoosePolicy:
    """Per-round inputs of :func:`loose_walk`, computed by the verifier.

    Attributes:
        loose: per draft position, may a mismatch be relaxed (length K).
        shift: per draft position, may PST act (length K); all False disables PST.
        protected: token ids never relaxed nor shifted (checked on the draft token and on the
            target's token).
        predicate: the loose-acceptance predicate.
        top_k: k of "topk".
        eps: ε of "prob".
        pst_window: w of PST.
    """

    loose: Sequence[bool]
    shift: Sequence[bool]
    protected: frozenset[int] = frozenset()
    predicate: Predicate = "always"
    top_k: int = 5
    eps: float = 0.01
    pst_window: int = 3


def _predicate_ok(
    policy: LoosePolicy, row_logits: Callable[[], torch.Tensor], row_probs: Callable[[], torch.Tensor], d: int
) -> bool:
    if policy.predicate == "always":
        return True
    if policy.predicate == "topk":
        logits = row_logits()
        return bool((logits.topk(min(policy.top_k, logits.shape[-1])).indices == d).any())
    return float(row_probs()[d]) >= policy.eps


def _in_window(token: int, draft: Sequence[int], i: int, w: int) -> bool:
    lo, hi = max(0, i - w), min(len(draft), i + w + 1)
    return any(draft[j] == token for j in range(lo, hi) if j != i)


#: Kind codes of :func:`loose_accept`'s per-position output (0: the position stops the round).
KIND_CODES: dict[int, AcceptKind] = {1: "strict", 2: "loose", 3: "shift"}


@dataclass(frozen=True)
class LooseSpec:
    """The greedy loose rule as a fast target computes it inside its verify step (:func:`loose_accept`).

    It holds only what is fixed for a request: a relevance-blind policy (every position loose; PST at
    every position or none), the protected ids (the end-of-sequence ids included) and the predicate.

    Attributes:
        protected: token ids never relaxed nor shifted (checked on the draft's and the target's token).
        eps: ε of the "prob" predicate; None for "always".
        shift: whether PST may act.
        window: PST's w.
    """

    protected: frozenset[int]
    eps: float | None
    shift: bool
    window: int


def loose_accept(logits: torch.Tensor, argmax: torch.Tensor, ids: torch.Tensor, protected: torch.Tensor,
                 eps: float | None, shift: bool, window: int) -> torch.Tensor:
    """The greedy loose walk of a chain verify step, on tensors (no host synchronisation).

    The same rule as :func:`loose_walk` at temperature 0 with every position loose and, with ``shift``,
    PST-eligible: position i is kept when d_i equals the target's argmax (strict); else, when neither
    token is protected, when the target gives d_i a temperature-1 probability >= ``eps`` (loose; any
    probability when ``eps`` is None); else, when neither is protected, when the target's token is
    among d_{i-w}..d_{i+w} other than d_i (shift). The round keeps the positions before the first
    one that fails.

    Args:
        logits: ``(K+1, V)`` the verify step's logits.
        argmax: ``(K+1,) int64`` their greedy tokens.
        ids: ``(K+1,) int64`` the step's input tokens ``[x_last, d_1..d_K]``.
        protected: ``(V',) bool`` mask over token ids (V' covers every id).
        eps, shift, window: the rule's parameters (:class:`LooseSpec`).

    Returns:
        ``(K+2,) int64``: ``[n_accepted, next_token, kind_1..kind_K]``, kinds as :data:`KIND_CODES`
        (those past ``n_accepted`` are not used).
    """
    k = ids.shape[0] - 1
    d, t = ids[1:], argmax[:k]
    match = d == t
    free = ~(protected[d] | protected[t])
    if eps is None:
        loose = ~match & free
    else:
        p = torch.softmax(logits[:k].float(), dim=-1).gather(-1, d[:, None]).squeeze(-1)
        loose = ~match & free & (p >= eps)
    kind = match.long() + 2 * loose.long()
    if shift:
        i = torch.arange(k, device=ids.device)
        off = (i[:, None] - i[None, :]).abs()
        near = ((t[:, None] == d[None, :]) & (off > 0) & (off <= window)).any(-1)
        kind = kind + 3 * (~match & ~loose & free & near).long()
    n = (kind > 0).long().cumprod(0).sum()
    return torch.cat([n.view(1), argmax.gather(0, n.view(1)), kind])


def loose_walk(proposal: Proposal, out: VerifyOutput, ctx: VerifyContext, policy: LoosePolicy) -> Decision:
    """Walk the draft with strict, loose and shift acceptance; the core of LVSpec-like verifiers.

    Greedy (``ctx.temperature == 0``): d_i (0-based i) matches when it equals argmax of logits
    row i. Sampling: the strict test is speculative rejection sampling (as
    :class:`~vidspec.decoding.verifiers.strict.StrictVerifier`); a rejected token may still be
    accepted loosely; otherwise the correction token is sampled from the residual
    norm(max(p - q, 0)), PST is tested against that sample, and if PST fails it is emitted.
    Under sampling the predicates read the tempered, nucleus-filtered target distribution;
    under greedy they read the temperature-1 softmax of the logits.

    Args:
        proposal: d_1..d_K (and q for sampling).
        out: the verify pass; reads ``logits`` ``(K+1, V)``.
        ctx: temperature, top_p and generator.
        policy: per-position loose/shift masks, protected ids and predicate.

    Returns:
        The decision; ``kinds`` says how each kept token was accepted. ``scores`` is left empty
        (the caller adds relevance scores).
    """
    draft = proposal.tokens
    k = len(draft)
    logits = out.logits[: k + 1]
    choice = logits.argmax(-1).tolist()
    kinds: list[AcceptKind] = []
    # The target's end-of-sequence ids are protected too: ending the answer, or running past the
    # target's end, is never a wording choice.
    prot = policy.protected | ctx.stop_ids
    sampling = ctx.temperature > 0
    p = target_probs(logits, ctx.temperature, ctx.top_p) if sampling else None
    gen = ctx.generator

    def probs_at(i: int) -> torch.Tensor:
        return p[i] if p is not None else torch.softmax(logits[i].float(), dim=-1)

    for i, d in enumerate(draft):
        t = choice[i]
        if sampling:
            assert p is not None
            q = draft_probs(proposal, i, p[i])
            if accept_by_ratio(p[i], q, d, gen):
                kinds.append("strict")
                continue
        elif d == t:
            kinds.append("strict")
            continue
        # a protected draft token, or a protected target token, is never overridden
        guarded = d in prot or t in prot
        if (
            not guarded
            and policy.loose[i]
            and _predicate_ok(policy, lambda i=i: logits[i], lambda i=i: probs_at(i), d)
        ):
            kinds.append("loose")
            continue
        if sampling:
            assert p is not None
            residual = (p[i] - q).clamp_min(0)
            if float(residual.sum()) <= 0:
                residual = p[i]
            t = int(torch.multinomial(residual / residual.sum(), 1, generator=gen))
        if not guarded and t not in prot and policy.shift[i] and _in_window(t, draft, i, policy.pst_window):
            kinds.append("shift")
            continue
        return Decision(i, int(t), tuple(kinds))
    if sampling:
        assert p is not None
        nxt = int(torch.multinomial(p[k], 1, generator=gen))
    else:
        nxt = int(choice[k])
    return Decision(k, nxt, tuple(kinds))


class LVSpecVerifier:
    """LVSpec loose verification (optionally with PST), relevance from a pluggable scorer.

    Greedy is the main path; at temperature > 0 the loose rule sits on top of rejection
    sampling (see :func:`loose_walk`).

    Attributes:
        name: "lvspec" or "lvspec-pst".
        need: the scorer's need (cosine: ``{"mid"}``; attention: ``{"attn_to_visual"}`` or ``{"attn_to_visual_max"}``).
        config: the options.
        scorer: the relevance scorer.
        protected: token ids always verified strictly.
    """

    def __init__(
        self,
        config: LVSpecConfig | None = None,
        scorer: RelevanceScorer | None = None,
        protected: Iterable[int] = (),
    ) -> None:
        self.config = config or LVSpecConfig()
        self.scorer: RelevanceScorer = scorer if scorer is not None else CosineTopNScorer()
        self.protected = frozenset(int(i) for i in protected)
        self.name = "lvspec-pst" if self.config.pst else "lvspec"
        # Nothing to score when no score can change a decision: the target is then asked for no
        # relevance inputs (no mid-layer states at prefill or verify) and the scorer never runs.
        self.need: frozenset[str] = frozenset() if self.relevance_blind else frozenset(self.scorer.need)
        self._memory_key = f"{self.name}.relevance_window"
        self._specs: dict[frozenset[int], LooseSpec] = {}
        self._strict = StrictVerifier()

    @property
    def strict_equivalent(self) -> bool:
        """Whether, greedy, this rule can keep no token that strict verification would reject.

        True when no position is loose (λ 0), or when the loose gate only opens for a draft token the target
        ranks first ("prob" with ε >= 0.5: a token with p >= 0.5 is the target's argmax, but for an exact
        0.5 / 0.5 tie, which is then resolved as strict resolves it; "topk" with k 1), and PST cannot act
        (off, window 0, or no PST band). Such a rule is verified strictly: no decision walk on the host, no
        rule in a fast target's verify step, so it does exactly the strict method's work.
        """
        cfg = self.config
        pst_lam = cfg.lam if cfg.pst_lam is None else cfg.pst_lam
        no_pst = not cfg.pst or cfg.pst_window == 0 or (cfg.quantile != "threshold" and pst_lam <= 0)
        gate_shut = (cfg.lam <= 0 and cfg.quantile != "threshold") or (cfg.predicate == "prob" and cfg.eps >= 0.5) \
            or (cfg.predicate == "topk" and cfg.top_k == 1)
        return no_pst and gate_shut

    @property
    def relevance_blind(self) -> bool:
        """Whether every draft position is loose (λ = 1) and PST-eligible whatever the scores.

        Then relevance cannot change a decision: only the predicate, PST and the protected tokens
        decide (e.g. ``lam=1.0, predicate="prob"``: a mismatch passes where the target itself gives
        the draft's token probability >= ε, wherever it stands). A fixed threshold still reads scores.
        """
        cfg = self.config
        pst_lam = cfg.lam if cfg.pst_lam is None else cfg.pst_lam
        return cfg.quantile != "threshold" and cfg.lam >= 1.0 and (not cfg.pst or pst_lam >= 1.0)

    def device_spec(self, stop_ids: Iterable[int] = ()) -> LooseSpec | None:
        """The rule a fast target may apply inside its verify step for this verifier (``device_walk``), or None.

        Only a relevance-blind verifier with predicate "prob" or "always" has one: its decision depends on
        the logits and the tokens alone. ``stop_ids``: the request's end-of-sequence ids (protected too).
        """
        cfg = self.config
        if not (cfg.device_walk and self.relevance_blind and cfg.predicate in ("prob", "always")) \
                or self.strict_equivalent:
            return None
        stops = stop_ids if isinstance(stop_ids, frozenset) else frozenset(int(i) for i in stop_ids)
        cached = self._specs.get(stops)  # asked once per round: built once per set of stop ids
        if cached is None:
            cached = self._specs[stops] = LooseSpec(self.protected | stops, cfg.eps if cfg.predicate == "prob" else None,
                                                    cfg.pst and cfg.pst_window > 0, cfg.pst_window)
        return cached

    def draft_scores(self, out: VerifyOutput, ctx: VerifyContext, k: int) -> list[float]:
        """Relevance of draft tokens d_1..d_K (length K), by ``config.score_row``."""
        rows = self.scorer.score(out, ctx.state).reshape(-1)
        picked = rows[1 : k + 1] if self.config.score_row == "token" else rows[:k]
        return picked.float().tolist()

    def masks(self, scores: list[float], memory: dict[str, Any]) -> tuple[list[bool], list[bool]]:
        """The loose and PST-eligible masks of this round's draft scores (the λ rule).

        For ``quantile="running"`` this round's scores are appended to the window in
        ``memory`` first (all K of them, accepted or not: they sample the same score
        distribution).
        """
        cfg = self.config
        pst_lam = cfg.lam if cfg.pst_lam is None else cfg.pst_lam
        if cfg.quantile == "threshold":
            assert cfg.threshold is not None
            pst_t = cfg.threshold if cfg.pst_threshold is None else cfg.pst_threshold
            loose = [cfg.lam > 0 and s <= cfg.threshold for s in scores]
            shift = [cfg.pst and s <= pst_t for s in scores]
            return loose, shift
        if cfg.quantile == "round":
            reference: Sequence[float] = scores
        else:
            window = memory.get(self._memory_key)
            if window is None or window.maxlen != cfg.window:
                window = memory[self._memory_key] = deque(maxlen=cfg.window)
            window.extend(scores)
            reference = list(window)
        loose = lowest_quantile_mask(scores, reference, cfg.lam)
        shift = lowest_quantile_mask(scores, reference, pst_lam) if cfg.pst else [False] * len(scores)
        return loose, shift

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        """Decide one round.

        Args:
            proposal: d_1..d_K.
            out: the verify pass; ``logits`` ``(K+1, V)`` plus what ``need`` asked for.
            ctx: the state (cached visual hidden states), sampling settings, per-request memory.

        Returns:
            The decision; ``scores`` holds the relevance of the examined draft positions
            (the accepted ones and the one that stopped the round).
        """
        k = len(proposal.tokens)
        if k == 0:
            return loose_walk(proposal, out, ctx, LoosePolicy((), ()))
        if ctx.temperature <= 0 and self.strict_equivalent:
            return self._strict.verify(proposal, out, ctx)  # the same decision, at strict's cost
        on_device = getattr(out, "loose_decision", None)
        if (on_device is not None and self.config.device_walk and ctx.temperature <= 0
                and getattr(out, "loose_spec", None) == self.device_spec(ctx.stop_ids)):
            decided = on_device(k)  # decided by the verify step itself (same rule), read with its outputs
            if decided is not None:
                return decided
        if self.relevance_blind:
            scores: list[float] = []
            loose, shift = [True] * k, [self.config.pst] * k
        else:
            scores = self.draft_scores(out, ctx, k)
            loose, shift = self.masks(scores, ctx.memory)
        cfg = self.config
        policy = LoosePolicy(loose, shift, self.protected, cfg.predicate, cfg.top_k, cfg.eps, cfg.pst_window)
        d = loose_walk(proposal, out, ctx, policy)
        examined = min(d.n_accepted + 1, k)
        return Decision(d.n_accepted, d.next_token, d.kinds, tuple(scores[:examined]))
