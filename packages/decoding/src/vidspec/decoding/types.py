"""The contracts every vidspec package shares.

Frozen dataclasses for values, Protocols for the three pluggable roles (target, drafter,
verifier). Tensor shapes and dtypes are written as ``(K+1, V) float32``.

The round of speculative decoding (docs/algorithms.md), in these terms::

    state = target.prefill(request)                  # cache holds the prompt; first token emitted
    drafter.prepare(target, state)                   # optional: the drafter's prompt work, in the prefill
    drafter.begin(target, state, first_token)
    while not done:
        proposal = drafter.propose(k)                # d_1..d_K
        out = target.verify(state, [x_last, *d], need)   # p_0..p_K, hidden states
        decision = verifier.verify(proposal, out, ctx)   # n accepted + 1 next token
        target.rollback(state, committed_len)        # crop to the accepted length
        drafter.commit(n, next_token, hidden)

The target's cache never holds the last emitted token ``x_last``: each verify pass starts with it,
so the pass yields K+1 distributions and the hidden state of ``x_last`` that EAGLE-style drafters
need. Plain autoregressive decoding is the same loop with K = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

#: Names of the hidden states a drafter or verifier can ask a target for in a verify pass.
HiddenName = Literal["last", "penult", "mid"]

#: How a token was accepted: strictly (it equals the target's choice), loosely (LVSpec),
#: by position-shift tolerance (PST), or it is the target's own bonus/correction token.
AcceptKind = Literal["strict", "loose", "shift", "target"]


@dataclass(frozen=True)
class VideoClip:
    """Frames sampled from one video.

    Attributes:
        frames: ``(T, H, W, 3) uint8`` RGB frames, already sampled and resized.
        fps: frames per second of the sampled sequence (source fps / sampling stride).
        source: path of the video file (or a description for in-memory clips).
        timestamps: seconds of each sampled frame in the source video, length T.
        source_num_frames: number of frames in the source video.
        source_fps: frame rate of the source video.
    """

    frames: np.ndarray
    fps: float
    source: str
    timestamps: tuple[float, ...] = ()
    source_num_frames: int = 0
    source_fps: float = 0.0

    def __post_init__(self) -> None:
        f = self.frames
        if not isinstance(f, np.ndarray) or f.ndim != 4 or f.shape[-1] != 3 or f.dtype != np.uint8:
            raise ValueError(
                f"VideoClip.frames must be a (T, H, W, 3) uint8 array, got "
                f"{getattr(f, 'shape', None)} {getattr(f, 'dtype', type(f))}"
            )
        if f.shape[0] == 0:
            raise ValueError(f"VideoClip from {self.source} has no frames")

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the frames."""
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    def repeat_frames(self, factor: int) -> VideoClip:
        """This clip with each frame repeated ``factor`` times (order kept: f0 f0 f1 f1 ...; training's length
        augmentation)."""
        ts = tuple(t for t in self.timestamps for _ in range(factor))
        return replace(self, frames=np.repeat(self.frames, factor, axis=0), fps=self.fps * factor, timestamps=ts)


@dataclass(frozen=True)
class Request:
    """One generation request: a video (or none) and a user prompt."""

    prompt: str
    clip: VideoClip | None = None
    system: str | None = None


