"""Scripted stand-ins for targets and drafters, for exact tests of the decoding loop.

A :class:`ScriptedTarget` is a language model over a tiny vocabulary whose next-token logits are
a pure function of the sequence so far, so the "right answer" of every test is computable by
hand. A :class:`ScriptedDrafter` proposes from a table or a function. Together they make the
always / never / partial-accept cases exact (decoding tests assert exact tokens, not tolerances).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vidspec.decoding.types import Proposal, Request, TargetState, VerifyOutput

LogitFn = Callable[[Sequence[int]], torch.Tensor]


def sequence_logits(script: Sequence[int], vocab: int, eos: int | None = None) -> LogitFn:
    """Logits that make greedy decoding emit ``script`` (then ``eos`` or the last token forever)."""

    def fn(seq: Sequence[int]) -> torch.Tensor:
        i = len(seq)
        tok = script[i] if i < len(script) else (eos if eos is not None else script[-1])
        out = torch.full((vocab,), -10.0)
        out[tok] = 10.0
        return out

    return fn


class _Tok:
    """The minimum tokenizer surface verifiers ask for: ids as text and back."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(f"t{i}" for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(self.vocab)}

    def __len__(self) -> int:
        return self.vocab


class ScriptedTarget:
    """A :class:`~vidspec.decoding.types.TargetModel` whose logits come from ``logit_fn(generated)``.

    The "cache" is the list of generated tokens fed so far, so rollback is exact and cheap. It
    counts verify calls and the tokens each call saw, for assertions.

    Args:
        logit_fn: maps the generated tokens so far (after the prompt) to ``(V,)`` logits.
        vocab: vocabulary size.
        eos: the end-of-sequence id (or None).
        hidden: size of the fake hidden states returned when asked (their values are the
            one-hot of the input token, so tests can check which positions they come from).
    """

    family = "scripted"
    provides: frozenset[str] = frozenset({"last", "penult", "mid"})

    def __init__(self, logit_fn: LogitFn, vocab: int = 8, eos: int | None = None, hidden: int = 4):
        self.logit_fn = logit_fn
        self.vocab_size = vocab
        self.eos_token_ids = frozenset([eos]) if eos is not None else frozenset()
        self.tokenizer = _Tok(vocab)
        self.model = torch.nn.Linear(1, 1)
        self.hidden = hidden
        self.name = "scripted"
        self.calls: list[list[int]] = []

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def prefill(self, request: Request, need: frozenset[str] = frozenset()) -> TargetState:
        return TargetState(request=request, prompt_ids=torch.zeros(1, dtype=torch.long), cache=[], length=1,
                           first_logits=self.logit_fn([]).float())

    def verify(self, state: TargetState, tokens: list[int], need: frozenset[str] = frozenset()) -> VerifyOutput:
        self.calls.append(list(tokens))
        seq: list[int] = state.cache
        rows = []
        for t in tokens:
            seq.append(t)
            rows.append(self.logit_fn(seq))
        state.length += len(tokens)
        hid = torch.nn.functional.one_hot(torch.tensor(tokens) % self.hidden, self.hidden).float()
        return VerifyOutput(
            logits=torch.stack(rows).float(),
            hidden_last=hid if "last" in need else None,
            hidden_penult=hid if "penult" in need else None,
            hidden_mid=hid if "mid" in need else None,
        )

    def rollback(self, state: TargetState, length: int) -> None:
        del state.cache[length - 1:]
        state.length = length

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)


