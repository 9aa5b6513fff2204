"""The registry of decoding methods (``--method``) and :func:`build_decoder`, which assembles them.

Each method is one :class:`MethodSpec`: which drafter it uses, which verifier, which decoding loop
(a chain of K tokens, or a dynamic tree), its default K, and whether it is lossless or greedy only.
:data:`METHODS` maps names to specs in display order; the CLIs, the evaluation runner, CI and the
docs all read it, and every subset they need (the lossless methods, the Sparrow methods, ...) is
derived from it with :func:`method_names`.

=====================  ============  ==========================  =====  ====
method                 drafter       verifier                    loop   K
=====================  ============  ==========================  =====  ====
ar                     none          strict                      chain  0
sd                     draft VLM     strict (lossless)           chain  4
lvspec                 draft VLM     LVSpec                      chain  4
lvspec-pst             draft VLM     LVSpec + PST                chain  4
fly                    draft VLM     FLy (greedy only)           chain  15
sparrow                Sparrow       strict (lossless)           chain  4
sparrow-lvspec-pst     Sparrow       LVSpec + PST                chain  4
tree-sd                draft VLM     strict (lossless)           tree   -
tree-sparrow           Sparrow       strict (lossless)           tree   -
=====================  ============  ==========================  =====  ====

How a method decodes (K, LVSpec's knobs, the tree shape, the engine) is a
:class:`~vidspec.decoding.config.DecodeConfig`.

**Tree methods** draft an EAGLE-2 dynamic tree each round and verify all of it in one target pass
(:class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`); strict verification keeps the longest
path the target itself would produce, so greedy output is token-identical to AR. Their shape is
:class:`~vidspec.decoding.config.TreeShape`; ``k`` does not apply to them. They are greedy only: a
temperature above 0 is refused before models load. On the fast engine the target's ``max_tree``
must hold the verify tree (raised to fit when this module wraps the target).

For the Sparrow methods ``draft`` is a Sparrow release folder (or a loaded
:class:`~vidspec.decoding.drafters.sparrow.SparrowDraftModel` or a Sparrow drafter); a release made for
another target is refused unless ``allow_target_mismatch``.

Engines: ``auto`` (the default) is ``fast`` on CUDA and ``eager`` elsewhere, and falls back to eager with
one logged line where the fast engine cannot serve the model or the options
(:meth:`~vidspec.decoding.config.DecodeConfig.resolve`); ``eager`` runs the family adapters as loaded (the
reference); ``fast`` wraps the target
(and a draft VLM) in :class:`~vidspec.decoding.fast.FastTarget` (static KV cache, CUDA graphs on
CUDA; plain FastLM steps on CPU) and uses the fast drafters and strict verifier. Loose verifiers
are the same classes on either engine. Greedy output of the strict methods is token-identical on both.

A FastTarget holds one live request: reuse one per loaded adapter for decoders that run one after
another (:func:`as_fast`), never one FastTarget as both target and draft.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from vidspec.decoding.config import DEFAULT_FAST_MAX_LEN, DecodeConfig, TreeShape
from vidspec.decoding.drafters import ModelDrafter, NoDrafter
from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.loops.chain import AdaptiveDraftPolicy, SpeculativeDecoder
from vidspec.decoding.models import check_compatible, load_target
from vidspec.decoding.models.tiny import TINY_MODELS
from vidspec.decoding.verifiers.strict import StrictVerifier

if TYPE_CHECKING:  # pragma: no cover
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

log = logging.getLogger(__name__)

DrafterKind = Literal["none", "vlm", "sparrow"]
VerifierKind = Literal["strict", "lvspec", "lvspec-pst", "fly"]
Loop = Literal["chain", "tree"]


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method: what drafts, what verifies, how the rounds run.

    Attributes:
        name: the ``--method`` name.
        summary: one line for help texts and reports.
        drafter: "none" (autoregressive), "vlm" (a smaller VLM of the target's family, ``--draft``)
            or "sparrow" (a Sparrow draft release, ``--sparrow``).
        verifier: the verifier's name in :func:`vidspec.decoding.verifiers.factory.build_verifier`:
            "strict", "lvspec", "lvspec-pst" or "fly".
        loop: "chain" (K draft tokens per round, :class:`SpeculativeDecoder`) or "tree" (a dynamic
            draft tree per round, :class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`).
        default_k: draft tokens per round when the config leaves ``k`` unset (0 for ar; None for
            tree methods, whose round length is the tree depth).
        lossless: greedy output is token-identical to the target's own (strict verification).
        greedy_only: a temperature above 0 is refused.
    """

    name: str
    summary: str
    drafter: DrafterKind
    verifier: VerifierKind
    loop: Loop = "chain"
    default_k: int | None = 4
    lossless: bool = False
    greedy_only: bool = False

    @property
    def draft_flag(self) -> str | None:
        """The command-line flag that names this method's draft (None for ar)."""
        return {"none": None, "vlm": "--draft", "sparrow": "--sparrow"}[self.drafter]

    @property
    def uses_relevance(self) -> bool:
        """Whether the verifier scores visual relevance (``--scorer`` and friends apply)."""
        return self.verifier in ("lvspec", "lvspec-pst")

    @property
    def is_tree(self) -> bool:
        """Whether the method drafts a tree per round."""
        return self.loop == "tree"


