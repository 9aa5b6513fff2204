"""Visual relevance scorers: how visually grounded is the token at each position of a verify pass.

LVSpec (docs/algorithms.md) relaxes verification at the least visually relevant draft
positions. The paper scores a token by the cosine similarity of its hidden state with the visual
tokens' hidden states (mean over the top-N most similar). That premise was not confirmed on the
small models built here, so the scorer is pluggable and every scorer should be validated against
SynthVid's visual/filler word labels with :func:`auc`, beside the :class:`RandomScorer` control.

Row convention: every scorer returns one score per row of the verify pass, ``(K+1,) float32``,
where row i belongs to input i of ``[x_last, d_1..d_K]``; higher means more visually relevant.
Which row a verifier reads for draft token d_i is the verifier's choice (see
``LVSpecConfig.score_row``).

Usage::

    scorer = CosineTopNScorer(CosineTopNConfig(top_n=10))
    s = scorer.score(out, state)          # (K+1,) on the target's device
    print(auc(s_all, is_visual_all))      # validate against word labels
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.types import TargetState, VerifyOutput

#: ``need`` name of the attention-mass output (``VerifyOutput.attn_to_visual``), mean over heads.
NEED_ATTN = "attn_to_visual"
#: ``need`` name of the same output with the max over heads instead of the mean.
NEED_ATTN_MAX = "attn_to_visual_max"
#: ``need`` name of the relevance-layer hidden states (``VerifyOutput.hidden_mid``).
NEED_MID = "mid"

_PROBE_FORMAT = "vidspec-relevance-probe"


@runtime_checkable
class RelevanceScorer(Protocol):
    """Scores the visual relevance of every row of a verify pass.

    Attributes:
        name: short identifier used in reports ("cosine", "attention", "probe", "random").
        need: the target outputs the scorer reads (passed on as the verifier's ``need``).
    """

    name: str
    need: frozenset[str]

    def score(self, out: VerifyOutput, state: TargetState) -> torch.Tensor:
        """Relevance of each input row.

        Returns:
            ``(K+1,) float32`` on the device of ``out.logits``; higher = more visually relevant.
        """
        ...


def _has_video(state: TargetState) -> bool:
    v = state.visual_hidden
    return v is not None and v.shape[0] > 0


def _zeros(out: VerifyOutput) -> torch.Tensor:
    return torch.zeros(out.logits.shape[0], dtype=torch.float32, device=out.logits.device)


def _require(tensor: torch.Tensor | None, field: str, need: str) -> torch.Tensor:
    # A missing output is an engine bug (it did not honour `need`), not a user error.
    if tensor is None:
        raise ValueError(
            f"the relevance scorer needs VerifyOutput.{field}; the target pass must be run with need ⊇ {{{need!r}}}"
        )
    return tensor


@dataclass(frozen=True)
class CosineTopNConfig:
    """Options of the paper's cosine top-N relevance score.

    Attributes:
        top_n: number of most similar visual tokens averaged (paper: 10; 1 and 100 were worse).
            When the video has fewer visual tokens, all of them are averaged.
    """

    top_n: int = 10

    def __post_init__(self) -> None:
        if self.top_n < 1:
            raise ConfigError(f"top_n must be >= 1, got {self.top_n}")


class CosineTopNScorer:
    """s_i = mean of the top-N cosine similarities between h_i and the cached visual states.

    h_i is ``out.hidden_mid[i]`` (layer ``state.relevance_layer``) and the visual states are
    ``state.visual_hidden`` cached at prefill from the same layer. One ``(K+1, d) @ (d, L_vis)``
    product per round, on the target's device. Without a video every score is 0.

    The normalised visual matrix is computed once per request and kept in ``state.extra``.
    """

    name = "cosine"
    need: frozenset[str] = frozenset({NEED_MID})

    def __init__(self, config: CosineTopNConfig | None = None) -> None:
        self.config = config or CosineTopNConfig()

    @staticmethod
    def _normalised_visual(state: TargetState, device: torch.device) -> torch.Tensor:
        # Normalised once per request and kept on the state: the visual states never change
        # after prefill, and normalising 25k x d every round would cost more than the product.
        cached = state.extra.get("cosine_visual_norm")
        if cached is None:
            v = state.visual_hidden
            assert v is not None
            norm = F.normalize(v.to(device=device, dtype=torch.float32), dim=-1)
            cached = norm.to(v.dtype if v.dtype.is_floating_point else torch.float32)
            state.extra["cosine_visual_norm"] = cached
        return cached.to(device)

    def score(self, out: VerifyOutput, state: TargetState) -> torch.Tensor:
        """Cosine top-N relevance of each row.

        Args:
            out: the verify pass; reads ``hidden_mid`` ``(K+1, d)``.
            state: reads ``visual_hidden`` ``(L_vis, d)``.

        Returns:
            ``(K+1,) float32`` in [-1, 1]; zeros when there is no video.
        """
        if not _has_video(state):
            return _zeros(out)
        h = _require(out.hidden_mid, "hidden_mid", NEED_MID)
        assert state.visual_hidden is not None
        vis = self._normalised_visual(state, h.device)
        hn = F.normalize(h.float(), dim=-1).to(vis.dtype)
        sim = hn @ vis.T  # (K+1, L_vis)
        n = min(self.config.top_n, vis.shape[0])
        return sim.topk(n, dim=-1).values.float().mean(-1).to(out.logits.device)


@dataclass(frozen=True)
class AttentionMassConfig:
    """Options of the attention-mass relevance score.

    Attributes:
        heads: how the per-head masses are combined: "mean" (every head alike) or "max" (the most
            visually attentive head).
    """

    heads: Literal["mean", "max"] = "mean"

    def __post_init__(self) -> None:
        if self.heads not in ("mean", "max"):
            raise ConfigError(f"attention heads must be mean or max, got {self.heads!r}")


class AttentionMassScorer:
    """s_i = share of the target's attention from row i that lands on visual positions.

    Reads ``out.attn_to_visual`` ``(K+1,)``: for each verified row, the softmax probability mass
    that the row's query puts on the visual key positions, at the target's relevance layer
    (the eager adapters: the attention of the layer that outputs hidden state
    ``relevance_layer``, see ``HFVideoTarget.attention_layer``), combined over heads by
    ``config.heads``. The target computes it in the verify pass (``need`` ``attn_to_visual`` or
    ``attn_to_visual_max``); a target that cannot (``FastTarget``) is refused when the decoder
    is built. Scores lie in [0, 1]; without a video every score is 0.
    """

    name = "attention"

    def __init__(self, config: AttentionMassConfig | None = None) -> None:
        self.config = config or AttentionMassConfig()
        self.need: frozenset[str] = frozenset({NEED_ATTN_MAX if self.config.heads == "max" else NEED_ATTN})

    def score(self, out: VerifyOutput, state: TargetState) -> torch.Tensor:
        """Attention mass on visual positions of each row, ``(K+1,) float32`` in [0, 1]."""
        if out.attn_to_visual is None:
            no_video = state.visual_positions is None or state.visual_positions.numel() == 0
            if no_video and not _has_video(state):
                return _zeros(out)
        a = _require(out.attn_to_visual, "attn_to_visual", next(iter(self.need)))
        return a.float().clamp(0.0, 1.0).to(out.logits.device)


class RandomScorer:
    """Control scorer: uniform random scores, seeded, independent of the input.

    Each request restarts from ``seed`` (the generator lives on the request's state), so a
    request's scores do not depend on which requests ran before it (resumed evaluations equal
    fresh ones). Reports of a scorer's AUC should show this control beside it (expected AUC 0.5).
    """

    name = "random"
    need: frozenset[str] = frozenset()

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def score(self, out: VerifyOutput, state: TargetState) -> torch.Tensor:
        """``(K+1,) float32`` uniform in [0, 1)."""
        key = f"random_scorer.{self.seed}"
        gen = state.extra.get(key)
        if gen is None:
            gen = state.extra[key] = torch.Generator().manual_seed(self.seed)
        s = torch.rand(out.logits.shape[0], generator=gen)
        return s.to(out.logits.device)


class ProbeScorer:
    """A linear probe on the relevance-layer hidden state: s_i = sigmoid(h_i · w + b).

    Trained by :func:`fit_probe` on hidden states labelled visual / filler (SynthVid's exact word
    labels, or counterfactual no-video passes), it estimates the visual dependence of a token.

    Attributes:
        weight: ``(d,) float32`` probe weights (already divided by the training features' std).
        bias: the probe's intercept.
        metadata: free-form strings saved with the probe (model id, layer, row convention).
    """

    name = "probe"
    need: frozenset[str] = frozenset({NEED_MID})

    def __init__(self, weight: torch.Tensor, bias: float, metadata: dict[str, str] | None = None) -> None:
        if weight.ndim != 1:
            raise ModelError(f"probe weight must be (d,), got {tuple(weight.shape)}")
        self.weight = weight.detach().float().cpu()
        self.bias = float(bias)
        self.metadata = dict(metadata or {})
        self._on: dict[torch.device, torch.Tensor] = {}

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Probe logits of ``(N, d)`` hidden states, ``(N,) float32``."""
        if hidden.shape[-1] != self.weight.shape[0]:
            raise ModelError(
                f"probe was fit on d={self.weight.shape[0]} but hidden states have d={hidden.shape[-1]}"
            )
        w = self._on.get(hidden.device)
        if w is None:
            w = self._on[hidden.device] = self.weight.to(hidden.device)
        return hidden.float() @ w + self.bias

    def score(self, out: VerifyOutput, state: TargetState) -> torch.Tensor:
        """Probability that each row's token is visual, ``(K+1,) float32``."""
        h = _require(out.hidden_mid, "hidden_mid", NEED_MID)
        return torch.sigmoid(self.logits(h)).to(out.logits.device)

    def save(self, path: str | Path) -> None:
        """Write the probe as a safetensors file (tensors ``weight`` and ``bias``; metadata kept)."""
        from safetensors.torch import save_file

        meta = {"format": _PROBE_FORMAT, "version": "1", **self.metadata}
        save_file(
            {"weight": self.weight.contiguous(), "bias": torch.tensor([self.bias])}, str(path), metadata=meta
        )

    @classmethod
    def load(cls, path: str | Path) -> ProbeScorer:
        """Read a probe written by :meth:`save`.

        Raises:
            ModelError: the file is missing or is not a vidspec relevance probe.
        """
        from safetensors import safe_open

        p = Path(path)
        if not p.is_file():
            raise ModelError(f"relevance probe file not found: {p}")
        with safe_open(str(p), framework="pt") as f:
            meta = dict(f.metadata() or {})
            if meta.get("format") != _PROBE_FORMAT or set(f.keys()) != {"weight", "bias"}:
                raise ModelError(f"{p} is not a vidspec relevance probe (format={meta.get('format')!r})")
            weight, bias = f.get_tensor("weight"), f.get_tensor("bias")
        meta.pop("format", None)
        meta.pop("version", None)
        return cls(weight, float(bias.reshape(-1)[0]), meta)


@dataclass(frozen=True)
class ProbeFitConfig:
    """Options of :func:`fit_probe` (L2-regularised logistic regression, full batch, L-BFGS).

    Attributes:
        l2: weight of the L2 penalty on the (standardised) weights.
        max_iter: L-BFGS iterations.
        balanced: weight the classes inversely to their frequency (visual words are ~15-20% of
            tokens, so an unweighted fit leans towards "filler").
    """

    l2: float = 1e-3
    max_iter: int = 200
    balanced: bool = True

    def __post_init__(self) -> None:
        if self.l2 < 0:
            raise ConfigError(f"l2 must be >= 0, got {self.l2}")
        if self.max_iter < 1:
            raise ConfigError(f"max_iter must be >= 1, got {self.max_iter}")


def fit_probe(
    hidden: torch.Tensor,
    labels: torch.Tensor,
    config: ProbeFitConfig | None = None,
    metadata: dict[str, str] | None = None,
) -> ProbeScorer:
    """Fit a logistic-regression relevance probe.

    Deterministic: zero initialisation, full-batch L-BFGS in float64 on the CPU.

    Args:
        hidden: ``(N, d)`` hidden states (any float dtype/device).
        labels: ``(N,) bool`` True where the token is visual.
        config: fit options.
        metadata: strings stored with the probe (e.g. model id, layer).

    Returns:
        The fitted :class:`ProbeScorer`.

    Raises:
        ValueError: shapes disagree or one class is absent.
    """
    cfg = config or ProbeFitConfig()
    x = hidden.detach().to("cpu", torch.float64)
    y = labels.detach().to("cpu").bool()
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(
            f"fit_probe needs hidden (N, d) and labels (N,), got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    n_pos = int(y.sum())
    n_neg = y.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("fit_probe needs both visual and filler examples")
    # Standardise so one L2 weight and the L-BFGS tolerances fit every layer's scale.
    mu = x.mean(0)
    sd = x.std(0).clamp_min(1e-6)
    z = (x - mu) / sd
    yf = y.double()
    if cfg.balanced:
        sample_w = torch.where(y, 0.5 / n_pos, 0.5 / n_neg) * y.numel()
    else:
        sample_w = torch.ones_like(yf)
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=cfg.max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(z @ w + b, yf, weight=sample_w) + cfg.l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        # fold the standardisation into the weights: (x - mu)/sd · w + b = x · (w/sd) + (b - mu·w/sd)
        w_raw = w / sd
        b_raw = b - (mu * w_raw).sum()
    return ProbeScorer(w_raw.float(), float(b_raw), metadata)


def auc(scores: torch.Tensor | list[float], labels: torch.Tensor | list[bool]) -> float:
    """Rank-based ROC AUC (Mann-Whitney U), ties counted as half.

    The probability that a random positive (visual) token scores above a random negative one.

    Args:
        scores: ``(N,)`` scores, higher = more likely positive.
        labels: ``(N,) bool`` True for positives.

    Returns:
        AUC in [0, 1]: 1.0 perfect ranking, 0.0 reversed, 0.5 for constant scores.

    Raises:
        ValueError: shapes disagree or one class is absent.
    """
    s = torch.as_tensor(scores).detach().to("cpu", torch.float64).reshape(-1)
    y = torch.as_tensor(labels).detach().to("cpu").bool().reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"auc: {s.numel()} scores but {y.numel()} labels")
    n_pos = int(y.sum())
    n_neg = y.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("auc needs both positive and negative labels")
    # midranks: tied values share the mean of the ranks they span (1-based)
    _, inverse, counts = torch.unique(s, sorted=True, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    mid = ends - (counts.double() - 1) / 2
    ranks = mid[inverse]
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)