class ScriptedDrafter:
    """Proposes ``propose_fn(committed_tokens, k)``; optionally with draft distributions.

    Args:
        propose_fn: maps the committed tokens (first token included) and k to a list of drafts.
        probs_fn: maps the same to ``(k, V)`` draft distributions (for sampling tests), or None.
    """

    name = "scripted"
    need: frozenset[str] = frozenset()

    def __init__(self, propose_fn: Callable[[list[int], int], list[int]],
                 probs_fn: Callable[[list[int], int], torch.Tensor] | None = None):
        self.propose_fn = propose_fn
        self.probs_fn = probs_fn
        self.committed: list[int] = []
        self._draft: list[int] = []
        self.proposals: list[list[int]] = []

    def begin(self, target, state: TargetState, first_token: int) -> None:
        self.committed = [first_token]

    def propose(self, k: int) -> Proposal:
        if k <= 0:
            self._draft = []
            return Proposal(())
        if self.probs_fn is not None:
            probs = self.probs_fn(self.committed, k)
            draft = [int(torch.multinomial(probs[i], 1)) for i in range(k)]
            self._draft = draft
            self.proposals.append(draft)
            return Proposal(tuple(draft), probs)
        draft = list(self.propose_fn(self.committed, k))[:k]
        self._draft = draft
        self.proposals.append(draft)
        return Proposal(tuple(draft))

    def commit(self, n_accepted: int, next_token: int, out: VerifyOutput) -> None:
        self.committed += self._draft[:n_accepted] + [next_token]


def oracle_drafter(script: Sequence[int], wrong_at: Callable[[int], bool] = lambda i: False,
                   vocab: int = 8) -> ScriptedDrafter:
    """Drafts the true continuation of ``script``, except at absolute positions where ``wrong_at``.

    A wrong draft is ``(true + 1) % vocab``.
    """

    def fn(committed: list[int], k: int) -> list[int]:
        start = len(committed)
        out = []
        for i in range(start, start + k):
            true = script[i] if i < len(script) else script[-1]
            out.append((true + 1) % vocab if wrong_at(i) else true)
        return out

    return ScriptedDrafter(fn)


def random_clip(num_frames: int, seed: int = 0, height: int = 56, width: int = 84):
    """An in-memory clip of random frames (tests of the visual path that need no real video)."""
    import numpy as np

    from vidspec.decoding.types import VideoClip

    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 255, (num_frames, height, width, 3), dtype=np.uint8)
    return VideoClip(frames=frames, fps=4.0, source="memory")


def count_video_reads(monkeypatch) -> list[str]:
    """Make every read of a video file append its path to the returned list (pytest's ``monkeypatch``), for tests of
    how often a run reads each video."""
    from vidspec.decoding import video

    reads: list[str] = []
    original = video.read_video

    def counting(path, *args, **kwargs):
        reads.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(video, "read_video", counting)
    return reads


def text_positions(target, request: Request) -> int:
    """Prompt positions of ``request`` that are not visual placeholders."""
    ids, _ = target.build_prompt(request)
    return int((ids != target.video_token_id).sum())


# ---- FastSparrowDrafter's graph path, emulated on CPU ---------------------------------------------------
class _ReplayByRerun:
    """A stand-in CUDA graph on CPU: replay reruns the captured chain and writes its static output buffers."""

    def __init__(self, drafter, key: tuple[int, int, int], out):
        self.drafter, self.key, self.out = drafter, key, out
        self.replays = 0

    def replay(self) -> None:
        new = self.drafter._chain(*self.key)
        for a, b in ((self.out.hidden, new.hidden), (self.out.logits, new.logits), (self.out.argmax, new.argmax)):
            a.copy_(b)
        self.replays += 1


def emulated_graph_drafter_class():
    """A :class:`~vidspec.decoding.fast.sparrow_drafter.FastSparrowDrafter` subclass running its graph path on CPU.

    Everything but ``torch.cuda.graph`` itself: bucketed attention, capture-time warm-ups and
    restores, one "graph" per ``(T, k, bucket)`` chain whose replay reruns the chain into the static
    output buffers. (A function, so importing this module does not import the fast path.)
    """
    from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter, _Graph

    class EmulatedGraphDrafter(FastSparrowDrafter):
        def _engine(self):
            e = super()._engine()
            self._use_graphs = True
            self._bucketed = not e.kernels  # the kernel path reads exactly the valid cache
            return e

        def _record(self, key):
            snap = self._snapshot()
            out = self._chain(*key)  # a real capture does not execute: undo the chaining writes
            self._restore(snap)
            return _Graph(_ReplayByRerun(self, key, out), out)

    return EmulatedGraphDrafter