def _spec(*args: Any, **kwargs: Any) -> tuple[str, MethodSpec]:
    spec = MethodSpec(*args, **kwargs)
    return spec.name, spec


#: The registry: every ``--method``, in display order (AR, the baseline, first).
METHODS: Mapping[str, MethodSpec] = MappingProxyType(dict([
    _spec("ar", "autoregressive decoding, the baseline", "none", "strict", default_k=0, lossless=True),
    _spec("sd", "speculative decoding with a draft VLM, strict verification", "vlm", "strict", lossless=True),
    _spec("lvspec", "draft VLM, LVSpec loose verification of visually irrelevant tokens", "vlm", "lvspec"),
    _spec("lvspec-pst", "draft VLM, LVSpec with position-shift tolerance", "vlm", "lvspec-pst"),
    _spec("fly", "draft VLM, FLy text-only loose verification", "vlm", "fly", default_k=15, greedy_only=True),
    _spec("sparrow", "Sparrow draft, strict verification", "sparrow", "strict", lossless=True),
    _spec("sparrow-lvspec-pst", "Sparrow draft, LVSpec with position-shift tolerance", "sparrow", "lvspec-pst"),
    _spec("tree-sd", "draft VLM grows a dynamic tree, strict verification", "vlm", "strict", loop="tree",
          default_k=None, lossless=True, greedy_only=True),
    _spec("tree-sparrow", "Sparrow draft grows a dynamic tree, strict verification", "sparrow", "strict",
          loop="tree", default_k=None, lossless=True, greedy_only=True),
]))


def methods_table() -> str:
    """The registry as a Markdown table (method, drafter, verifier, loop, default K, lossless, greedy only).

    Docs and help texts print this rather than keep their own list; a test keeps the table in this
    module's docstring in step with it.
    """
    drafter = {"none": "none", "vlm": "draft VLM", "sparrow": "Sparrow"}
    rows = ["| method | drafter | verifier | loop | K | lossless | greedy only |", "|---|---|---|---|---|---|---|"]
    for s in METHODS.values():
        k = "-" if s.default_k is None else str(s.default_k)
        rows.append(f"| {s.name} | {drafter[s.drafter]} | {s.verifier} | {s.loop} | {k} | "
                    f"{'yes' if s.lossless else 'no'} | {'yes' if s.greedy_only else 'no'} |")
    return "\n".join(rows)


