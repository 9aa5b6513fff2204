"""Tree decoding: an EAGLE-2-style dynamic draft tree verified in one target pass.

This is the tree loop, independent of the backend: the target is an eager adapter or a
:class:`~vidspec.decoding.fast.FastTarget` (both implement ``verify_tree``/``commit_tree``); the
tree data structures and tensor helpers are in :mod:`vidspec.decoding.trees`; the tree drafters
are :class:`~vidspec.decoding.fast.tree_drafter.TreeModelDrafter` (a draft VLM),
:class:`~vidspec.decoding.drafters.sparrow_tree.TreeSparrowDrafter` (a Sparrow draft, eager) and
:class:`~vidspec.decoding.fast.sparrow_tree_drafter.FastTreeSparrowDrafter` (the same on the device).

Usage::

    from vidspec.decoding.fast import FastTarget, TreeModelDrafter
    from vidspec.decoding.loops import TreeSpeculativeDecoder
    target = FastTarget(load_target("tiny-qwen2.5-vl"))
    drafter = TreeModelDrafter(FastTarget(load_target("tiny-qwen2.5-vl-draft")))
    dec = TreeSpeculativeDecoder(target, drafter, total_tokens=30, depth=4, top_k=8)
    result = dec.generate(Request("Describe the video.", clip), max_new_tokens=64)

**The tree** (EAGLE-2, built from the draft model's own distributions): the root is the last
emitted token ``x_last``; its ``top_k`` most likely children form depth 1. At each further depth
the current frontier (``top_k`` nodes) is run through the draft in one tree-masked pass, every
frontier node proposes its ``top_k`` most likely children, and the ``top_k`` children with the
highest *cumulative* draft log-probability become the next frontier. After ``depth`` levels all
generated nodes are reranked by cumulative log-probability and the best ``total_tokens`` are kept
(ties broken towards shallower nodes, so a kept node's parent is always kept).

**Tree attention and positions.** Every node attends to the committed prefix, to its ancestors
and to itself (:func:`~vidspec.decoding.trees.tree_mask_and_depth`). A node's position is the root's position plus its
depth: for Qwen2.5-VL the three M-RoPE axes of a text token are equal, so a node at depth ``d``
gets ``(p, p, p)`` with ``p = cache length + rope delta + d``, exactly the position it would have
in a chain; siblings share positions.

**Strict verification is lossless on a tree**: starting at the root, follow the child whose token
equals the target's argmax at the current node; stop when no child matches. The followed nodes are
accepted, the target's argmax at the last one is the bonus/correction token. This is the longest
path the target itself would have produced, so greedy output is token-identical to AR decoding.

**Loose verifiers (LVSpec, PST, FLy) on a tree** [choice]: the tree is reduced to its *best path*
and the chain verifier decides along it. The best path follows strict matches from the root as far
as they go (the strictly accepted path), then continues through the child with the highest
cumulative draft score down to a leaf. The chain verifier sees that path as a proposal, with the
target rows of its nodes as the verify output; its decision ``n`` keeps the first ``n`` path
nodes. A loose rule can therefore only extend the strict path, at the first mismatch and beyond,
along the draft's most confident continuation; with :class:`StrictVerifier` it reduces to the
strict tree rule above. The kept nodes' K/V were computed with tree attention over exactly their
ancestors, so keeping them is a cache compaction, never a recomputation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from vidspec.decoding.loops.chain import (
    AdaptiveDraftPolicy,
    clip_at_stop,
    collect_result,
    prepare_drafter,
    stream_text,
)
from vidspec.decoding.trees import DraftTree, best_path
from vidspec.decoding.types import (
    Decision,
    GenerationResult,
    Proposal,
    Request,
    StepRecord,
    TargetModel,
    TargetState,
    Verifier,
    VerifyContext,
    VerifyOutput,
)
from vidspec.decoding.verifiers.strict import StrictVerifier


class TreeDrafter(Protocol):
    """What :class:`TreeSpeculativeDecoder` needs from a tree drafter."""

    name: str
    need: frozenset[str]  # target outputs the drafter reads ("penult", ...), requested at prefill and verify

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None: ...

    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree: ...

    def commit(self, accepted: list[int], next_token: int, out: VerifyOutput | None = None) -> None: ...



def _rows(x: torch.Tensor | None, idx: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x.index_select(0, idx.to(x.device))  # no copy when idx is there already


class TreeSpeculativeDecoder:
    """Draft a dynamic tree, verify it in one target pass, keep the best accepted path.

    Greedy only (temperature 0). The target must implement ``verify_tree`` and ``commit_tree``
    (:class:`~vidspec.decoding.fast.FastTarget`, or the eager adapters).

    Args:
        target: the model whose output we want.
        drafter: a :class:`TreeModelDrafter` or :class:`~vidspec.decoding.drafters.sparrow_tree.TreeSparrowDrafter`
            (its ``need`` joins the verifier's; its ``commit`` gets the target's rows of the kept path).
        verifier: a chain verifier applied along the best path (default strict, lossless).
        total_tokens: draft nodes kept per tree (the verify pass runs ``total_tokens + 1``).
        depth: tree depth (draft passes per round).
        top_k: children per expanded node and frontier width.
        method: label carried into results.
        device_rounds: when the drafter grows its tree on the device (``propose_tree_device``,
            :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`) and the target verifies device trees
            (``verify_tree_device``, :class:`~vidspec.decoding.fast.FastTarget`), the rerank and the
            verify tree's mask are built on the device and the verify step is launched right after
            the growth, with one synchronisation per round (the same trees and decisions; ``draft_s``
            is then the growth's launch, as in :class:`~vidspec.decoding.loops.SpeculativeDecoder`).
        adaptive: an :class:`~vidspec.decoding.loops.chain.AdaptiveDraftPolicy` choosing each round's tree
            depth from the request's own acceptance, as it chooses a chain's K: a round of depth ``d`` costs
            ``d`` draft passes (``c`` each) and can accept up to ``d`` tokens along its path; when the
            accepted path no longer pays for the passes the depth halves, and at 0 the request decodes on as
            plain AR (the drafter is neither asked for trees nor told of tokens until the next request).
            None: always ``depth``. What it did in the last request is :attr:`last_adaptation`.
    """

    def __init__(self, target, drafter: TreeDrafter, verifier: Verifier | None = None, total_tokens: int = 30,
                 depth: int = 4, top_k: int = 8, method: str = "tree-sd", device_rounds: bool = True,
                 adaptive: AdaptiveDraftPolicy | None = None):
        if total_tokens < 1 or depth < 1 or top_k < 1:
            raise ValueError("total_tokens, depth and top_k must be >= 1")
        self.target = target
        self.drafter = drafter
        self.verifier = verifier or StrictVerifier()
        self.total_tokens = total_tokens
        self.depth = depth
        self.top_k = top_k
        self.method = method
        self.device_rounds = device_rounds
        self.adaptive = adaptive
        self._adapted = False  # whether the policy ran in the last request

    @property
    def k(self) -> int:
        """The most draft tokens one round can accept (the tree's depth; a chain decoder's K)."""
        return self.depth

    @property
    def last_adaptation(self) -> dict | None:
        """What the adaptive policy did in the last request (:meth:`AdaptiveDraftPolicy.record`, its
        ``k_history`` being tree depths; None when no policy ran or the request ended at its first token)."""
        return self.adaptive.record() if self._adapted and self.adaptive is not None else None

    def _rounds(self, request: Request, max_new_tokens: int, timings: dict) -> Iterator[tuple[list[int], StepRecord | None]]:
        target, drafter, verifier = self.target, self.drafter, self.verifier
        device = target.device
        eos = target.eos_token_ids
        need_verify = frozenset(drafter.need | verifier.need)
        need_prefill = need_verify | ({"visual"} if "mid" in verifier.need else frozenset())
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self._adapted = False
        sync()
        t0 = time.perf_counter()
        state = target.prefill(request, need_prefill)
        timings["draft_prefill_s"] = prepare_drafter(drafter, target, state)
        first = int(state.first_logits.argmax())
        sync()
        t1 = time.perf_counter()
        timings["prefill_s"] = t1 - t0
        yield [first], None
        emitted = 1
        if first in eos or emitted >= max_new_tokens:
            timings.update(finish="eos" if first in eos else "length", decode_s=0.0)
            return
        tb = time.perf_counter()
        drafter.begin(target, state, first)
        timings["begin_s"] = time.perf_counter() - tb  # host time (the prompt's part ran in prepare, in the prefill)
        ctx = VerifyContext(state=state, stop_ids=eos)
        x_last = first
        on_device = (self.device_rounds and callable(getattr(drafter, "propose_tree_device", None))
                     and callable(getattr(target, "verify_tree_device", None)))
        policy = self.adaptive
        self._adapted = policy is not None
        if policy is not None:
            policy.start(self.depth)
        depth_now = self.depth  # the policy's depth (0 once drafting stopped for this request)

        def next_round(emitted: int):
            """The next round's depth (never past the budget) and, for a device round, its growth launched
            now: growth, rerank and the verify inputs stay on the device (None: a host round)."""
            depth = max(0, min(depth_now, max_new_tokens - emitted - 1))
            grow = on_device and depth > 0
            return depth, (drafter.propose_tree_device(depth, self.top_k, self.total_tokens) if grow else None)  # type: ignore[attr-defined]

        ts = time.perf_counter()
        depth, dtree = next_round(emitted)
        while True:
            if dtree is not None:
                tv = time.perf_counter()
                out, (tokens, parents, scores, argmax) = target.verify_tree_device(  # type: ignore[attr-defined]
                    state, x_last, dtree, need_verify)  # one synchronisation reads it all
            else:
                tree = drafter.propose_tree(depth, self.top_k, self.total_tokens) if depth > 0 else DraftTree((), (), ())
                sync()
                tv = time.perf_counter()
                tokens, parents = tree.with_root(x_last)
                scores = [0.0, *tree.scores]
                out = target.verify_tree(state, tokens, parents, need_verify)
                # A FastTarget's verify step computes the greedy tokens on the device already.
                greedy = getattr(out, "argmax", None)
                argmax = (greedy if greedy is not None else out.logits.argmax(-1)).tolist()
            path, matched = best_path(tokens, parents, scores, argmax)
            idx = torch.tensor(path, dtype=torch.long).to(out.logits.device)  # one copy for every gather
            chain = VerifyOutput(
                logits=_rows(out.logits, idx),
                hidden_last=_rows(out.hidden_last, idx),
                hidden_penult=_rows(out.hidden_penult, idx),
                hidden_mid=_rows(out.hidden_mid, idx),
            )
            proposal = Proposal(tuple(tokens[n] for n in path[1:]))
            if type(verifier) is StrictVerifier:
                # Greedy strict verification along the path is the match count best_path found (it
                # follows matching children first): no second argmax and host read of the logits.
                decision: Decision = Decision(matched, argmax[path[matched]], ("strict",) * matched)
            else:
                decision = verifier.verify(proposal, chain, ctx)
            n = decision.n_accepted
            target.commit_tree(state, path[: n + 1])
            accepted = list(proposal.tokens[:n])
            if depth_now > 0 or policy is None:  # a stopped drafter is left alone (its state is the request's)
                drafter.commit(accepted, decision.next_token, chain)  # chain: the target's rows of the path
            if dtree is None:
                sync()  # a device round was read back in full above; its commit's work is queued in order
            te = time.perf_counter()
            new, stop = clip_at_stop([*accepted, decision.next_token], eos, emitted, max_new_tokens)
            x_last = decision.next_token
            if policy is not None and depth_now > 0 and depth > 0:
                # drafted: the round's depth (its draft passes, the most its path can accept)
                depth_now = policy.update(depth, n, emitted + len(new), None if dtree is not None else tv - ts,
                                          te - tv)
            if stop is None:  # the next growth is launched before this round's bookkeeping, as for chains
                depth, dtree = next_round(emitted + len(new))
            kinds = decision.kinds[: len(new)]
            step = StepRecord(drafted=len(tokens) - 1, accepted=n, emitted=len(new),
                              loose_accepted=sum(k == "loose" for k in kinds),
                              shift_accepted=sum(k == "shift" for k in kinds), draft_s=tv - ts, verify_s=te - tv)
            ts = te  # the next round starts where this one ended
            emitted += len(new)
            yield new, step
            if stop is not None:
                sync()  # the last commit's device work (the KV compaction) counts in the decode
                timings.update(finish=stop, decode_s=time.perf_counter() - t1)
                return

    @staticmethod
    def _check(max_new_tokens: int, temperature: float) -> None:
        if temperature > 0:
            raise ValueError("tree decoding is greedy only (temperature 0)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")

    def warmup(self, request: Request | None = None, max_context: int | None = None,
               min_context: int = 0, max_new_tokens: int | None = None,
               request_tokens: int | None = None) -> dict[str, Any]:
        """Pay the one-time costs now (compilation, lazy set-up) with one short decode of ``request`` (default:
        a synthetic clip) and, with ``request_tokens``, the CUDA graphs of requests like it; see
        :func:`vidspec.decoding.loops.warm.warm_up`. Returns ``{"warmup_s", "graphs", "detail"}``."""
        from vidspec.decoding.loops.warm import warm_up

        return warm_up(self, request=request, max_context=max_context, min_context=min_context,
                       max_new_tokens=max_new_tokens, request_tokens=request_tokens)

    @torch.inference_mode()
    def generate(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> GenerationResult:
        """Decode one request greedily to the end (see :meth:`SpeculativeDecoder.generate`).

        ``top_p`` and ``seed`` are accepted for the same call signature and have no effect (greedy).
        """
        self._check(max_new_tokens, temperature)
        timings: dict = {}
        return collect_result(self.method, self.target, self._rounds(request, max_new_tokens, timings), timings,
                              time.perf_counter())

    @torch.inference_mode()
    def stream(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
               seed: int | None = None) -> Iterator[str]:
        """Yield text pieces as rounds finish, decoded as :meth:`SpeculativeDecoder.stream` decodes them."""
        self._check(max_new_tokens, temperature)
        yield from stream_text(self.target.decode, (new for new, _ in self._rounds(request, max_new_tokens, {})))
