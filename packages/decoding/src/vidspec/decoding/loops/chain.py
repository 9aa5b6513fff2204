"""The speculative decoding loop (docs/algorithms.md), written out in one place.

Usage::

    from vidspec.decoding import SpeculativeDecoder, load_target, ModelDrafter, StrictVerifier
    target = load_target("tiny-qwen2.5-vl")
    draft = ModelDrafter(load_target("tiny-qwen2.5-vl-draft"))
    dec = SpeculativeDecoder(target, draft, StrictVerifier(), k=4)
    result = dec.generate(Request("Describe the video.", clip), max_new_tokens=64)
    print(result.text, result.tau)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vidspec.decoding.drafters import NoDrafter
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import (
    Decision,
    Drafter,
    GenerationResult,
    Proposal,
    Request,
    StepRecord,
    TargetModel,
    TargetState,
    Timings,
    Verifier,
    VerifyContext,
)
from vidspec.decoding.verifiers.strict import StrictVerifier, sample_token
from vidspec.decoding.verifiers.switch import LooseSwitch


def _sync(device: torch.device) -> None:
    # Timers must not stop while CUDA kernels are still queued (asynchronous launches would leave them out).
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clip_at_stop(new: list[int], eos: frozenset[int], emitted: int, max_new_tokens: int) -> tuple[list[int], str | None]:
    """Cut a round's tokens at the first EOS (kept) or at the token budget.

    Returns:
        The tokens to emit and the finish reason ("eos", "length") or None to go on.
    """
    for i, t in enumerate(new):
        if t in eos:
            return new[: i + 1], "eos"
    if emitted + len(new) >= max_new_tokens:
        return new[: max_new_tokens - emitted], "length"
    return new, None


def collect_result(method: str, target, rounds: Iterator[tuple[list[int], StepRecord | None]], timings: dict,
                   t0: float) -> GenerationResult:
    """A decode's result from its rounds ``(new tokens, step record or None for prefill's token)``.

    ``timings`` is filled by the rounds (prefill_s, decode_s, finish, optionally begin_s and
    draft_prefill_s); ``t0`` is
    when the decode started (wall time ends when the rounds do).
    """
    tokens: list[int] = []
    steps: list[StepRecord] = []
    for new, step in rounds:
        tokens.extend(new)
        if step is not None:
            steps.append(step)
    return GenerationResult(
        method=method,
        text=target.decode(tokens),
        token_ids=tuple(tokens),
        steps=tuple(steps),
        timings=Timings(prefill_s=timings["prefill_s"], decode_s=timings["decode_s"],
                        wall_s=time.perf_counter() - t0, begin_s=timings.get("begin_s", 0.0),
                        draft_prefill_s=timings.get("draft_prefill_s", 0.0)),
        finish_reason=timings["finish"],
    )


def stream_text(decode, pieces: Iterator[list[int]]) -> Iterator[str]:
    """Text as token batches arrive, decoded incrementally so multi-byte text stays whole.

    Each batch decodes only its new tokens, prefixed by the tokens of the piece shown last (the
    context a tokenizer needs for word-initial spaces), and yields the text beyond that context:
    linear work in the output, not a decode of everything per batch. A batch that ends inside a
    character (the text ends in U+FFFD) shows nothing until the character is complete.
    """
    tokens: list[int] = []
    start = shown = 0  # tokens[start:shown] are the last shown piece's tokens; tokens[shown:] are new
    context = ""  # decode(tokens[start:shown])
    for new in pieces:
        tokens.extend(new)
        text = decode(tokens[start:])
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the rest
            continue
        if len(text) > len(context):
            yield text[len(context):]
            start, shown = shown, len(tokens)
            context = decode(tokens[start:shown])
    final = decode(tokens[start:])
    if len(final) > len(context):  # flush a trailing partial character at the end
        yield final[len(context):]


@dataclass
class _Event:
    """One chunk of output for :meth:`SpeculativeDecoder.stream`."""

    token_ids: list[int]
    step: StepRecord | None


#: The adaptive policy's default cost of one draft token in target verify steps (``--draft-cost``): a
#: 2-layer draft of a 28-layer target with its per-step overhead. A measuring policy also assumes it
#: until it has timed a host round (device rounds cannot split draft and verify time).
DEFAULT_DRAFT_COST = 0.15


@dataclass
class AdaptiveDraftPolicy:
    """Per-request draft length: shrink K when acceptance no longer pays, grow it back when it returns,
    and stop drafting when even one draft token does not pay.

    The model, in units of one target verify step: a round that drafts ``k`` tokens costs about
    ``1 + k * c`` (``c``: one draft token's time over one verify step's, :attr:`draft_cost`). The
    policy estimates ``p``, the chance that the verifier accepts a draft token given that it accepted
    the ones before it, from every round whatever its K: a round that accepts ``a`` of ``k`` drafts
    tried ``a + 1`` positions (``k`` when all were accepted) and passed ``a``; ``p`` is the ratio of
    exponential moving averages of passes and tries (weight :attr:`alpha` for the newest round). They
    start from a prior worth :attr:`prior_tries` tried positions accepted with chance :attr:`prior`: a
    request's first rounds are often its hardest (a caption's opening words), and without the prior two
    rejected rounds at the start shrank K in most requests of the CPU testbed. Because ``p`` does not
    depend on the K that measured it, a shrunk K sees acceptance come back and grows again (a policy
    that looked at accepted drafts per round could not: at a small K that count is capped by K
    itself). After each drafting round, from the :attr:`min_rounds`-th on:

    - ``p + p**2 + ... + p**k <= k * c`` (the round's expected accepted drafts do not pay for its
      draft tokens): halve ``k``; at 0 drafting stops for the rest of the request (the drafter is not
      called again until the next request, so a never-accepted draft leaves plain decoding's cost plus
      a few rounds: at K 4 and ``c`` 0.15, K 4 -> 2 -> 1 -> 0 over six rounds, 17 draft tokens);
    - else ``p ** (k + 1) > c`` (one more draft token would be accepted often enough to pay for
      itself) and ``k < K``: double ``k`` (at most K).

    After a change, one round runs at the new K before the next. ``c`` is :attr:`draft_cost` when
    given (``build_decoder`` gives the config's fixed figure, so the choices depend on acceptance
    alone and runs repeat exactly); None measures it from the rounds timed on the host
    (``draft_s / drafted`` over ``verify_s``, the same EMA), :data:`DEFAULT_DRAFT_COST` until then.
    The verifier decides as before, so lossless methods stay token-identical to AR whatever K a round
    uses; a loose method's output can change with K. :meth:`record` reports what happened.

    Attributes:
        draft_cost: fixed cost ratio ``c`` (None: measured).
        alpha: EMA weight of the newest round.
        min_rounds: drafting rounds observed before ``k`` may change.
        prior: the acceptance chance ``p`` starts from (0.8: a request starts out trusting its draft).
        prior_tries: the prior's weight in tried positions (0: the first round alone sets ``p``).
    """

    draft_cost: float | None = None
    alpha: float = 0.25
    min_rounds: int = 2
    prior: float = 0.8
    prior_tries: float = 1.0

    def start(self, k_max: int) -> None:
        """A new request that drafts at most ``k_max`` tokens per round."""
        self.k_max = self.k = k_max
        self.ema: float | None = None  # accepted drafts per round
        self.passed = self.prior * self.prior_tries  # accepted draft positions per round (EMA)
        self.tried = self.prior_tries  # draft positions the verifier reached per round (EMA)
        self.cost: float | None = self.draft_cost
        self.rounds = 0
        self.history: list[list[int]] = [[0, k_max]]  # [tokens emitted when k changed, new k]
        self.stopped_at: int | None = None

    @property
    def cost_ratio(self) -> float:
        """The ``c`` in use (given, measured, or the default)."""
        return DEFAULT_DRAFT_COST if self.cost is None else self.cost

    @property
    def accept_rate(self) -> float:
        """``p``: the estimated chance that a draft token is accepted after its predecessors were."""
        return self.passed / self.tried if self.tried > 0 else self.prior

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.alpha * new + (1 - self.alpha) * old

    def update(self, drafted: int, accepted: int, emitted: int, draft_s: float | None, verify_s: float) -> int:
        """Account one round (``draft_s`` None: a device round, not split) and return the next round's K.

        Args:
            drafted, accepted: the round's draft length and accepted drafts.
            emitted: tokens of the request so far (the first included), where a change is recorded.
            draft_s, verify_s: the round's host seconds of drafting (synchronised) and verifying.
        """
        if drafted <= 0 or self.k == 0:
            return self.k
        a = min(int(accepted), drafted)
        self.ema = self._ema(self.ema, float(a))
        self.passed = self._ema(self.passed, float(a))
        self.tried = self._ema(self.tried, float(a + 1 if a < drafted else drafted))
        if self.draft_cost is None and draft_s is not None and verify_s > 0:
            self.cost = self._ema(self.cost, (draft_s / drafted) / verify_s)
        self.rounds += 1
        if self.rounds < self.min_rounds:
            return self.k
        p, c, k = self.accept_rate, self.cost_ratio, self.k
        expected = sum(p ** i for i in range(1, k + 1))  # accepted drafts per round at K = k
        if expected <= k * c:
            k //= 2
        elif k < self.k_max and p ** (k + 1) > c:
            k = min(2 * k, self.k_max)
        if k != self.k:
            self.k = k
            self.history.append([emitted, k])
            self.rounds = self.min_rounds - 1  # one round at the new K before the next change
            if k == 0:
                self.stopped_at = emitted
        return self.k

    def record(self) -> dict:
        """What the policy did in the request: ``k_history`` (``[tokens emitted, K from then on]`` pairs,
        the first at 0), ``drafting_stopped_at`` (tokens emitted when drafting stopped, or None),
        ``accepted_ema`` (the moving average of accepted drafts per round), ``accept_rate`` (``p``) and
        ``draft_cost`` (the ``c`` it ended with)."""
        return {"k_history": [list(h) for h in self.history], "drafting_stopped_at": self.stopped_at,
                "accepted_ema": None if self.ema is None else round(self.ema, 4),
                "accept_rate": round(self.accept_rate, 4),
                "draft_cost": round(self.cost_ratio, 4)}


def prepare_drafter(drafter, target: TargetModel, state: TargetState) -> float:
    """Run the drafter's prompt-side start (``prepare``, optional in the Drafter protocol) right after the
    target's prefill, before the first token is read back: a Sparrow draft's prompt feed or a draft
    VLM's own prefill. Its host work can then overlap the target's prefill still running on the device
    (not guaranteed: on an H200 Sparrow's prefill measured about 1 ms longer than AR's, which is why the
    reports also give a DSR with ``prepare`` counted in the decode; docs/results.md); it belongs to the prefill phase,
    like the draft's prompt pass in EAGLE-style decoders. Returns its host seconds (reported as
    ``draft_prefill_s``; 0.0 for a drafter without ``prepare``)."""
    prepare = getattr(drafter, "prepare", None)
    if not callable(prepare):
        return 0.0
    t = time.perf_counter()
    prepare(target, state)
    return time.perf_counter() - t


class SpeculativeDecoder:
    """Draft K tokens, verify them in one target pass, keep what the verifier accepts.

    Args:
        target: the model whose output we want.
        drafter: proposes tokens (:class:`NoDrafter` for plain autoregressive decoding).
        verifier: decides acceptance (:class:`StrictVerifier` is lossless).
        k: draft tokens per round (ignored for :class:`NoDrafter`).
        method: a label carried into results ("ar", "sd", "lvspec", ...).
        device_rounds: for greedy requests, when the drafter can leave its tokens on the device
            (``propose_device``/``set_draft``, :class:`~vidspec.decoding.fast.FastSparrowDrafter`) and the
            target can verify them there (``verify_device``, :class:`~vidspec.decoding.fast.FastTarget`),
            launch the draft and the verify step back to back with no host synchronisation between
            them; the draft tokens come back with the acceptance (one synchronisation per round).
            Decisions are the same; only the per-round split changes meaning (``draft_s`` is then the
            host time of the draft's launch and ``verify_s`` includes the draft's device time).
        adaptive: an :class:`AdaptiveDraftPolicy` choosing each round's K from the request's own
            acceptance (None: always K). What it did in the last request is :attr:`last_adaptation`.
        loose_switch: for a loose verifier, a :class:`~vidspec.decoding.verifiers.switch.LooseSwitch` that
            verifies strictly for the rest of a request once the loose rule has accepted nothing beyond
            strict for several rounds (so where it cannot pay it costs no more than strict); by default
            one with the default patience when ``adaptive`` is given, else none. What it did is in
            :attr:`last_adaptation`.
        engine: the engine the parts run on ("eager" or "fast"), for records.
    """

    def __init__(self, target: TargetModel, drafter: Drafter | None = None, verifier: Verifier | None = None,
                 k: int = 4, method: str | None = None, device_rounds: bool = True,
                 adaptive: AdaptiveDraftPolicy | None = None, engine: str | None = None,
                 loose_switch: LooseSwitch | bool | None = None):
        self.target = target
        self.device_rounds = device_rounds
        self.adaptive = adaptive
        if loose_switch is None or loose_switch is True:
            loose_switch = LooseSwitch() if (adaptive is not None or loose_switch is True) else None
        self.loose_switch: LooseSwitch | None = loose_switch or None
        self._switched = False  # whether the switch watched the last request
        self.engine = engine or ("fast" if callable(getattr(target, "verify_device", None)) else "eager")
        self._adapted = False  # whether the policy ran in the last request
        self.drafter = drafter or NoDrafter()
        self.verifier = verifier or StrictVerifier()
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = 0 if isinstance(self.drafter, NoDrafter) else k
        self.method = method or ("ar" if self.k == 0 else "sd")
        # A need the target cannot meet would otherwise surface mid-generation as a None output.
        provides = getattr(target, "provides", None)
        if provides is not None:
            for role, part in (("drafter", self.drafter), ("verifier", self.verifier)):
                missing = frozenset(part.need) - provides
                if missing:
                    raise ConfigError(
                        f"{role} {part.name!r} needs target output(s) {', '.join(sorted(missing))}, which "
                        f"{getattr(target, 'name', type(target).__name__)!r} does not compute "
                        f"(it provides {', '.join(sorted(provides))})"
                    )

    @property
    def last_adaptation(self) -> dict | None:
        """What the adaptive policy did in the last request (:meth:`AdaptiveDraftPolicy.record`; None when
        no policy ran: AR, no policy, or the request ended at its first token)."""
        record = self.adaptive.record() if self._adapted and self.adaptive is not None else None
        if self._switched and self.loose_switch is not None:
            record = {**(record or {}), **self.loose_switch.record()}
        return record

    def _generator(self, max_new_tokens: int, temperature: float, top_p: float,
                   seed: int | None) -> torch.Generator | None:
        """Check the sampling arguments; the request's seeded RNG, or None for a greedy request."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if temperature == 0:
            return None
        generator = torch.Generator(device="cpu")
        generator.manual_seed(0 if seed is None else seed)
        return generator

    @contextlib.contextmanager
    def _drafting_as(self, temperature: float, top_p: float, generator: torch.Generator | None) -> Iterator[None]:
        """For one request, a drafter with a ``temperature`` drafts at the request's settings.

        Drafters are built before any request is known (``build_decoder(..., temperature=...)``),
        but the verifier works at each request's temperature and top-p. Drafting at the same ones
        keeps acceptance high both ways: greedy drafts for a greedy request (no wasted samples),
        sampled drafts with their distributions q for a sampling request (strict rejection sampling
        needs q; top-p as the verifier's). The request's RNG is shared, so a seed fixes drafts and
        target samples together. The drafter's own ``temperature``, ``top_p`` and ``generator``
        come back afterwards (also after an error), so one decoder serves greedy and sampling
        requests alternately. Every drafter here reads these attributes afresh in each
        ``propose`` (greedy and sampling paths keep the same cache bookkeeping), so a change
        between requests is safe. A drafter without ``temperature`` (NoDrafter, scripted ones) is
        left alone.
        """
        drafter = self.drafter
        if not hasattr(drafter, "temperature"):
            yield
            return
        wanted = {"temperature": temperature, "top_p": top_p, "generator": generator}
        saved = {name: getattr(drafter, name) for name in wanted if hasattr(drafter, name)}
        try:
            for name in saved:
                setattr(drafter, name, wanted[name])
            yield
        finally:
            for name, value in saved.items():
                setattr(drafter, name, value)

    def _events(self, request: Request, max_new_tokens: int, temperature: float, top_p: float,
                generator: torch.Generator | None, timings: dict) -> Iterator[_Event]:
        target, drafter, verifier = self.target, self.drafter, self.verifier
        device = target.device
        eos = target.eos_token_ids
        need_verify = frozenset(drafter.need | verifier.need)
        need_prefill = need_verify | ({"visual"} if "mid" in verifier.need else frozenset())

        self._adapted = self._switched = False
        _sync(device)
        t0 = time.perf_counter()
        state = target.prefill(request, need_prefill)
        timings["draft_prefill_s"] = prepare_drafter(drafter, target, state)
        first = sample_token(state.first_logits, temperature, top_p, generator)
        _sync(device)
        t1 = time.perf_counter()
        timings["prefill_s"] = t1 - t0
        yield _Event([first], None)
        emitted = 1
        if first in eos or emitted >= max_new_tokens:
            timings["finish"] = "eos" if first in eos else "length"
            timings["decode_s"] = 0.0
            return

        drafter.begin(target, state, first)
        # Once per request: the host's time in the drafter's begin (the first token's part of its
        # start; the prompt's part ran in prepare, in the prefill phase).
        timings["begin_s"] = time.perf_counter() - t1
        ctx = VerifyContext(state=state, temperature=temperature, top_p=top_p, generator=generator, stop_ids=eos)
        set_loose = getattr(target, "set_loose", None)
        if set_loose is not None:  # a fast target (its prefill cleared the rule): this request's verify steps apply the verifier's, or none
            spec = getattr(verifier, "device_spec", None)
            set_loose(spec(eos) if spec is not None and temperature <= 0 else None)
        on_device = (self.device_rounds and temperature <= 0 and callable(getattr(drafter, "propose_device", None))
                     and callable(getattr(target, "verify_device", None)))
        max_draft = getattr(drafter, "max_draft", self.k)  # a FastModelDrafter drafts any k on the device
        policy = self.adaptive if self.k > 0 else None
        self._adapted = policy is not None
        if policy is not None:
            policy.start(self.k)
        k_now = self.k  # the policy's K (0 once drafting stopped for this request)
        # A loose verifier is watched: once its rule stops paying, the request verifies strictly.
        switch = self.loose_switch if self.k > 0 and not isinstance(verifier, StrictVerifier) else None
        self._switched = switch is not None
        if switch is not None:
            switch.start()

        def next_round(emitted: int):
            """The next round's K (a round emits at most K + 1: never draft past the budget) and, for a
            device round, its draft launched now (None: the round drafts on the host)."""
            k = min(k_now, max_new_tokens - emitted - 1)
            return k, (drafter.propose_device(k) if on_device and 1 <= k <= max_draft else None)  # type: ignore[attr-defined]

        x_last = first
        ts = time.perf_counter()
        k, toks = next_round(emitted)
        while True:
            if toks is not None:  # this round's draft is on the device already (launched after the last commit)
                tv = time.perf_counter()
                out = target.verify_device(state, x_last, toks, need_verify)  # type: ignore[attr-defined]
                proposal = Proposal(tuple(out.draft_tokens()))  # the round's one synchronisation
                drafter.set_draft(list(proposal.tokens))  # type: ignore[attr-defined]
            elif k_now == 0 and policy is not None:  # drafting stopped for this request: plain decoding
                proposal = Proposal(())
                tv = time.perf_counter()
                out = target.verify(state, [x_last], need_verify)
            else:
                proposal = drafter.propose(k)
                _sync(device)
                tv = time.perf_counter()
                out = target.verify(state, [x_last, *proposal.tokens], need_verify)
            decision: Decision = verifier.verify(proposal, out, ctx)
            n = decision.n_accepted
            if switch is not None and switch.update(len(proposal.tokens), decision, emitted + n + 1):
                # From the next round on: strict verification, no loose rule in the target's verify step
                # and none of the rule's inputs (hidden states for relevance) asked for.
                verifier = StrictVerifier()
                need_verify = frozenset(drafter.need)
                if set_loose is not None:
                    set_loose(None)
            # The cache covers x_last + d_1..d_K; keep x_last + d_1..d_n (next_token is not in it).
            target.rollback(state, state.length - len(proposal.tokens) + n)
            if k_now > 0 or policy is None:
                drafter.commit(n, decision.next_token, out)
            if toks is None:
                _sync(device)  # a device round was read back in full above; a host round may have work queued
            te = time.perf_counter()
            new, stop = clip_at_stop([*proposal.tokens[:n], decision.next_token], eos, emitted, max_new_tokens)
            x_last = decision.next_token
            if policy is not None and k_now > 0:
                k_now = policy.update(len(proposal.tokens), n, emitted + len(new),
                                      None if toks is not None else tv - ts, te - tv)
            if stop is None:  # launch the next round's draft before this round's bookkeeping: the GPU drafts meanwhile
                k, toks = next_round(emitted + len(new))
            kinds = decision.kinds[: len(new)]
            step = StepRecord(
                drafted=len(proposal.tokens),
                accepted=n,
                emitted=len(new),
                loose_accepted=sum(k_ == "loose" for k_ in kinds),
                shift_accepted=sum(k_ == "shift" for k_ in kinds),
                draft_s=tv - ts,
                verify_s=te - tv,
            )
            ts = te  # the next round starts where this one ended (its draft launch and this bookkeeping count in it)
            emitted += len(new)
            yield _Event(new, step)
            if stop is not None:
                _sync(device)  # the last commit's device work (if any) counts in the decode
                timings["finish"] = stop
                timings["decode_s"] = time.perf_counter() - t1
                return

    def warmup(self, request: Request | None = None, max_context: int | None = None,
               min_context: int = 0, max_new_tokens: int | None = None,
               request_tokens: int | None = None) -> dict[str, Any]:
        """Pay the one-time costs now (compilation, CUDA graphs, lazy set-up), before the first request.

        One short decode of ``request`` (default: a synthetic clip; ``max_new_tokens`` tokens, default two
        rounds) and, on the fast engine on CUDA, the graphs of every round's step lengths from
        ``min_context`` up to ``max_context`` cache positions, or, with ``request_tokens``, around where
        that decode left the caches (requests like it of up to that many tokens; :func:`vidspec.decoding.
        loops.warm.warm_up`). Keep the decoder and call :meth:`generate` for each request: they run warm.
        Returns ``{"warmup_s", "graphs", "detail"}``.
        """
        from vidspec.decoding.loops.warm import warm_up

        return warm_up(self, request=request, max_context=max_context, min_context=min_context,
                       max_new_tokens=max_new_tokens, request_tokens=request_tokens)

    @torch.inference_mode()
    def generate(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> GenerationResult:
        """Decode one request to the end.

        Args:
            request: video + prompt.
            max_new_tokens: hard cap on emitted tokens (the first, from prefill, included).
            temperature: 0 for greedy; > 0 samples (strict verification stays lossless in
                distribution). A drafter with a ``temperature`` drafts at this one (and ``top_p``)
                for this call, whatever it was built with.
            top_p: nucleus mass when sampling.
            seed: seeds the sampling RNG (shared with a sampling drafter).
        """
        generator = self._generator(max_new_tokens, temperature, top_p, seed)
        timings: dict = {}
        t0 = time.perf_counter()
        with self._drafting_as(temperature, top_p, generator):
            events = self._events(request, max_new_tokens, temperature, top_p, generator, timings)
            return collect_result(self.method, self.target, ((ev.token_ids, ev.step) for ev in events), timings, t0)

    @torch.inference_mode()
    def stream(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
               seed: int | None = None) -> Iterator[str]:
        """Yield text pieces as rounds finish (decoded incrementally by :func:`stream_text`)."""
        generator = self._generator(max_new_tokens, temperature, top_p, seed)
        # The drafter's settings come back when the stream ends or is closed (an abandoned stream:
        # when it is garbage-collected); interleaving two streams of one decoder is not supported.
        with self._drafting_as(temperature, top_p, generator):
            events = self._events(request, max_new_tokens, temperature, top_p, generator, {})
            yield from stream_text(self.target.decode, (ev.token_ids for ev in events))
