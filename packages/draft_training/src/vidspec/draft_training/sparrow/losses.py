"""Per-step losses of Sparrow distillation and the training-time accept-length proxy.

All functions take the draft's logits and the target's logits at the same ``N`` supervised
positions (``(N, V)``; any float dtype, computed in float32) and return a scalar mean over
positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def forward_kl(draft_logits: torch.Tensor, target_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_T || q_D), the default distillation loss (mass-covering: the draft must put mass
    wherever the target does, which is what greedy and sampled verification reward).

    Args:
        draft_logits: ``(N, V)``.
        target_logits: ``(N, V)`` (no gradient needed).
        temperature: softens both distributions; the loss is scaled by T^2 so its gradient
            size does not depend on T.
    """
    t = temperature
    logq = F.log_softmax(draft_logits.float() / t, dim=-1)
    logp = F.log_softmax(target_logits.float() / t, dim=-1)
    return F.kl_div(logq, logp, log_target=True, reduction="batchmean") * (t * t)


def vispec_loss(draft_logits: torch.Tensor, target_logits: torch.Tensor, l1_weight: float = 10.0,
                rank_weight: float = 0.1, top: int = 10) -> torch.Tensor:
    """ViSpec's distillation loss: ``l1_weight * L1(softmax) + rank_weight * top-k ranking``.

    The L1 term is the sum over the vocabulary of |p_T - q_D|, averaged over positions. [choice]
    The ranking term is a pairwise logistic loss over the target's ``top`` tokens: for every pair
    (i, j) with p_T(i) > p_T(j), softplus(-(log q_D(i) - log q_D(j))), averaged over pairs and
    positions, so the draft learns the target's order among its best candidates.
    """
    p = F.softmax(target_logits.float(), dim=-1)
    logq = F.log_softmax(draft_logits.float(), dim=-1)
    l1 = (p - logq.exp()).abs().sum(-1).mean()
    k = min(top, p.shape[-1])
    idx = p.topk(k, dim=-1).indices  # (N, k), ordered by target probability
    lq = logq.gather(-1, idx)
    diff = lq[:, :, None] - lq[:, None, :]  # (N, k, k): log q_i - log q_j
    upper = torch.ones(k, k, dtype=torch.bool, device=p.device).triu(1)
    rank = F.softplus(-diff[:, upper]).mean() if k > 1 else l1 * 0.0
    return l1_weight * l1 + rank_weight * rank


def feature_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """EAGLE-1's smooth-L1 regression of ``(N, d)`` draft states onto the target's states."""
    return F.smooth_l1_loss(pred.float(), target.float())


def top1_agreement(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """Share of positions where the draft's argmax equals the target's (the greedy accept rate)."""
    if draft_logits.shape[0] == 0:
        return draft_logits.new_zeros(())
    return (draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()


def simulated_accept_length(acc: list[float] | torch.Tensor) -> float:
    """``1 + Σ_k Π_{i<=k} acc_i`` from per-step top-1 agreement (docs/algorithms.md, "Metrics").

    With agreement acc_i at recursive step i, the expected tokens per verify pass of a chain of
    len(acc) drafts is approximated by this sum (independence assumed); the 1 is the bonus token.
    """
    total, prod = 1.0, 1.0
    for a in (acc.tolist() if isinstance(acc, torch.Tensor) else acc):
        prod *= float(a)
        total += prod
    return total


def step_weights(steps: int, weights: list[float] | None = None, decay: float | None = None) -> list[float]:
    """Weights w_s of the MTP steps: explicit ``weights``, or ``decay**s`` (EAGLE-3 uses 0.8), or all 1.

    Raises:
        ValueError: ``weights`` of the wrong length, or negative.
    """
    if weights is not None:
        if len(weights) != steps:
            raise ValueError(f"step_weights has {len(weights)} entries for {steps} MTP steps")
        if any(w < 0 for w in weights):
            raise ValueError(f"step_weights must be >= 0, got {weights}")
        return [float(w) for w in weights]
    if decay is not None:
        return [float(decay) ** s for s in range(steps)]
    return [1.0] * steps
