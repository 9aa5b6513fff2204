"""FLy: text-only loose verification, the baseline LVSpec is compared against (docs/algorithms.md, FLy).

A mismatch at draft position i is accepted (keeping the draft token) when two gates hold:

- entropy gate: the target is unsure there. The entropy uses the target's top-3 probabilities
  renormalised to sum to 1, in nats (so it lies in [0, ln 3 ≈ 1.099]); the gate is
  ``H >= theta`` (θ = 0.3).
- deferred window: the next W (5) draft tokens after d_i all equal the target's argmax at their
  rows, i.e. the draft "recovers" right away. If fewer than W draft tokens follow d_i, the
  window cannot be checked and the mismatch is rejected.

A mismatch where either side is an end-of-sequence token (``VerifyContext.stop_ids``) is never
relaxed.

It never looks at the video ("visually blind"), which is the point of the comparison: at equal
τ LVSpec should keep more of the visual facts. FLy drafts 15 tokens per round (``default_k``).

Usage::

    verifier = FLyVerifier(FLyConfig(theta=0.3, window=5))
    k = verifier.default_k
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import AcceptKind, Decision, Proposal, VerifyContext, VerifyOutput


@dataclass(frozen=True)
class FLyConfig:
    """Options of :class:`FLyVerifier`.

    Attributes:
        theta: θ, minimum top-``top`` entropy (nats, renormalised) for a mismatch to be relaxed.
        window: W, number of following draft tokens that must match the target exactly.
        top: how many of the target's most probable tokens enter the entropy (3).
        default_k: draft tokens per round FLy is meant to run with (the engine may use it).
    """

    theta: float = 0.3
    window: int = 5
    top: int = 3
    default_k: int = 15

    def __post_init__(self) -> None:
        if self.theta < 0:
            raise ConfigError(f"theta must be >= 0, got {self.theta}")
        if self.window < 0:
            raise ConfigError(f"window must be >= 0, got {self.window}")
        if self.top < 2:
            raise ConfigError(f"top must be >= 2 (the entropy of one token is always 0), got {self.top}")
        if self.default_k < 1:
            raise ConfigError(f"default_k must be >= 1, got {self.default_k}")


def topk_entropy(logits: torch.Tensor, top: int = 3) -> torch.Tensor:
    """Entropy (nats) of the renormalised top-``top`` probabilities of each row.

    Args:
        logits: ``(N, V)`` logits.
        top: number of leading tokens kept.

    Returns:
        ``(N,) float32`` in [0, ln top].
    """
    vals = logits.float().topk(min(top, logits.shape[-1]), dim=-1).values
    # softmax over the top logits == top probabilities renormalised
    logp = torch.log_softmax(vals, dim=-1)
    return -(logp.exp() * logp).sum(-1)


class FLyVerifier:
    """The FLy baseline: entropy gate plus deferred window, greedy only.

    Attributes:
        name: "fly".
        need: nothing beyond the logits.
        default_k: 15, FLy's draft length.
    """

    name = "fly"
    need: frozenset[str] = frozenset()

    def __init__(self, config: FLyConfig | None = None) -> None:
        self.config = config or FLyConfig()
        self.default_k = self.config.default_k

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        """Decide one round.

        Args:
            proposal: d_1..d_K.
            out: the verify pass; reads ``logits`` ``(K+1, V)``.
            ctx: must be greedy.

        Returns:
            The decision; relaxed mismatches have kind "loose". ``scores`` is empty.

        Raises:
            ConfigError: ``ctx.temperature > 0`` (the deferred window is defined on the
                target's greedy choices; sampling FLy is not implemented).
        """
        if ctx.temperature > 0:
            raise ConfigError("fly is implemented for greedy decoding only; use temperature 0")
        cfg = self.config
        draft = proposal.tokens
        k = len(draft)
        logits = out.logits[: k + 1]
        choice = logits.argmax(-1).tolist()
        match = [draft[i] == choice[i] for i in range(k)]
        entropy: list[float] | None = None
        kinds: list[AcceptKind] = []
        for i in range(k):
            if match[i]:
                kinds.append("strict")
                continue
            if entropy is None:  # only rounds with a mismatch pay for the top-k
                entropy = topk_entropy(logits, cfg.top).tolist()
            window_ok = i + cfg.window < k and all(match[i + 1 : i + 1 + cfg.window])
            ends = draft[i] in ctx.stop_ids or choice[i] in ctx.stop_ids  # the end of the answer is never relaxed
            if entropy[i] >= cfg.theta - 1e-12 and window_ok and not ends and not math.isnan(entropy[i]):
                kinds.append("loose")
                continue
            return Decision(i, int(choice[i]), tuple(kinds))
        return Decision(k, int(choice[k]), tuple(kinds))