@dataclass
class TargetState:
    """Mutable per-request state of a target model (its KV cache and what prefill cached).

    Attributes:
        request: the request this state belongs to.
        prompt_ids: ``(L,) int64`` the prompt's token ids, video placeholders expanded.
        cache: the family's KV cache object (an HF ``Cache``).
        length: number of positions in ``cache`` (prompt + committed tokens, not ``x_last``).
        first_logits: ``(V,) float32`` the distribution of the first new token, from prefill.
        prompt_hidden_penult: ``(L, d)`` second-to-last-layer hidden states of the prompt, or
            None when no drafter asked for them.
        visual_positions: ``(L_vis,) int64`` positions of visual tokens in the prompt.
        visual_hidden: ``(L_vis, d)`` hidden states of the visual tokens at ``relevance_layer``,
            cached at prefill for relevance scoring, or None when no verifier asked for them.
        relevance_layer: which layer ``visual_hidden`` and ``VerifyOutput.hidden_mid`` come from.
        extra: family-specific state (for Qwen2.5-VL the M-RoPE ``rope_deltas``).
    """

    request: Request
    prompt_ids: torch.Tensor
    cache: Any
    length: int
    first_logits: torch.Tensor
    prompt_hidden_penult: torch.Tensor | None = None
    visual_positions: torch.Tensor | None = None
    visual_hidden: torch.Tensor | None = None
    relevance_layer: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifyOutput:
    """What one target pass over ``[x_last, d_1..d_K]`` returns.

    Attributes:
        logits: ``(K+1, V) float32``; row i is the target's next-token logits after input i.
        hidden_last: ``(K+1, d)`` final-layer hidden states (after the final norm), if asked.
        hidden_penult: ``(K+1, d)`` second-to-last-layer hidden states, if asked.
        hidden_mid: ``(K+1, d)`` hidden states of the state's ``relevance_layer``, if asked.
        attn_to_visual: ``(K+1,)`` share of attention mass on visual positions, if asked.
    """

    logits: torch.Tensor
    hidden_last: torch.Tensor | None = None
    hidden_penult: torch.Tensor | None = None
    hidden_mid: torch.Tensor | None = None
    attn_to_visual: torch.Tensor | None = None


@runtime_checkable
class TargetModel(Protocol):
    """One Hugging Face Video-LLM wrapped for speculative decoding.

    A target may also expose ``provides: frozenset[str]``, the ``need`` names its ``verify`` honours
    (``"last"``, ``"penult"``, ``"mid"``, ...); :class:`~vidspec.decoding.loops.SpeculativeDecoder`
    then refuses a drafter or verifier that needs anything else (ConfigError) instead of failing
    mid-generation on a missing output.
    """

    family: str
    eos_token_ids: frozenset[int]
    vocab_size: int
    tokenizer: Any
    model: torch.nn.Module

    def prefill(self, request: Request, need: frozenset[str] = frozenset()) -> TargetState:
        """Encode the video and prompt, fill the cache, return the first-token distribution."""
        ...

    def verify(self, state: TargetState, tokens: list[int], need: frozenset[str] = frozenset()) -> VerifyOutput:
        """Run ``tokens`` through the target after the cache; the cache grows by len(tokens)."""
        ...

    def rollback(self, state: TargetState, length: int) -> None:
        """Crop the cache to its first ``length`` positions."""
        ...

    def decode(self, token_ids: list[int]) -> str:
        """Token ids to text (special tokens skipped)."""
        ...


@dataclass(frozen=True)
class Proposal:
    """Draft tokens for one round.

    Attributes:
        tokens: d_1..d_K.
        probs: ``(K, V) float32`` the draft distributions q_i the tokens were sampled from
            (needed by strict sampling verification), or None for greedy drafts.
    """

    tokens: tuple[int, ...]
    probs: torch.Tensor | None = None


@runtime_checkable
class Drafter(Protocol):
    """Proposes draft tokens. ``need`` names the target hidden states it consumes in ``commit``."""

    name: str
    need: frozenset[str]

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        """Start a request after the target's prefill; ``first_token`` is the first emitted token.

        A drafter may also define ``prepare(target, state)``, its prompt-side start (what needs no
        first token). Engines call it right after the target's prefill, before the first token is read
        back, and time it as ``Timings.draft_prefill_s``. ``begin`` must then only finish the start,
        and must do the whole start when ``prepare`` was not called for ``state``.
        """
        ...

    def propose(self, k: int) -> Proposal:
        """Draft up to ``k`` tokens continuing the committed sequence."""
        ...

    def commit(self, n_accepted: int, next_token: int, out: VerifyOutput) -> None:
        """The verifier kept d_1..d_n and then ``next_token``; ``out`` is the target pass."""
        ...