def get_method(name: str) -> MethodSpec:
    """The spec of method ``name``; a ConfigError listing the choices if unknown."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r} (choose from {', '.join(METHODS)})") from None


def method_names(*, drafter: DrafterKind | None = None, lossless: bool | None = None, loop: Loop | None = None,
                 relevance: bool | None = None) -> tuple[str, ...]:
    """Names of the registered methods matching every criterion given, in registry order.

    Example: ``method_names(drafter="sparrow")`` are the methods that need ``--sparrow``;
    ``method_names(lossless=True)`` those whose greedy output equals AR's.
    """
    return tuple(s.name for s in METHODS.values()
                 if (drafter is None or s.drafter == drafter) and (lossless is None or s.lossless == lossless)
                 and (loop is None or s.loop == loop) and (relevance is None or s.uses_relevance == relevance))


#: The FLy verifier's own options (``loose=`` extras); LVSpec's knobs do not apply to it.
FLY_OPTIONS = frozenset({"theta", "window", "top", "default_k"})
#: [choice] The PST methods let PST act on the lowest 90% of relevance scores: with the default
#: ``always`` predicate the lowest λ (70%) are accepted anyway, so PST works in the band between
#: and the most visual 10% of positions stay strict (docs/algorithms.md, PST).
DEFAULT_PST_LAM = 0.9
#: ``fast_options`` keys, passed to :class:`~vidspec.decoding.fast.FastTarget`.
FAST_OPTIONS = frozenset({"max_len", "graphs", "compile", "prefill_chunk", "fast_vision", "bucket", "max_tree",
                          "fuse", "kernels", "compile_mode", "gemv"})


def default_draft(target: str) -> str | None:
    """The built-in draft of a built-in tiny target, else None."""
    name = f"{target}-draft"
    return name if name in TINY_MODELS else None


def check_fast_options(fast_options: dict[str, Any] | None) -> None:
    """A ConfigError if ``fast_options`` holds a key FastTarget does not take."""
    unknown = sorted(set(fast_options or {}) - FAST_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown fast engine option(s) {', '.join(unknown)} "
                          f"(choose from {', '.join(sorted(FAST_OPTIONS))})")


def tree_fast_options(fast_options: dict[str, Any] | None, total_tokens: int) -> dict[str, Any]:
    """``fast_options`` with ``max_tree`` raised to hold a verify tree of ``total_tokens + 1`` nodes.

    A ``max_tree`` given in ``fast_options`` is kept as it is (too small is refused by
    :func:`build_decoder`).
    """
    from vidspec.decoding.fast.target import DEFAULT_MAX_TREE

    opts = dict(fast_options or {})
    if "max_tree" not in opts and total_tokens + 1 > DEFAULT_MAX_TREE:
        opts["max_tree"] = total_tokens + 1
    return opts


def is_fast(model) -> bool:
    """Whether ``model`` is a :class:`~vidspec.decoding.fast.FastTarget` (without importing the fast path)."""
    mod = sys.modules.get("vidspec.decoding.fast.target")
    return mod is not None and isinstance(model, mod.FastTarget)


def as_fast(model, fast_options: dict[str, Any] | None = None):
    """``model`` as a :class:`~vidspec.decoding.fast.FastTarget` (a FastTarget is returned as is).

    Each call on an eager adapter allocates a new static KV cache (and, on CUDA, new graphs):
    wrap a loaded adapter once and pass the wrapper to every decoder that runs on it.
    """
    if is_fast(model):
        return model
    from vidspec.decoding.fast import FastTarget

    opts = {"max_len": DEFAULT_FAST_MAX_LEN, **(fast_options or {})}
    return FastTarget(model, **opts)


def sparrow_drafter_class(engine: str) -> type:
    """The Sparrow drafter class of ``engine`` (constructor and ``from_pretrained`` as SparrowDrafter's).

    The eager engine uses :class:`~vidspec.decoding.drafters.sparrow.SparrowDrafter`; the fast engine its
    static-cache, CUDA-graph subclass :class:`~vidspec.decoding.fast.sparrow_drafter.FastSparrowDrafter`
    (identical proposals; on CPU it runs without graphs).
    """
    DecodeConfig(engine=engine)  # type: ignore[arg-type] - validates the name
    if engine == "fast":
        from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter

        return FastSparrowDrafter
    from vidspec.decoding.drafters.sparrow import SparrowDrafter

    return SparrowDrafter


def build_verifier_for(method: str, target, loose: dict[str, Any] | None, engine: str = "eager"):
    """The verifier of ``method`` for ``target``; ``loose``: verifier options (each verifier takes its share)."""
    spec = get_method(method)
    if spec.verifier == "strict":
        if engine == "fast":
            from vidspec.decoding.fast import FastStrictVerifier

            return FastStrictVerifier()
        return StrictVerifier()
    from vidspec.decoding.verifiers.factory import build_verifier

    opts = dict(loose or {})
    if spec.verifier == "fly":
        # FLy is text-only and has its own knobs; the LVSpec options do not apply to it.
        return build_verifier("fly", **{k: v for k, v in opts.items() if k in FLY_OPTIONS})
    opts = {k: v for k, v in opts.items() if k not in FLY_OPTIONS}
    if spec.verifier == "lvspec":
        opts.pop("pst_window", None)
        opts.pop("pst_lam", None)
    elif opts.get("pst_lam") is None:
        lam = 0.7 if opts.get("lam") is None else opts["lam"]
        # λ = 0 means strict verification, PST included; otherwise PST reaches up to the 90% band.
        opts["pst_lam"] = 0.0 if lam == 0 else max(lam, DEFAULT_PST_LAM)
    return build_verifier(spec.verifier, tokenizer=target.tokenizer, **opts)


@dataclass(frozen=True)
class _Build:
    """What every drafter factory gets: the (loaded) target, the draft argument and the options."""

    spec: MethodSpec
    target: Any
    draft: Any
    config: DecodeConfig
    fast_options: dict[str, Any] | None
    device: str
    dtype: str | None
    max_frames: int | None
    temperature: float
    allow_target_mismatch: bool

    @property
    def fast(self) -> bool:
        return self.config.engine == "fast"

    @property
    def sparrow_options(self) -> dict[str, Any]:
        """The fast Sparrow drafters' share of the engine options: ``compile`` (when given, the target's
        choice holds for the draft too, so ``compile=False`` leaves nothing of the run to torch.compile)."""
        if not self.fast or "compile" not in (self.fast_options or {}):
            return {}
        return {"compile": self.fast_options["compile"]}  # type: ignore[index]


def build_decoder(
    method: str,
    *,
    target: str | Any,
    draft: str | Any | None = None,
    config: DecodeConfig | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    max_frames: int | None = None,
    temperature: float = 0.0,
    allow_target_mismatch: bool = False,
    loose: dict[str, Any] | None = None,
    fast_options: dict[str, Any] | None = None,
    tree: TreeShape | dict[str, Any] | None = None,
    **overrides: Any,
) -> SpeculativeDecoder | TreeSpeculativeDecoder:
    """Load models (or take loaded adapters) and assemble the decoder of ``method`` (see :data:`METHODS`).

    Args:
        method: a registered method name.
        target: a model name or folder, or a loaded adapter / FastTarget (used as is).
        draft: the draft VLM (name or adapter) or the Sparrow draft (release folder, model or drafter);
            None takes a tiny target's built-in draft VLM.
        config: how to decode (default ``DecodeConfig()``); ``overrides`` replace single fields,
            e.g. ``build_decoder("sd", target=t, k=6, engine="fast")``.
        device, dtype, max_frames: how models named by string are loaded.
        temperature: the drafter's default sampling temperature. ``generate`` and ``stream`` replace
            it with the request's for the call; a greedy-only method refuses a temperature above 0.
        allow_target_mismatch: use a Sparrow draft distilled from another target.
        loose: extra verifier options over the config's (e.g. FLy's ``theta``, LVSpec's ``quantile``).
        fast_options: extra :class:`~vidspec.decoding.fast.FastTarget` keywords over the config's
            (``graphs``, ``bucket``, ``max_tree``, ...), for the wrappers this call makes.
        tree: the tree shape, replacing the config's ``tree_*`` fields (a TreeShape or a dict).

    Returns:
        A :class:`SpeculativeDecoder`, or for the tree methods a
        :class:`~vidspec.decoding.loops.TreeSpeculativeDecoder` (same ``generate``/``stream`` calls).

    Raises:
        ConfigError: unknown method or option, missing draft, bad K or tree shape, a temperature
            above 0 for a greedy-only method, a FastTarget given as both target and draft or whose
            ``max_tree`` cannot hold the tree.
        ModelError: models that cannot be loaded or do not fit together.
    """
    spec = get_method(method)
    if tree is not None:
        shape = tree if isinstance(tree, TreeShape) else TreeShape.from_dict(tree)
        overrides.update(tree_total=shape.total_tokens, tree_depth=shape.depth, tree_top_k=shape.top_k)
    unknown = sorted(set(overrides) - set(DecodeConfig.field_names()))
    if unknown:
        raise ConfigError(f"build_decoder got unknown option(s) {', '.join(unknown)}")
    cfg = (config or DecodeConfig()).replace(**overrides)
    check_fast_options(fast_options)
    if spec.greedy_only and temperature > 0:
        # Checked here, before models load, not at the first round.
        raise ConfigError(f"method {method} is implemented for greedy decoding only; use temperature 0")
    if spec.drafter == "sparrow" and draft is None:
        raise ConfigError(f"method {method} needs a Sparrow draft release (--sparrow DIR)")
    if cfg.draft_vocab and spec.drafter != "sparrow":
        raise ConfigError(f"--draft-vocab applies to the Sparrow methods, not to {method}")
    tgt = target if not isinstance(target, str) else load_target(
        target, device=device, dtype=dtype, max_frames=max_frames, relevance_layer=cfg.relevance_layer)
    auto = cfg.engine == "auto"
    if auto:
        cfg, why = cfg.resolve(getattr(tgt, "device", device), spec.uses_relevance)
        if is_fast(tgt) and cfg.engine == "eager":  # a FastTarget given: its engine is fast
            cfg, why = cfg.replace(engine="fast"), None
        if why:
            log.warning("engine auto: running the eager engine (%s)", why)
    fast_opts = None
    if cfg.engine == "fast":
        fast_opts = {**(cfg.fast_options() or {}), **(fast_options or {})}
        if spec.is_tree:
            fast_opts = tree_fast_options(fast_opts, cfg.tree_total)
        try:
            tgt = as_fast(tgt, fast_opts)
        except (NotImplementedError, ValueError, RuntimeError) as e:
            if not auto:
                raise
            # The fast engine cannot hold this model (e.g. sliding-window layers): the eager reference can.
            log.warning("engine auto: running the eager engine (the fast engine cannot serve %s: %s)",
                        getattr(tgt, "name", "this model"), str(e).splitlines()[0] if str(e) else type(e).__name__)
            cfg, fast_opts = cfg.replace(engine="eager"), None
    b = _Build(spec, tgt, draft, cfg, fast_opts, device, dtype, max_frames, temperature, allow_target_mismatch)
    if spec.is_tree:
        return _tree_decoder(b)
    verifier = build_verifier_for(method, tgt, {**cfg.loose_options(), **(loose or {})}, cfg.engine)
    k = cfg.k if cfg.k is not None else getattr(verifier, "default_k", spec.default_k)
    if spec.drafter == "none":
        k = 0
    policy = AdaptiveDraftPolicy(draft_cost=cfg.draft_cost) if cfg.adaptive and k > 0 else None
    return SpeculativeDecoder(tgt, _CHAIN_DRAFTERS[spec.drafter](b), verifier, k=k, method=method,
                              device_rounds=cfg.device_rounds, adaptive=policy, engine=cfg.engine)


def _draft_vlm(b: _Build):
    """The draft VLM of a drafting method: ``draft`` (a name or a loaded model) or the target's built-in draft."""
    tgt, draft = b.target, b.draft
    if draft is None:
        draft = default_draft(tgt.name)
        if draft is None:
            raise ConfigError(f"method {b.spec.name} needs --draft (a smaller model of the same family as {tgt.name})")
    dm = draft if not isinstance(draft, str) else load_target(draft, device=b.device, dtype=b.dtype,
                                                              max_frames=b.max_frames)
    if dm.family != tgt.family:
        raise ModelError(f"draft {dm.name!r} is a {dm.family} model but target {tgt.name!r} is {tgt.family}")
    check_compatible(tgt, dm)
    if dm is tgt and is_fast(tgt):
        # One FastTarget holds one live request: the drafter's prefill would overwrite the target's cache.
        raise ConfigError(f"the target and the draft are one FastTarget ({tgt.name!r}); give the draft its own")
    return dm


