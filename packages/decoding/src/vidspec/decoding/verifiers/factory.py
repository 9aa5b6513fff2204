"""Build a verifier by name from flat options, plus the random-relaxation control.

Verifier names (a decoding method names its verifier in :class:`vidspec.decoding.methods.MethodSpec`):

- ``strict`` (alias ``sd``): :class:`StrictVerifier` (lossless); no options.
- ``lvspec``: :class:`LVSpecVerifier` without PST. Options: :class:`LVSpecConfig` fields (but
  ``pst``), :class:`RelevanceOptions`, :class:`ProtectOptions`.
- ``lvspec-pst``: the same with PST on.
- ``fly``: :class:`FLyVerifier`; options: :class:`FLyConfig` fields.
- ``random``: :class:`RandomRelaxationVerifier`, loose positions at random (the ablation's
  control); options: :class:`RandomRelaxationConfig` fields, :class:`ProtectOptions`.

An option passed as ``None`` means "the default", so a CLI can forward every flag. Protection
(on by default) needs the target's ``tokenizer=`` or explicit ``protected_ids=``.

Usage::

    verifier = build_verifier("lvspec-pst", lam=0.7, top_n=10, tokenizer=target.tokenizer)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import Decision, Proposal, Verifier, VerifyContext, VerifyOutput
from vidspec.decoding.verifiers.fly import FLyConfig, FLyVerifier
from vidspec.decoding.verifiers.lvspec import (
    DEFAULT_PROTECTED_WORDS,
    LoosePolicy,
    LVSpecConfig,
    LVSpecVerifier,
    Predicate,
    loose_walk,
    protected_token_ids,
)
from vidspec.decoding.verifiers.relevance import (
    AttentionMassConfig,
    AttentionMassScorer,
    CosineTopNConfig,
    CosineTopNScorer,
    ProbeScorer,
    RandomScorer,
    RelevanceScorer,
)
from vidspec.decoding.verifiers.strict import StrictVerifier


@dataclass(frozen=True)
class RelevanceOptions:
    """Which relevance scorer LVSpec uses.

    Attributes:
        scorer: "cosine" (the paper's top-N cosine), "attention" (attention mass on visual
            positions), "probe" (a linear probe from ``probe_path``) or "random" (control).
        top_n: N of the cosine scorer.
        probe_path: safetensors file written by ``ProbeScorer.save`` (scorer "probe").
        scorer_seed: seed of the random scorer.
        attention_heads: scorer "attention": "mean" or "max" of the per-head masses. The layer
            is the target's ``relevance_layer`` (``load_target(..., relevance_layer=)``).
    """

    scorer: Literal["cosine", "attention", "probe", "random"] = "cosine"
    top_n: int = 10
    probe_path: str | None = None
    scorer_seed: int = 0
    attention_heads: Literal["mean", "max"] = "mean"

    def __post_init__(self) -> None:
        if self.scorer not in ("cosine", "attention", "probe", "random"):
            raise ConfigError(f"scorer must be cosine, attention, probe or random, got {self.scorer!r}")
        if self.scorer == "probe" and not self.probe_path:
            raise ConfigError("scorer='probe' needs probe_path=")
        CosineTopNConfig(self.top_n)  # validates top_n
        AttentionMassConfig(self.attention_heads)  # validates attention_heads

    def build(self) -> RelevanceScorer:
        """The scorer these options describe."""
        if self.scorer == "cosine":
            return CosineTopNScorer(CosineTopNConfig(self.top_n))
        if self.scorer == "attention":
            return AttentionMassScorer(AttentionMassConfig(self.attention_heads))
        if self.scorer == "probe":
            assert self.probe_path is not None
            return ProbeScorer.load(self.probe_path)
        return RandomScorer(self.scorer_seed)


@dataclass(frozen=True)
class ProtectOptions:
    """Protected tokens: always verified strictly (negations, comparatives, numbers).

    Attributes:
        protect: turn protection on (``--protect/--no-protect``).
        protected_words: the protected words (each mapped to ids by ``protected_token_ids``).
        protect_digits: also protect every token containing a digit.
        protect_split_words: words with no single-token form: "skip" them or protect "all"
            their pieces (see ``protected_token_ids``).
    """

    protect: bool = True
    protected_words: tuple[str, ...] = DEFAULT_PROTECTED_WORDS
    protect_digits: bool = True
    protect_split_words: Literal["skip", "all"] = "skip"

    def __post_init__(self) -> None:
        if self.protect_split_words not in ("skip", "all"):
            raise ConfigError(f"protect_split_words must be skip or all, got {self.protect_split_words!r}")

    def ids(self, tokenizer: Any, protected_ids: Iterable[int] | None) -> frozenset[int]:
        """The protected ids: ``protected_ids`` if given, else built from ``tokenizer``."""
        if not self.protect:
            return frozenset()
        if protected_ids is not None:
            return frozenset(int(i) for i in protected_ids)
        if tokenizer is None:
            raise ConfigError(
                "protected tokens need the target's tokenizer: pass tokenizer= or protected_ids=, or protect=False"
            )
        return protected_token_ids(
            tokenizer, self.protected_words, self.protect_digits, self.protect_split_words
        )


@dataclass(frozen=True)
class RandomRelaxationConfig:
    """Options of :class:`RandomRelaxationVerifier`.

    Attributes:
        rate: probability that a draft position is loose (set it to LVSpec's λ for the control).
        seed: seed of the per-request generator (each request restarts from it, so results do
            not depend on request order).
        predicate: the loose-acceptance predicate, as in LVSpec.
        top_k: k of the "topk" predicate.
        eps: ε of the "prob" predicate.
    """

    rate: float = 0.7
    seed: int = 0
    predicate: Predicate = "always"
    top_k: int = 5
    eps: float = 0.01

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"rate must be in [0, 1], got {self.rate}")
        # reuse LVSpec's checks of the shared fields
        LVSpecConfig(predicate=self.predicate, top_k=self.top_k, eps=self.eps)


class RandomRelaxationVerifier:
    """Control for the λ ablation: loose positions drawn at random, relevance ignored.

    Each draft position is loose with probability ``rate`` (Bernoulli, seeded per request in
    ``ctx.memory``); the rest is LVSpec's walk (predicate, protected tokens), without PST.

    Attributes:
        name: "random".
        need: nothing beyond the logits.
    """

    name = "random"
    need: frozenset[str] = frozenset()
    _memory_key = "random.generator"

    def __init__(self, config: RandomRelaxationConfig | None = None, protected: Iterable[int] = ()) -> None:
        self.config = config or RandomRelaxationConfig()
        self.protected = frozenset(int(i) for i in protected)

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        """Decide one round (greedy or sampling, as :func:`loose_walk`)."""
        cfg = self.config
        gen = ctx.memory.get(self._memory_key)
        if gen is None:
            gen = ctx.memory[self._memory_key] = torch.Generator().manual_seed(cfg.seed)
        k = len(proposal.tokens)
        loose = (torch.rand(k, generator=gen) < cfg.rate).tolist()
        policy = LoosePolicy(loose, [False] * k, self.protected, cfg.predicate, cfg.top_k, cfg.eps)
        return loose_walk(proposal, out, ctx, policy)


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _take(cls: type, options: dict[str, Any], exclude: frozenset[str] = frozenset()) -> Any:
    names = _fields(cls) - exclude
    return cls(**{k: options.pop(k) for k in list(options) if k in names})


def _strict(opts: dict[str, Any], tokenizer: Any, protected_ids: Iterable[int] | None) -> Verifier:
    return StrictVerifier()


def _lvspec(pst: bool) -> Callable[[dict[str, Any], Any, Iterable[int] | None], Verifier]:
    def build(opts: dict[str, Any], tokenizer: Any, protected_ids: Iterable[int] | None) -> Verifier:
        if "pst" in opts:
            raise ConfigError("choose PST by the verifier name (lvspec or lvspec-pst), not pst=")
        config = dataclasses.replace(_take(LVSpecConfig, opts, exclude=frozenset({"pst"})), pst=pst)
        scorer = _take(RelevanceOptions, opts).build()
        protect = _take(ProtectOptions, opts)
        return LVSpecVerifier(config, scorer, protect.ids(tokenizer, protected_ids))

    return build


def _fly(opts: dict[str, Any], tokenizer: Any, protected_ids: Iterable[int] | None) -> Verifier:
    return FLyVerifier(_take(FLyConfig, opts))


def _random(opts: dict[str, Any], tokenizer: Any, protected_ids: Iterable[int] | None) -> Verifier:
    config = _take(RandomRelaxationConfig, opts)
    protect = _take(ProtectOptions, opts)
    return RandomRelaxationVerifier(config, protect.ids(tokenizer, protected_ids))


#: Verifier factories by name: each takes the options it knows out of the dict it gets.
VERIFIERS: Mapping[str, Callable[[dict[str, Any], Any, Iterable[int] | None], Verifier]] = MappingProxyType({
    "strict": _strict,
    "sd": _strict,
    "lvspec": _lvspec(pst=False),
    "lvspec-pst": _lvspec(pst=True),
    "fly": _fly,
    "random": _random,
})


def build_verifier(
    method: str,
    *,
    tokenizer: Any = None,
    protected_ids: Iterable[int] | None = None,
    **options: Any,
) -> Verifier:
    """Build a verifier by name.

    Args:
        method: a name in :data:`VERIFIERS`.
        tokenizer: the target's tokenizer, for protected tokens (lvspec*, random).
        protected_ids: explicit protected ids (overrides ``tokenizer``).
        **options: fields of the verifier's option dataclasses (see the module docstring);
            ``None`` values mean the default.

    Returns:
        The verifier.

    Raises:
        ConfigError: unknown verifier, unknown or invalid option.
    """
    if method not in VERIFIERS:
        raise ConfigError(f"unknown verification method {method!r}; choose one of {', '.join(VERIFIERS)}")
    opts = {k: v for k, v in options.items() if v is not None}
    if isinstance(opts.get("protected_words"), list):
        opts["protected_words"] = tuple(opts["protected_words"])
    verifier = VERIFIERS[method](opts, tokenizer, protected_ids)
    if opts:
        raise ConfigError(f"method {method!r} does not take option(s): {', '.join(sorted(opts))}")
    return verifier