def aligned_sparrow(target):
    """A Sparrow draft that often agrees with a tiny random target, for tests that need accepted drafts.

    Its FC passes the token embedding through (z_t = e_t) and its layer is a copy of the target's last
    layer, so it is the target with the first layers skipped: in a tiny random model the residual
    stream is mostly the embedding, and the draft predicts the target's token often.
    """
    from vidspec.decoding.drafters.sparrow import new_sparrow_for

    m = new_sparrow_for(target)
    d = m.config.hidden_size
    with torch.no_grad():
        m.fc.weight.zero_()
        m.fc.weight[:, :d].copy_(torch.eye(d))
        m.layer.load_state_dict(target.model.model.language_model.layers[-1].state_dict())
    return m


def begin_drafter(target, drafter, request: Request, need: frozenset[str] = frozenset({"penult"})):
    """Prefill ``request`` (keeping ``need``), start ``drafter`` on its greedy first token: ``(state, first)``."""
    state = target.prefill(request, need)
    first = int(state.first_logits.argmax())
    drafter.begin(target, state, first)
    return state, first


def device_round_runs(build: Callable[[bool], object], request: Request, max_new_tokens: int, spy: str):
    """Decode ``request`` with device rounds on, then off, counting calls of the target's ``spy`` method.

    Args:
        build: ``device_rounds -> decoder`` (a fresh decoder, with a fresh target, per call).
        spy: the target method a device round calls (``verify_device`` or ``verify_tree_device``).

    Returns:
        ``([result_on, result_off], [calls_on, calls_off])``.
    """
    results, calls = [], []
    for on in (True, False):
        dec = build(on)
        seen: list[int] = []
        orig = getattr(dec.target, spy)
        setattr(dec.target, spy, lambda *a, orig=orig, seen=seen, **kw: seen.append(1) or orig(*a, **kw))
        results.append(dec.generate(request, max_new_tokens=max_new_tokens))
        calls.append(len(seen))
    return results, calls


def assert_same_rounds(on, off, ar) -> None:
    """Device rounds (``on``) against host-driven rounds (``off``): the same tokens as each other and as
    AR, and the same rounds (tokens drafted and accepted per round)."""
    assert on.token_ids == off.token_ids == ar.token_ids
    assert [(s.drafted, s.accepted) for s in on.steps] == [(s.drafted, s.accepted) for s in off.steps]


class InterruptOnDel:
    """Wraps a video reader; freeing it delivers a real SIGINT while its ``__del__`` runs.

    That is where a Ctrl-C is lost without care: Python only prints a ``KeyboardInterrupt`` raised in a finaliser.
    """

    def __init__(self, inner, armed: Callable[[], bool]):
        self._inner = inner
        self._armed = armed

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __len__(self):
        return len(self._inner)

    def __del__(self):
        if self._armed():
            import signal

            signal.raise_signal(signal.SIGINT)  # the default handler raises KeyboardInterrupt here...
            self._inner = None  # ...at the next bytecode of this finaliser, where Python only prints it


def interrupt_reader_cleanup(monkeypatch, when: Callable[[int], bool]) -> dict[str, int]:
    """Patch decord's reader so that freeing the ``n``-th opened reader is interrupted where ``when(n)``.

    Returns the counter of opened readers (``{"n": ...}``). Skips the calling test without decord.
    """
    import pytest

    from vidspec.decoding import video

    if not video.AutoReader.decord_available():
        pytest.skip("decord is not installed")
    real = video.DecordReader._open
    count = {"n": 0}

    def _open(self, path):
        count["n"] += 1
        n = count["n"]
        return InterruptOnDel(real(self, path), lambda: when(n))

    monkeypatch.setattr(video.DecordReader, "_open", _open)
    return count