def _no_drafter(b: _Build):
    return NoDrafter()


def _vlm_drafter(b: _Build) -> ModelDrafter:
    dm = _draft_vlm(b)
    if b.fast:
        from vidspec.decoding.fast import FastModelDrafter

        # A module used as target and draft gets a second FastTarget (as_fast always wraps an adapter).
        return FastModelDrafter(as_fast(dm, b.fast_options), temperature=b.temperature)
    return ModelDrafter(dm, temperature=b.temperature)


def _sparrow_drafter(b: _Build):
    """A Sparrow chain drafter from a release folder, a draft model or a drafter (used as is)."""
    from vidspec.decoding.drafters.sparrow import SparrowDrafter, SparrowDraftModel, load_draft_vocab

    cls = sparrow_drafter_class(b.config.engine)
    draft, draft_vocab = b.draft, b.config.draft_vocab
    if isinstance(draft, (SparrowDrafter, cls)):
        if draft_vocab:
            raise ConfigError("draft_vocab applies when the Sparrow draft is a release or a model, not a drafter")
        return draft
    if isinstance(draft, SparrowDraftModel):
        head_ids = load_draft_vocab(draft, draft_vocab) if draft_vocab else None
        return cls(draft, temperature=b.temperature, allow_target_mismatch=b.allow_target_mismatch,
                   head_ids=head_ids, **b.sparrow_options)
    return cls.from_pretrained(str(draft), b.target, temperature=b.temperature,
                               allow_target_mismatch=b.allow_target_mismatch, draft_vocab=draft_vocab,
                               **b.sparrow_options)


