"""Typed decode configuration: every knob of a decoder, validated once, shared by all front ends.

:class:`DecodeConfig` is the one description of *how* a method decodes (draft length, LVSpec's
knobs, the relevance scorer, the tree shape, the engine and its options). ``vidspec generate``,
``vidspec eval`` and the evaluation runner all build one and hand it to
:func:`vidspec.decoding.methods.build_decoder`; the eval runner records it in its ``config.json``.

Its field names are the command-line flags (``--lam``, ``--tree-total``, ``--fast-gemv`` ...), so
the two CLIs add its fields to their parsers as they are and recipes (YAML) keep flat keys.

Usage::

    from vidspec.decoding.config import DecodeConfig
    from vidspec.decoding.methods import build_decoder

    cfg = DecodeConfig(k=6, lam=0.5, engine="fast", fast_max_len=4096)
    decoder = build_decoder("lvspec-pst", target="tiny-qwen2.5-vl", config=cfg)
    paper = DecodeConfig.paper(k=6)  # LVSpec's own loose rule (``--loose paper`` on the command line)

The default engine is ``auto``: :func:`~vidspec.decoding.methods.build_decoder` runs the fast engine on
CUDA and the eager one (the reference) on CPU, and falls back to eager, with one logged line saying why,
where the fast engine cannot serve the model or the options (:meth:`DecodeConfig.resolve`).

What a request asks for (temperature, top-p, seed, token budget) is not here: those belong to
each ``generate`` call, and one decoder serves requests with different sampling settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.loops.chain import DEFAULT_DRAFT_COST

#: ``engine`` choices (``--engine``): auto picks fast on CUDA and eager elsewhere (:meth:`DecodeConfig.resolve`).
ENGINES: tuple[str, ...] = ("auto", "eager", "fast")
#: ``--scorer`` choices: LVSpec's relevance scorers (:class:`~vidspec.decoding.verifiers.factory.RelevanceOptions`).
SCORERS: tuple[str, ...] = ("cosine", "attention", "probe", "random")
#: ``--attention-heads`` choices: how the attention scorer reduces its per-head masses.
ATTENTION_HEADS: tuple[str, ...] = ("mean", "max")
#: ``--fast-gemv`` modes -> FastTarget's ``gemv``: cuBLAS for every weight product ("off"), the Triton
#: GEMV for single-token steps ("decode"), or the Triton small-M/split-K path for steps of up to 16
#: tokens too ("all": verify steps; tile shapes from the built-in H200 table, see docs/results.md).
GEMV_MODES: dict[str, bool | str] = {"off": False, "decode": True, "all": "all"}
#: The loose methods' defaults: every draft position may be relaxed (λ 1), a mismatch is kept only where the
#: target itself gives the draft's token probability >= ε = 0.5, and PST is off (window 0). Chosen so that
#: fact-F1 and MCQ retention stay >= 99% on held-out SynthVid data with both committed release sets
#: (docs/results.md, section 5): PST at λ 1 acts wherever the gate refused a mismatch and lost up to 1.4% of
#: the facts, and ε 0.3 or 0.4 let a shape word through where the target was split 0.52 / 0.41 between two
#: shapes. At ε 0.5 the gate keeps a draft token only where the target ranks it at least level with its own
#: choice, so the defaults are nearly strict; on these testbeds the looser ε gained no τ. Being blind to
#: relevance, the rule also runs inside the fast engine's verify step (``loose_device``).
DEFAULT_LOOSE: dict[str, Any] = {"lam": 1.0, "predicate": "prob", "eps": 0.5, "pst_window": 0}
#: LVSpec's own loose rule as the paper states it: the lowest 70% of draft positions by visual relevance are
#: loose and every loose mismatch is accepted (the ε of predicate prob does not apply; 0.01 is recorded).
PAPER_LOOSE: dict[str, Any] = {"lam": 0.7, "predicate": "always", "eps": 0.01, "pst_window": 3}
#: ``--loose`` presets: the loose knobs each sets (explicit ``--lam``/``--predicate``/``--eps``/``--pst-window``
#: flags win).
LOOSE_PRESETS: dict[str, dict[str, Any]] = {"default": DEFAULT_LOOSE, "paper": PAPER_LOOSE}
#: Help text of ``--loose`` (vidspec generate and vidspec eval).
LOOSE_HELP = ("loose-verification preset: default (lam 1, predicate prob, eps 0.5, no PST: nearly strict, keeps "
              ">= 99% of facts on held-out SynthVid) or paper (LVSpec's own rule: lam 0.7 by visual relevance, predicate always, PST "
              "window 3); --lam, --predicate, --eps and --pst-window given too override the preset")


def apply_loose_preset(options: dict[str, Any], preset: str | None, argv: Sequence[str] = ()) -> dict[str, Any]:
    """``options`` with the loose knobs of ``preset`` (:data:`LOOSE_PRESETS`), except those named in ``argv``.

    The command lines parse ``--loose`` beside the :class:`DecodeConfig` fields; a knob also given as its
    own flag (``--lam 0.5``, ``--eps=0.1``) keeps that value, so ``--loose paper --lam 0.5`` is the
    paper's rule at λ 0.5.

    Raises:
        ConfigError: an unknown preset.
    """
    if preset is None:
        return options
    if preset not in LOOSE_PRESETS:
        raise ConfigError(f"unknown --loose {preset!r} (choose from {', '.join(LOOSE_PRESETS)})")
    given = {a[2:].split("=", 1)[0].replace("-", "_") for a in argv if a.startswith("--")}
    return {**options, **{k: v for k, v in LOOSE_PRESETS[preset].items() if k not in given}}


#: FastTarget's default KV cache capacity (prompt + generated tokens + one verify block).
DEFAULT_FAST_MAX_LEN = 8192


@dataclass(frozen=True)
class TreeShape:
    """Shape of the dynamic draft tree of the tree methods (EAGLE-2 style growth).

    The default (48 / 8 / 8) is the best CPU setting of a sweep over tree shapes with the Sparrow
    testbed draft: τ 5.74 against 3.66 for the chain at K = 4, token-identical (docs/results.md).

    Attributes:
        total_tokens: draft nodes kept per tree (the target verifies this many + 1 in one pass).
        depth: draft levels per round, the most tokens a round can accept.
        top_k: children per expanded node, and the frontier width.
    """

    total_tokens: int = 48
    depth: int = 8
    top_k: int = 8

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{TREE_FLAGS[f.name]} ({f.name}) must be an integer >= 1, got {value!r}")

    @classmethod
    def from_dict(cls, shape: dict[str, Any]) -> TreeShape:
        """A shape from ``{"total_tokens", "depth", "top_k"}`` (missing or None keys take the defaults)."""
        unknown = sorted(set(shape) - set(TREE_FLAGS))
        if unknown:
            raise ConfigError(f"unknown tree option(s) {', '.join(unknown)} (choose from {', '.join(TREE_FLAGS)})")
        return cls(**{k: v for k, v in shape.items() if v is not None})

    @property
    def verify_nodes(self) -> int:
        """Nodes of the verify tree: the last accepted token and the kept draft nodes."""
        return self.total_tokens + 1

    def as_dict(self) -> dict[str, int]:
        """``{"total_tokens", "depth", "top_k"}``."""
        return dataclasses.asdict(self)


#: The command-line flag of each :class:`TreeShape` field (named in errors).
TREE_FLAGS: dict[str, str] = {"total_tokens": "--tree-total", "depth": "--tree-depth", "top_k": "--tree-top-k"}
#: The default tree shape.
DEFAULT_TREE = TreeShape()


@dataclass(frozen=True)
class DecodeConfig:
    """How a decoder drafts, verifies and runs; checked on construction (a bad value is a ConfigError).

    The choice fields are plain strings checked here (rather than ``Literal`` types), so that a
    command line with a bad value fails with this class's message, naming the flag.

    Attributes:
        k: draft tokens per round; None takes the method's default (4; 15 for fly). Not used by ar
            and the tree methods (their round length is the tree depth).
        lam: LVSpec relaxation ratio λ, the share of draft positions verified loosely (0 = strict). The
            loose defaults (λ 1, predicate prob, ε 0.5, no PST: :data:`DEFAULT_LOOSE`, nearly strict) keep >= 99%
            of the facts on held-out data; :meth:`paper` (``--loose paper``) is LVSpec's own rule (λ 0.7, predicate always,
            PST window 3).
        top_n: LVSpec cosine scorer: visual tokens averaged in the relevance score.
        relevance_layer: hidden-state layer the relevance scorers read (None: the middle layer).
        predicate: LVSpec loose acceptance predicate: always, topk or prob.
        eps: predicate prob: accept a loose mismatch when the target gives the draft token at least
            this probability.
        top_k: predicate topk: accept a loose mismatch when the draft token is in the target's top k.
        pst_window: PST: positions a shifted token may move (lvspec-pst, sparrow-lvspec-pst); 0 (the default)
            turns PST off, 3 is the paper's (``--loose paper``).
        protect: keep negations, numbers and comparatives strict under loose verification.
        scorer: LVSpec relevance scorer: cosine (top-N cosine to visual tokens), attention (attention
            mass on visual positions; eager engine only), probe (a linear probe, ``probe``) or random
            (control).
        attention_heads: scorer attention: mean or max of the per-head masses.
        probe: scorer probe: safetensors file written by ``ProbeScorer.save``.
        engine: auto (the default: fast on CUDA, eager elsewhere), eager (the Hugging Face modules as
            loaded, the reference and the CPU path) or fast (static KV cache, CUDA graphs on CUDA;
            greedy strict output is token-identical).
        fast_max_len: fast engine: KV cache positions (prompt + generated tokens + one verify block).
        fast_gemv: fast engine on CUDA: off (cuBLAS), decode (Triton GEMV for single-token steps) or
            all (verify steps of up to 16 tokens too, split-K).
        fast_compile: fast engine on CUDA: fuse each step's elementwise work with torch.compile
            (false: the same CUDA graphs without compiling; slower steps, no compile time).
        draft_vocab: Sparrow methods: draft only the release's N most frequent tokens (a reduced
            head; the release needs a draft_vocab.json from 'vidspec sparrow-vocab').
        tree_total: tree methods: draft nodes kept per tree (see :class:`TreeShape`).
        tree_depth: tree methods: tree depth (draft passes per round).
        tree_top_k: tree methods: children per expanded node and frontier width.
        device_rounds: fast engine on CUDA, greedy: launch draft and verify back to back with one host
            synchronisation per round (false: host-driven rounds, for A/B runs; same tokens).
        loose_device: fast engine, greedy, loose methods with a relevance-blind rule (lam 1 with
            predicate prob or always): decide each round inside the verify step instead of walking
            the draft on the host (same rule; false: the host walk, for A/B runs).
        adaptive: chain methods: shrink K, and stop drafting for the rest of a request, when the
            request's acceptance no longer pays for the draft steps
            (:class:`~vidspec.decoding.loops.chain.AdaptiveDraftPolicy`; lossless methods' output is
            unchanged); also, for a loose method, verify strictly for the rest of a request once its rule has
            accepted nothing beyond strict for 16 drafting rounds
            (:class:`~vidspec.decoding.verifiers.switch.LooseSwitch`). false: always draft K, and keep the rule.
        draft_cost: adaptive policy: cost of one draft token relative to one target verify step. A
            fixed figure, so that the policy's choices (and a loose method's output) depend on the
            acceptance only, never on timing noise; None measures it per request from the rounds'
            host timings instead (the output of loose methods can then vary from run to run).
    """

    k: int | None = None
    lam: float = DEFAULT_LOOSE["lam"]
    top_n: int = 10
    relevance_layer: int | None = None
    predicate: str = DEFAULT_LOOSE["predicate"]
    eps: float = DEFAULT_LOOSE["eps"]
    top_k: int = 5
    pst_window: int = DEFAULT_LOOSE["pst_window"]
    protect: bool = True
    scorer: str = "cosine"
    attention_heads: str = "mean"
    probe: str | None = None
    engine: str = "auto"
    fast_max_len: int = DEFAULT_FAST_MAX_LEN
    fast_gemv: str = "off"
    fast_compile: bool = True
    draft_vocab: int | None = None
    tree_total: int = DEFAULT_TREE.total_tokens
    tree_depth: int = DEFAULT_TREE.depth
    tree_top_k: int = DEFAULT_TREE.top_k
    device_rounds: bool = True
    loose_device: bool = True
    adaptive: bool = True
    draft_cost: float | None = DEFAULT_DRAFT_COST

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or self.k < 1):
            raise ConfigError(f"--k must be >= 1, got {self.k}")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        if self.fast_gemv not in GEMV_MODES:
            raise ConfigError(f"unknown --fast-gemv {self.fast_gemv!r} (choose from {', '.join(GEMV_MODES)})")
        if self.draft_cost is not None and not 0 <= self.draft_cost:
            raise ConfigError(f"--draft-cost must be >= 0, got {self.draft_cost}")
        if self.fast_max_len < 1:
            raise ConfigError(f"--fast-max-len must be >= 1, got {self.fast_max_len}")
        if self.draft_vocab is not None and self.draft_vocab < 1:
            raise ConfigError(f"--draft-vocab must be >= 1, got {self.draft_vocab}")
        if self.relevance_layer is not None and self.relevance_layer < 0:
            raise ConfigError(f"--relevance-layer must be >= 0, got {self.relevance_layer}")
        self.tree  # noqa: B018 - validates the tree fields
        self._check_relevance()
        from vidspec.decoding.verifiers.lvspec import LVSpecConfig

        # LVSpec's own checks of the shared knobs (λ range, predicate, ε, top-k, PST window).
        LVSpecConfig(lam=self.lam, predicate=self.predicate, eps=self.eps, top_k=self.top_k,
                     pst_window=self.pst_window)

    def _check_relevance(self) -> None:
        if self.scorer not in SCORERS:
            raise ConfigError(f"unknown --scorer {self.scorer!r} (choose from {', '.join(SCORERS)})")
        if self.attention_heads not in ATTENTION_HEADS:
            raise ConfigError(f"unknown --attention-heads {self.attention_heads!r} "
                              f"(choose from {', '.join(ATTENTION_HEADS)})")
        if self.scorer == "probe":
            if not self.probe:
                raise ConfigError("--scorer probe needs --probe FILE (a relevance probe written by ProbeScorer.save)")
            if not Path(self.probe).is_file():
                raise ConfigError(f"--probe {self.probe}: relevance probe file not found")
        elif self.probe:
            raise ConfigError(f"--probe is used by --scorer probe only (got --scorer {self.scorer})")
        if self.top_n < 1:
            raise ConfigError(f"--top-n must be >= 1, got {self.top_n}")

    @classmethod
    def paper(cls, **changes: Any) -> DecodeConfig:
        """LVSpec's own loose rule (:data:`PAPER_LOOSE`: λ 0.7 by visual relevance, every loose mismatch
        accepted, PST window 3), over the other defaults and ``changes``; ``--loose paper`` on the command line."""
        return cls(**{**PAPER_LOOSE, **changes})

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields (= flag names with underscores), in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def split(cls, options: dict[str, Any]) -> tuple[DecodeConfig, dict[str, Any]]:
        """A DecodeConfig from the keys of ``options`` that are its fields, and the remaining options."""
        names = set(cls.field_names())
        return (cls(**{k: v for k, v in options.items() if k in names}),
                {k: v for k, v in options.items() if k not in names})

    def replace(self, **changes: Any) -> DecodeConfig:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @property
    def tree(self) -> TreeShape:
        """The tree methods' shape."""
        return TreeShape(self.tree_total, self.tree_depth, self.tree_top_k)

    def resolve(self, device: str | Any, relevance: bool | str | None = None) -> tuple[DecodeConfig, str | None]:
        """This config with ``engine`` made concrete for ``device``, and why auto fell back.

        ``auto`` becomes ``fast`` on a CUDA device and ``eager`` elsewhere (the fast engine's CUDA graphs
        and kernels are what make it fast; on CPU eager is the reference and no slower). On CUDA, auto
        also becomes eager where the options need the eager engine: the attention relevance scorer for
        a method that reads visual relevance (``relevance`` true, e.g. the name of such a method; the
        fast engine does not compute attention mass). The second value is then that reason in one line
        (None when nothing fell back). ``eager`` and ``fast`` stay as given.
        """
        if self.engine != "auto":
            return self, None
        if not str(device).startswith("cuda"):
            return self.replace(engine="eager"), None
        if self.scorer == "attention" and relevance:
            return (self.replace(engine="eager"),
                    "--scorer attention needs the attention mass, which only the eager engine computes")
        return self.replace(engine="fast"), None

    def check_device(self, device: str) -> None:
        """Refuse options that cannot apply on ``device`` (the Triton GEMV needs the fast engine on CUDA)."""
        if self.engine == "auto":  # what auto becomes on this device
            self.resolve(device)[0].check_device(device)
            return
        if self.fast_gemv != "off" and (self.engine != "fast" or not str(device).startswith("cuda")):
            raise ConfigError(f"--fast-gemv {self.fast_gemv} needs --engine fast on a CUDA device (Triton kernels), "
                              f"got --engine {self.engine} --device {device}")

    def loose_options(self) -> dict[str, Any]:
        """The loose verifiers' options (``build_verifier`` keywords; each verifier takes its share)."""
        return dict(lam=self.lam, top_n=self.top_n, predicate=self.predicate, eps=self.eps, top_k=self.top_k,
                    pst_window=self.pst_window, protect=self.protect, scorer=self.scorer,
                    attention_heads=self.attention_heads, probe_path=self.probe, device_walk=self.loose_device)

    def fast_options(self) -> dict[str, Any] | None:
        """:class:`~vidspec.decoding.fast.FastTarget` keywords on the fast engine, else None."""
        if self.engine != "fast":
            return None
        options: dict[str, Any] = {"max_len": self.fast_max_len, "gemv": GEMV_MODES[self.fast_gemv]}
        if not self.fast_compile:  # else FastTarget's default: compile on CUDA when Triton is there
            options["compile"] = False
        return options