@dataclass
class VerifyContext:
    """What a verifier may look at besides the proposal and the target pass.

    Attributes:
        state: the target state (visual hidden states cached at prefill live here).
        temperature: 0 for greedy; > 0 for sampling.
        top_p: nucleus mass for sampling (1.0 = off).
        generator: the RNG for sampling decisions.
        memory: per-request scratch space owned by the verifier (running score windows).
        stop_ids: the target's end-of-sequence ids. Loose verifiers never relax a mismatch where
            either side is one of them: ending the answer, or going on past the target's end, is
            never a wording choice (the engines pass ``target.eos_token_ids``).
    """

    state: TargetState
    temperature: float = 0.0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    stop_ids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Decision:
    """A verifier's verdict on one round.

    Attributes:
        n_accepted: how many draft tokens are kept (0..K).
        next_token: the token emitted after them (target's bonus/correction token).
        kinds: how each kept draft token was accepted, length ``n_accepted``.
        scores: optional per-position relevance scores, for analysis.
    """

    n_accepted: int
    next_token: int
    kinds: tuple[AcceptKind, ...] = ()
    scores: tuple[float, ...] = ()


@runtime_checkable
class Verifier(Protocol):
    """Decides how many draft tokens to keep. ``need`` names the target outputs it reads."""

    name: str
    need: frozenset[str]

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision: ...


@dataclass(frozen=True)
class StepRecord:
    """One round of drafting and verification.

    ``draft_s``: host wall seconds of ``propose`` (device synchronised after it); ``verify_s``: of the
    target pass, the verifier's decision, the rollback and the drafter's ``commit`` (synchronised).
    In a device round (``SpeculativeDecoder(device_rounds=True)`` with a drafter and target that
    support it) the draft is not synchronised on its own: ``draft_s`` is then the host time of its
    launch and ``verify_s`` also holds the draft's device time; their sum is the round either way.
    """

    drafted: int
    accepted: int
    emitted: int
    loose_accepted: int = 0
    shift_accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0


@dataclass(frozen=True)
class Timings:
    """Seconds spent, split into prefill and decode (the metrics of docs/algorithms.md).

    ``draft_prefill_s`` is the part of ``prefill_s`` the host spends in the drafter's optional
    ``prepare`` (its prompt-side start: a Sparrow draft feeding the prompt's text positions, a draft
    VLM's own prefill), run before the first token is read back so that it can overlap the
    target's prefill on the device. ``begin_s`` is the part of ``decode_s`` the host spends in the drafter's
    ``begin`` (what needs the first token); each round's draft and verify seconds are in the
    :class:`StepRecord` s, so ``begin_s + sum(draft_s + verify_s) <= decode_s``.
    """

    video_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    wall_s: float = 0.0
    begin_s: float = 0.0
    draft_prefill_s: float = 0.0


@dataclass(frozen=True)
class GenerationResult:
    """Output of :meth:`SpeculativeDecoder.generate`.

    ``tau`` counts tokens emitted per target verify pass, the bonus token included (AR = 1.0); the
    first token comes from prefill and is not part of any round.
    """

    method: str
    text: str
    token_ids: tuple[int, ...]
    steps: tuple[StepRecord, ...]
    timings: Timings
    finish_reason: Literal["eos", "length"]

    @property
    def target_passes(self) -> int:
        return len(self.steps)

    @property
    def num_new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tau(self) -> float:
        if not self.steps:
            return 1.0
        return sum(s.emitted for s in self.steps) / len(self.steps)

    @property
    def loose_accepted(self) -> int:
        return sum(s.loose_accepted for s in self.steps)

    @property
    def shift_accepted(self) -> int:
        return sum(s.shift_accepted for s in self.steps)

    def acceptance_by_position(self) -> list[float]:
        """Share of rounds in which draft position i (1-based index i+1) was accepted."""
        k = max((s.drafted for s in self.steps), default=0)
        rates = []
        for i in range(k):
            rounds = [s for s in self.steps if s.drafted > i]
            rates.append(sum(s.accepted > i for s in rounds) / len(rounds) if rounds else 0.0)
        return rates