def _tree_vlm_drafter(b: _Build):
    """The draft VLM grows its tree in FastTarget tree sessions on either engine (TreeModelDrafter wraps an
    eager adapter itself); on the fast engine it gets this call's options."""
    from vidspec.decoding.fast.tree_drafter import TreeModelDrafter

    dm = _draft_vlm(b)
    return TreeModelDrafter(as_fast(dm, b.fast_options) if b.fast else dm)


def _tree_sparrow_drafter(b: _Build):
    """A tree Sparrow drafter from a release folder, a Sparrow draft model or a TreeSparrowDrafter (as is).

    On the fast engine a release or a model becomes a :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`.
    """
    from vidspec.decoding.drafters.sparrow import SparrowDraftModel, load_draft_vocab
    from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
    from vidspec.decoding.fast.sparrow_tree_drafter import FastTreeSparrowDrafter

    cls = FastTreeSparrowDrafter if b.fast else TreeSparrowDrafter
    draft, draft_vocab = b.draft, b.config.draft_vocab
    if isinstance(draft, TreeSparrowDrafter):
        if draft_vocab:
            raise ConfigError("draft_vocab applies when the Sparrow draft is a release or a model, not a drafter")
        return draft
    if isinstance(draft, SparrowDraftModel):
        head_ids = load_draft_vocab(draft, draft_vocab) if draft_vocab else None
        return cls(draft, allow_target_mismatch=b.allow_target_mismatch, head_ids=head_ids, **b.sparrow_options)
    if not isinstance(draft, (str, Path)):
        raise ConfigError(f"method tree-sparrow needs a Sparrow release folder, a SparrowDraftModel or a "
                          f"TreeSparrowDrafter, not a {type(draft).__name__}")
    return cls.from_pretrained(str(draft), b.target, allow_target_mismatch=b.allow_target_mismatch,
                               draft_vocab=draft_vocab, **b.sparrow_options)


