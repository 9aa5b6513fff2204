"""Strict (lossless) verification: greedy exact match and speculative rejection sampling."""

from __future__ import annotations

import torch

from vidspec.decoding.types import Decision, Proposal, VerifyContext, VerifyOutput


def target_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Turn ``(N, V)`` logits into the sampling distribution (temperature, then nucleus).

    Returns:
        ``(N, V) float32`` probabilities.
    """
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        # keep the smallest prefix with mass >= top_p (the first token always stays)
        drop = (cum - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
    """One token from ``(V,)`` logits: argmax when ``temperature == 0``, else a sample."""
    if temperature <= 0:
        return int(logits.argmax())
    p = target_probs(logits[None], temperature, top_p)[0]
    return int(torch.multinomial(p, 1, generator=generator))


def draft_choice(logits: torch.Tensor, temperature: float, top_p: float,
                 generator: torch.Generator | None) -> tuple[int, torch.Tensor | None]:
    """A drafter's next token from ``(V,)`` logits, and the distribution it came from.

    Greedy (``temperature == 0``) returns ``(argmax, None)``; sampling returns the sampled token and
    its ``(V,) float32`` distribution, which strict rejection sampling needs as q.
    """
    if temperature <= 0:
        return int(logits.argmax()), None
    p = target_probs(logits[None], temperature, top_p)[0]
    return int(torch.multinomial(p, 1, generator=generator)), p


def draft_probs(proposal: Proposal, i: int, like: torch.Tensor) -> torch.Tensor:
    """q_i of draft position ``i`` as ``(V,) float32``; a greedy draft is a point mass on its token."""
    if proposal.probs is not None:
        return proposal.probs[i].to(like.device, torch.float32)
    q = torch.zeros_like(like)
    q[proposal.tokens[i]] = 1.0
    return q


def accept_by_ratio(p: torch.Tensor, q: torch.Tensor, d: int, generator: torch.Generator | None) -> bool:
    """The rejection-sampling test: accept draft token ``d`` with probability min(1, p(d) / q(d)).

    Draws exactly one uniform number from ``generator``, so callers stay in step with each other.
    """
    pd, qd = float(p[d]), float(q[d])
    u = float(torch.rand((), generator=generator))
    return qd > 0 and u < min(1.0, pd / qd)


class StrictVerifier:
    """Lossless verification.

    Greedy (``temperature == 0``): accept d_i while it equals argmax p_{i-1}; the next token is
    the target's argmax at the first mismatch (or after the last draft token). Output is
    token-identical to the target's own greedy decoding.

    Sampling (``temperature > 0``): speculative rejection sampling (Leviathan et al., Chen et
    al.): accept d_i with probability min(1, p(d_i)/q(d_i)); on rejection sample from
    norm(max(p - q, 0)). The emitted tokens are distributed exactly as the target's own samples.
    A greedy drafter (no ``probs``) is treated as a point mass q = onehot(d_i).
    """

    name = "strict"
    need: frozenset[str] = frozenset()

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        draft = proposal.tokens
        k = len(draft)
        if ctx.temperature <= 0:
            if getattr(out, "accept_host", None) is not None and out.logits.shape[0] == k + 1:
                # A fast target computed this very comparison inside its verify step: read its two integers.
                n, nxt = out.greedy()  # type: ignore[attr-defined]
                return Decision(n, nxt, ("strict",) * n)
            choice = out.logits[: k + 1].argmax(-1).tolist()
            n = 0
            while n < k and draft[n] == choice[n]:
                n += 1
            return Decision(n, int(choice[n]), ("strict",) * n)

        p = target_probs(out.logits[: k + 1], ctx.temperature, ctx.top_p)
        gen = ctx.generator
        for i, d in enumerate(draft):
            q = draft_probs(proposal, i, p[i])
            if accept_by_ratio(p[i], q, d, gen):
                continue
            residual = (p[i] - q).clamp_min(0)
            if float(residual.sum()) <= 0:  # p == q: cannot happen after a rejection, guard anyway
                residual = p[i]
            nxt = int(torch.multinomial(residual / residual.sum(), 1, generator=gen))
            return Decision(i, nxt, ("strict",) * i)
        nxt = int(torch.multinomial(p[k], 1, generator=gen))
        return Decision(k, nxt, ("strict",) * k)