#: Drafter factory of each drafter kind, per loop.
_CHAIN_DRAFTERS: dict[str, Callable[[_Build], Any]] = {"none": _no_drafter, "vlm": _vlm_drafter,
                                                       "sparrow": _sparrow_drafter}
_TREE_DRAFTERS: dict[str, Callable[[_Build], Any]] = {"vlm": _tree_vlm_drafter, "sparrow": _tree_sparrow_drafter}


def _tree_decoder(b: _Build) -> TreeSpeculativeDecoder:
    """Decoder of a tree method: strict verification of an EAGLE-2 tree grown by a draft VLM or a Sparrow draft."""
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

    shape = b.config.tree
    if is_fast(b.target) and b.target.lm.max_tree < shape.verify_nodes:
        raise ConfigError(f"the fast engine's max_tree ({b.target.lm.max_tree}) cannot hold a verify tree of "
                          f"{shape.verify_nodes} nodes (--tree-total {shape.total_tokens} + 1): raise fast option "
                          f"max_tree to >= {shape.verify_nodes} or lower --tree-total")
    drafter = _TREE_DRAFTERS[b.spec.drafter](b)
    # StrictVerifier on both engines: it decides along the best path's rows, which are plain tensors.
    policy = AdaptiveDraftPolicy(draft_cost=b.config.draft_cost) if b.config.adaptive else None
    decoder = TreeSpeculativeDecoder(b.target, drafter, StrictVerifier(), total_tokens=shape.total_tokens,
                                     depth=shape.depth, top_k=shape.top_k, method=b.spec.name,
                                     device_rounds=b.config.device_rounds, adaptive=policy)
    decoder.engine = b.config.engine  # the engine auto resolved to, for records
    return decoder
