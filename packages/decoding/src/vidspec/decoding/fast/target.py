"""``FastTarget``: the TargetModel protocol on :class:`FastLM` (static cache, CUDA graphs).

Usage::

    from vidspec.decoding import SpeculativeDecoder, load_target
    from vidspec.decoding.fast import FastTarget, FastModelDrafter, FastStrictVerifier

    target = FastTarget(load_target("Qwen/Qwen2.5-VL-7B-Instruct", device="cuda"), max_len=32768)
    draft = FastModelDrafter(FastTarget(load_target("Qwen/Qwen2.5-VL-3B-Instruct", device="cuda")))
    dec = SpeculativeDecoder(target, draft, FastStrictVerifier(), k=8)

Everything the family adapter knows (chat prompt, pixel tensors, M-RoPE prompt positions, the
vision tower) is still the adapter's: FastTarget asks it for the prompt, the video features and the
prompt positions, then runs the language model itself. Drafters and verifiers written for the
eager adapter work unchanged (the cache answers ``get_seq_length``/``crop`` like an HF cache).

One request at a time per FastTarget: ``prefill`` resets its cache. Use one FastTarget per role
(a module used as target and draft needs two FastTargets).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vidspec.decoding.drafters import ModelDrafter
from vidspec.decoding.fast.lm import FastLM, StaticKVCache, StepOutput, TreeSession
from vidspec.decoding.models.base import HFVideoTarget, sdpa_backends
from vidspec.decoding.types import (
    Decision,
    Proposal,
    Request,
    TargetState,
    VerifyContext,
    VerifyOutput,
)
from vidspec.decoding.verifiers.lvspec import KIND_CODES
from vidspec.decoding.verifiers.strict import StrictVerifier

#: Default ``max_tree``: the largest verify step / tree session a FastTarget runs as a CUDA graph.
DEFAULT_MAX_TREE = 64

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastVerifyOutput(VerifyOutput):
    """A :class:`VerifyOutput` that also carries the device-side greedy acceptance of a chain.

    Attributes:
        argmax: ``(K+1,) int64`` the target's greedy token per row (on the model's device).
        accept_host: ``(2,) int64`` host tensor (pinned on CUDA) that receives
            ``[n_accepted, next_token]`` asynchronously; read it with :meth:`greedy`.
        ready: CUDA event recorded after the copy (None on CPU).
    """

    argmax: torch.Tensor | None = None
    accept_host: torch.Tensor | None = None
    ready: Any = None
    draft_host: torch.Tensor | None = None
    loose_host: torch.Tensor | None = None
    loose_spec: Any = None

    def greedy(self) -> tuple[int, int]:
        """``(n_accepted, next_token)`` of strict greedy verification (one host sync at most)."""
        assert self.accept_host is not None
        if self.ready is not None:
            self.ready.synchronize()
        n, nxt = self.accept_host.tolist()
        return int(n), int(nxt)

    def loose_decision(self, k: int) -> Decision | None:
        """The decision of the loose rule ``loose_spec`` computed inside the verify step of ``k`` drafts
        (:meth:`FastTarget.set_loose`), read under the step's event; None when this step has none."""
        if self.loose_host is None or self.loose_host.shape[0] != k + 2:
            return None
        if self.ready is not None:
            self.ready.synchronize()
        n, nxt, *kinds = self.loose_host.tolist()
        return Decision(int(n), int(nxt), tuple(KIND_CODES[c] for c in kinds[:n]))

    def draft_tokens(self) -> list[int]:
        """The draft tokens of a :meth:`FastTarget.verify_device` step, read on the host (after :meth:`greedy`'s sync)."""
        assert self.draft_host is not None, "not a verify_device output"
        if self.ready is not None:
            self.ready.synchronize()
        return [int(x) for x in self.draft_host.tolist()]


class FastStrictVerifier(StrictVerifier):
    """Strict verification that takes the greedy decision computed on the device.

    With a :class:`FastTarget` at temperature 0 the argmax comparison and the accepted-prefix
    length (a cumprod) run inside the verify step's graph; this verifier only waits for the
    2-integer result, one synchronisation per round. Any other case falls back to
    :class:`StrictVerifier` (identical decisions).
    """

    name = "strict"

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        if (ctx.temperature <= 0 and isinstance(out, FastVerifyOutput) and out.accept_host is not None
                and out.logits.shape[0] == len(proposal.tokens) + 1):
            n, nxt = out.greedy()
            return Decision(n, nxt, ("strict",) * n)
        return super().verify(proposal, out, ctx)


@functools.lru_cache(maxsize=128)
def _tril(t: int) -> torch.Tensor:
    """Causal ``(t, t)`` chain mask (cached: built once per length, only ever read).

    Built outside inference mode, so it keeps a version counter (FastLM skips re-copying an unchanged mask).
    """
    with torch.inference_mode(False):
        return torch.ones(t, t, dtype=torch.bool).tril()


class FastTarget:
    """A family adapter's model run through :class:`FastLM` (and, for Qwen2.5-VL, the fast vision path).

    Args:
        adapter: the eager adapter (:class:`HFVideoTarget` subclass); its HF module's weights are used
            in place.
        max_len: KV cache capacity (prompt + generated tokens + one verify/tree block).
        graphs: capture decode/verify steps as CUDA graphs (CUDA only).
        compile: fuse per-layer elementwise work with ``torch.compile`` (CUDA only; None = when
            Triton is importable).
        prefill_chunk: prompt positions per LM prefill chunk (bounds activation memory for long
            videos; the result equals a one-shot prefill). The default runs a 25k-token video in one
            chunk: on the H200 at 7B shapes, 8k chunks took 1.07 s against 0.87 s in one piece
            (a later chunk attends with a lower-right causal mask over the whole cache, and the
            elementwise work is split into more launches).
        fast_vision: use :class:`~vidspec.decoding.fast.vision.FastQwenVision` for Qwen2.5-VL.
        bucket: graph-mode attention reads the cache up to a multiple of this many slots.
        max_tree: largest verify step / tree session captured as a graph (region mask width).
        fuse, kernels, compile_mode, gemv: :class:`FastLM` options (fused q/k/v and gate/up weights,
            Triton step kernels, ``torch.compile`` mode, Triton small-M weight products); None picks
            FastLM's defaults.
    """

    #: The ``need`` names :meth:`verify` honours (as the eager adapter).
    provides: frozenset[str] = frozenset({"last", "penult", "mid"})

    def __init__(self, adapter: HFVideoTarget, max_len: int = 8192, graphs: bool = True, compile: bool | None = None,
                 prefill_chunk: int = 32768, fast_vision: bool = True, bucket: int = 256, max_tree: int = DEFAULT_MAX_TREE,
                 fuse: bool | None = None, kernels: bool | None = None, compile_mode: str | None = None,
                 gemv: bool | str = False):
        if isinstance(adapter, FastTarget):
            raise TypeError("FastTarget wraps an eager adapter, not another FastTarget")
        self.adapter = adapter
        self.model = adapter.model
        self.family = adapter.family
        self.name = adapter.name
        self.tokenizer = adapter.tokenizer
        self.eos_token_ids = adapter.eos_token_ids
        self.vocab_size = adapter.vocab_size
        self.num_layers = adapter.num_layers
        self.hidden_size = adapter.hidden_size
        self.relevance_layer = adapter.relevance_layer
        self.video_token_id = adapter.video_token_id
        self.prefill_chunk = prefill_chunk
        hidden = {"penult": self.num_layers - 1, "mid": self.relevance_layer, "last": self.num_layers}
        self.lm = FastLM(adapter.model.model.language_model, adapter.model.lm_head, max_len=max_len,
                         hidden_layers=hidden, graphs=graphs, compile=compile, bucket=bucket, max_tree=max_tree,
                         max_step=max_tree, fuse=fuse, kernels=kernels, compile_mode=compile_mode,
                         gemv=gemv)
        self.vision = None
        if fast_vision and self.family == "qwen2.5-vl":
            from vidspec.decoding.fast.vision import FastQwenVision

            self.vision = FastQwenVision(adapter.model.model.visual)
        on_cuda = self.device.type == "cuda"
        self._accept_host = torch.zeros(2, dtype=torch.long, pin_memory=on_cuda)
        self._draft_host = torch.zeros(max_tree, dtype=torch.long, pin_memory=on_cuda)
        self._loose_host = torch.zeros(max_tree + 2, dtype=torch.long, pin_memory=on_cuda)
        #: loose rules seen (LooseSpec -> key of FastLM.set_loose), the one chain verify steps apply now and its key
        self._loose_keys: dict[Any, int] = {}
        self._loose_spec: Any = None
        self._loose_key: int | None = None

    def set_loose(self, spec: Any) -> None:
        """Apply a greedy loose rule (:class:`~vidspec.decoding.verifiers.lvspec.LooseSpec`) inside the chain
        verify steps from now on, or none (None): each step then brings the rule's decision back with its
        other outputs (:meth:`FastVerifyOutput.loose_decision`). Every :meth:`prefill` (a new request) clears
        it, and a ``SpeculativeDecoder`` whose verifier has a rule sets it after the prefill, so the methods
        sharing this target each run with their own rule (their own CUDA graphs) or with none."""
        if spec is not None and spec not in self._loose_keys:
            key = self._loose_keys[spec] = len(self._loose_keys)
            self.lm.set_loose(key, spec.protected, spec.eps, spec.shift, spec.window)
        self._loose_spec = spec
        self._loose_key = None if spec is None else self._loose_keys[spec]

    # ---- adapter passthroughs -----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.adapter.device

    @property
    def graphs(self) -> bool:
        return self.lm.graphs

    def build_prompt(self, request: Request):
        return self.adapter.build_prompt(request)

    def read_video(self, path: str):
        return self.adapter.read_video(path)

    def prefill_positions(self, input_ids: torch.Tensor, visual):
        """The adapter's prompt position ids (M-RoPE for Qwen2.5-VL); a SparrowDrafter reads them."""
        return self.adapter.prefill_positions(input_ids, visual)

    def decode(self, token_ids: list[int]) -> str:
        return self.adapter.decode(token_ids)

    def video_features(self, visual) -> torch.Tensor:
        """``(L_vis, d)`` LM inputs for the visual placeholders (fast vision path when available)."""
        if self.vision is not None:
            return self.vision(visual.tensors["pixel_values_videos"], visual.tensors["video_grid_thw"])
        return self.adapter.video_features(visual)

    def __repr__(self) -> str:
        return f"FastTarget({self.adapter!r}, graphs={self.lm.graphs}, compiled={self.lm.compiled})"

    # ---- protocol -------------------------------------------------------------------------------
    def _check(self, state: TargetState) -> StaticKVCache:
        cache = state.cache
        if not isinstance(cache, StaticKVCache) or cache is not self.lm.cache:
            raise RuntimeError("this state's cache was replaced by a newer prefill on the same FastTarget "
                               "(one live request per FastTarget)")
        if cache.length != state.length:  # someone cropped the cache or set state.length directly
            cache.length = min(cache.length, state.length)
            state.length = cache.length
        return cache

    @torch.inference_mode()
    def prefill(self, request: Request, need: frozenset[str] = frozenset()) -> TargetState:
        # Each prompt has a length of its own: no per-shape cuDNN attention plans (models.base.sdpa_backends).
        with sdpa_backends(self.device):
            return self._prefill(request, need)

    def _prefill(self, request: Request, need: frozenset[str]) -> TargetState:
        self.set_loose(None)  # a new request: no loose rule until its decoder sets one
        a = self.adapter
        ids, visual = a.build_prompt(request)
        dev = self.device
        input_ids = ids[None].to(dev)
        embeds = a.embed(input_ids)[0]
        visual_positions = torch.nonzero(ids == a.video_token_id).flatten()
        vis_dev = visual_positions.to(dev)  # once, before the LM prefill is queued (a pageable copy waits for the stream)
        if visual is not None:
            feats = self.video_features(visual).to(embeds.dtype)
            if feats.shape[0] != visual.num_tokens:
                raise RuntimeError(f"{self.family}: {feats.shape[0]} video features for {visual.num_tokens} placeholders")
            embeds[vis_dev] = feats
        positions, offset = a.prefill_positions(input_ids, visual)
        n = ids.shape[0]
        # The host copies before the LM prefill is queued: read after it, they would wait for the whole
        # prefill, and a drafter's prepare (engine.prepare_drafter) could not run beside it.
        positions = positions.reshape(-1, n)
        host_positions, offset = positions.cpu(), int(offset)
        pos3 = positions.to(dev)
        if pos3.shape[0] == 1:
            pos3 = pos3.expand(3, n)
        cache = self.lm.new_cache()
        want_hidden = bool(need & {"penult", "mid", "visual"})
        chunk = max(1, self.prefill_chunk)
        pieces: dict[str, list[torch.Tensor]] = {"penult": [], "mid": []}
        logits = None
        for c in range(0, n, chunk):
            e = min(n, c + chunk)
            lg, hid = self.lm.prefill_chunk(embeds[c:e], pos3[:, c:e], c, want_hidden, last_logits=e == n)
            if lg is not None:
                logits = lg
            if want_hidden:
                pieces["penult"].append(hid["penult"])
                pieces["mid"].append(hid["mid"])
        assert logits is not None
        state = TargetState(
            request=request,
            prompt_ids=ids,
            cache=cache,
            length=n,
            first_logits=logits.clone(),
            visual_positions=visual_positions,
            relevance_layer=self.relevance_layer,
            # The prompt's RoPE positions ((3, L) or (1, L), host): a Sparrow draft reuses them.
            extra={"offset": offset, "visual": visual, "positions": host_positions},
        )
        if want_hidden:
            if "penult" in need:
                state.prompt_hidden_penult = torch.cat(pieces["penult"]).clone()
            if need & {"mid", "visual"} and visual is not None:
                state.visual_hidden = torch.cat(pieces["mid"])[vis_dev].clone()
        return state

    def _output(self, out: StepOutput, need: frozenset[str], chain: bool,
                draft: torch.Tensor | None = None) -> FastVerifyOutput:
        # Clone out of the static buffers: a drafter may keep hidden states past the next step.
        t = out.logits.shape[0]
        accept_host, ready, draft_host, loose_host = None, None, None, None
        if draft is not None:  # read back with the acceptance, under the same event
            draft_host = self._draft_host[:draft.shape[0]]
            draft_host.copy_(draft, non_blocking=True)
        if out.loose is not None:  # the loose rule's decision: the same event covers it
            loose_host = self._loose_host[:out.loose.shape[0]]
            loose_host.copy_(out.loose, non_blocking=True)
        if chain:
            self._accept_host.copy_(out.accept, non_blocking=True)
            accept_host = self._accept_host
            if out.accept.is_cuda:
                ready = torch.cuda.Event()
                ready.record()
        return FastVerifyOutput(
            logits=out.logits.clone(),
            hidden_last=out.hidden["last"][:t].clone() if "last" in need else None,
            hidden_penult=out.hidden["penult"][:t].clone() if "penult" in need else None,
            hidden_mid=out.hidden["mid"][:t].clone() if "mid" in need else None,
            argmax=out.argmax.clone(),
            accept_host=accept_host,
            ready=ready,
            draft_host=draft_host,
            loose_host=loose_host,
            loose_spec=self._loose_spec if loose_host is not None else None,
        )

    @torch.inference_mode()
    def verify(self, state: TargetState, tokens: list[int], need: frozenset[str] = frozenset()) -> FastVerifyOutput:
        cache = self._check(state)
        cache.tree = None
        t = len(tokens)
        start = state.length
        out = self.lm.step(list(tokens), start, start, state.extra["offset"], list(range(t)), _tril(t),
                           loose=self._loose_key)
        state.length = cache.length = start + t
        return self._output(out, need, chain=True)

    @torch.inference_mode()
    def verify_device(self, state: TargetState, x_last: int, draft: torch.Tensor,
                      need: frozenset[str] = frozenset()) -> FastVerifyOutput:
        """:meth:`verify` of ``[x_last, *draft]`` with the draft tokens still on the device.

        The tokens go from the draft's output buffer into this step's inputs on the device (stream
        order), so the host launches the verify step right after the draft's without waiting for
        the draft to finish; the acceptance ``[n, next]`` and the draft tokens come back together,
        under one event (:meth:`FastVerifyOutput.greedy`, :meth:`FastVerifyOutput.draft_tokens`).

        Args:
            draft: ``(K,) int64`` draft tokens on the model's device (read before the next draft).
        """
        cache = self._check(state)
        cache.tree = None
        k = int(draft.shape[0])
        t = k + 1
        start = state.length
        out = self.lm.step([x_last] + [0] * k, start, start, state.extra["offset"], list(range(t)), _tril(t),
                           tail_ids=draft, loose=self._loose_key)
        state.length = cache.length = start + t
        return self._output(out, need, chain=True, draft=draft)

    def rollback(self, state: TargetState, length: int) -> None:
        cache = self._check(state)
        if length > state.length:
            raise ValueError(f"cannot roll forward from {state.length} to {length}")
        cache.crop(length)
        state.length = length

    # ---- trees ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def verify_tree(self, state: TargetState, tokens: list[int], parents: list[int],
                    need: frozenset[str] = frozenset()) -> FastVerifyOutput:
        """Run tree nodes through the model; each node attends to the committed prefix and its ancestors.

        Calls after the first (until :meth:`commit_tree` or :meth:`rollback`) extend the same tree
        session, so a drafter can grow a tree level by level.

        Args:
            tokens: node tokens, in an order where parents come first.
            parents: per node, the session index of its parent (indices count all nodes of the
                session, earlier calls included); -1 attaches a node to the committed prefix (depth
                0, the position right after the cache). A verify tree has one root: ``x_last``.

        Returns:
            Rows in node order: logits ``(T, V)`` and the requested hidden states.
        """
        cache = self._check(state)
        if len(tokens) != len(parents) or not tokens:
            raise ValueError("tokens and parents must be non-empty and of equal length")
        sess = cache.tree
        if sess is None:
            sess = TreeSession(base=state.length, parents=[], depths=[], ancestors=[])
        n0 = len(sess.parents)
        if sess.base + n0 != state.length:
            raise RuntimeError("tree session out of step with the cache length")
        depth = []
        r = n0 + len(tokens)
        # Row i: the session nodes node n0 + i sees. Built in numpy, a row copy per node (far
        # less host time than a small torch index assignment per row).
        rows = np.zeros((len(tokens), r), dtype=bool)
        for i, p in enumerate(parents):
            g, d = sess.add(p)
            depth.append(d)
            if p >= n0:  # a parent of this call: its row is complete
                rows[i, :g] = rows[p - n0, :g]
            elif p >= 0:  # a parent of an earlier call of the session
                rows[i, sess.ancestors[p]] = True
            rows[i, g] = True
        mask = torch.from_numpy(rows)
        out = self.lm.step(list(tokens), state.length, sess.base, state.extra["offset"], depth, mask)
        state.length = cache.length = state.length + len(tokens)
        cache.tree = sess
        return self._output(out, need, chain=False)

    @torch.inference_mode()
    def verify_tree_device(self, state: TargetState, root: int, tree, need: frozenset[str] = frozenset()):
        """:meth:`verify_tree` of ``[root, *tree]`` for a draft tree still on the device (a ``DeviceTree``).

        The verify tree's tokens, depths and ancestor mask are built on the device
        (:func:`~vidspec.decoding.trees.verify_tree_inputs`), so the host launches this step right
        after the drafter's growth without waiting for it; then one synchronisation reads back the
        tree, its draft scores and the target's greedy token per node. Opens a tree session as
        :meth:`verify_tree` does (for :meth:`commit_tree`).

        Returns:
            The verify output (rows in node order) and the host lists ``(tokens, parents, scores,
            argmax)`` of the verify tree (node 0 = ``root``, score 0).
        """
        from vidspec.decoding.trees import verify_tree_inputs

        cache = self._check(state)
        if cache.tree is not None:
            raise RuntimeError("verify_tree_device starts a tree session: commit or roll back the open one first")
        if tree.verify is not None:  # built by the drafter (its round graph), root included
            tok, par, dep, mask = tree.verify
        else:
            tok, par, dep, mask = verify_tree_inputs(root, tree.tokens, tree.parents, tree.depths, tree.max_depth)
        t = int(tok.shape[0])
        start = state.length
        out = self.lm.step([0] * t, start, start, state.extra["offset"], dep, mask, tail_ids=tok)
        state.length = cache.length = start + t
        res = self._output(out, need, chain=False)
        zero = torch.zeros(1, dtype=torch.float64, device=tok.device)
        back = torch.cat([tok.double(), par.double(), res.argmax.double(), zero, tree.scores.double()]).cpu()
        rows = back.view(4, t).tolist()  # the round's one synchronisation
        tokens, parents, argmax = ([int(x) for x in r] for r in rows[:3])
        if tokens[0] != root:
            state.length = cache.length = start  # nothing of the refused tree stays
            raise RuntimeError(f"the device tree's root is token {tokens[0]}, the round's x_last is {root}")
        sess = TreeSession(base=start, parents=[], depths=[], ancestors=[])
        for p in parents:
            sess.add(p)
        cache.tree = sess
        return res, (tokens, parents, rows[3], argmax)

    @torch.inference_mode()
    def commit_tree(self, state: TargetState, path: list[int]) -> None:
        """Keep the session nodes ``path`` (root to leaf) right after the prefix; drop the rest.

        The kept nodes' K/V move to consecutive slots (one gather over all layers); rollback of
        everything else is the length counter.
        """
        cache = self._check(state)
        sess = cache.tree
        if sess is None:
            raise RuntimeError("commit_tree without an open tree session")
        for a, b in zip(path, path[1:]):
            if sess.parents[b] != a:
                raise ValueError(f"path {path} is not a chain of parent -> child nodes")
        if path and sess.parents[path[0]] != -1:
            raise ValueError("a committed path starts at a session root")
        base = sess.base
        if path != list(range(len(path))):
            kv = self.lm.kv
            src = torch.tensor(path, dtype=torch.long, device=kv.device) + base
            dst = torch.arange(base, base + len(path), device=kv.device)
            kv.index_copy_(2, dst, kv.index_select(2, src))
        cache.length = state.length = base + len(path)
        cache.tree = None

    # ---- drafting helpers -----------------------------------------------------------------------
    @torch.inference_mode()
    def greedy_chain_device(self, state: TargetState, pending: list[int], k: int) -> torch.Tensor:
        """Feed ``pending`` then draft ``k`` greedy tokens, feeding all but the last: ``(k,) int64`` on the device.

        On the graph path the tokens are chained on the device (each step's argmax becomes the next
        step's input without a host round trip) and nothing waits for the device: the caller reads
        the tokens (one synchronisation) or hands them to :meth:`verify_device`. Off it (CPU,
        eager) the tokens are already known. The cache grows by ``len(pending) + k - 1``, as
        :class:`ModelDrafter` expects.
        """
        cache = self._check(state)
        cache.tree = None
        t = len(pending)
        offset = state.extra["offset"]
        out = self.lm.step(list(pending), state.length, state.length, offset, list(range(t)), _tril(t))
        state.length = cache.length = state.length + t
        if not self.lm.graphs:
            tokens = [int(out.argmax[-1])]
            for _ in range(k - 1):
                s = state.length
                out = self.lm.step([tokens[-1]], s, s, offset, [0], _tril(1))
                state.length = cache.length = s + 1
                tokens.append(int(out.argmax[-1]))
            return torch.tensor(tokens, dtype=torch.long, device=self.device)
        toks = torch.empty(k, dtype=torch.long, device=self.device)
        toks[0:1].copy_(out.argmax[-1:])
        prev_t = t
        for i in range(1, k):
            self.lm.set_chain_next(prev_t, out.argmax)
            out = self.lm.replay(1, self.lm._bucket(state.length + 1))
            toks[i:i + 1].copy_(out.argmax[-1:])
            state.length = cache.length = state.length + 1
            prev_t = 1
        return toks

    @torch.inference_mode()
    def warmup(self, step_lengths: tuple[int, ...] = (1,), contexts: tuple[int, ...] = ()) -> int:
        """Capture graphs for the given step lengths at the given context lengths ahead of time.

        A step of ``T`` tokens after ``ctx`` cached positions uses the graph of ``(T, bucket)``
        (one graph per T when the Triton step kernels are on); a graph not captured here is captured
        the first time a decode needs it, inside that decode's timing. Steps whose graph exists
        already are skipped (no replay). Which lengths a decoder needs: ``T = 1`` for AR, ``T = k + 1``
        for k = 0..K for chain verification (a round drafts fewer than K near the token budget),
        the pending lengths 1..K+1 for a :class:`FastModelDrafter`'s draft target.

        Runs on the empty cache (any state of an earlier request is invalidated).

        Returns:
            The number of graphs captured by this call (0 off the graph path).
        """
        if not self.lm.graphs:
            return 0
        before = len(self.lm._graphs)
        self.lm.new_cache()
        for ctx in contexts:
            for t in step_lengths:
                if t > self.lm.max_step:
                    continue  # runs eagerly: nothing to capture
                start = max(0, min(ctx, self.lm.max_len - t))
                if self.lm.has_graph(t, self.lm._bucket(start + t), self._loose_key):
                    continue
                self.lm.step([0] * t, start, start, 0, list(range(t)), _tril(t), loose=self._loose_key)
        self.lm.new_cache()
        return len(self.lm._graphs) - before

    def save_compile_artifacts(self) -> bool:
        """After a warm-up, write the process's compile artifacts where ``$VIDSPEC_COMPILE_ARTIFACTS`` names (opt-in;
        see :mod:`vidspec.decoding.fast.compile_cache`). True when a file was written. The warm-up in
        :mod:`vidspec.decoding.loops.warm` calls it through the target, since the loops do not import the fast backend."""
        from vidspec.decoding.fast.compile_cache import artifacts_path
        from vidspec.decoding.fast.compile_cache import save_compile_artifacts as save

        return artifacts_path() is not None and save() is not None

    def warmup_contexts(self, first: int, last: int) -> tuple[int, ...]:
        """Context lengths whose steps cover every cache bucket between ``first`` and ``last`` positions."""
        first = max(0, min(first, self.lm.max_len - 1))
        last = max(first, min(last, self.lm.max_len - 1))
        return tuple(sorted({*range(first, last + 1, self.lm.bucket), last}))


class FastModelDrafter(ModelDrafter):
    """:class:`ModelDrafter` whose greedy drafting runs through a :class:`FastTarget`.

    Greedy chains are drafted with :meth:`FastTarget.greedy_chain_device` (one host sync per round
    on CUDA, none with :meth:`propose_device`); sampling drafts fall back to :class:`ModelDrafter`'s loop. An eager adapter passed
    here is wrapped in a FastTarget with default options.
    """

    def __init__(self, model: FastTarget | HFVideoTarget, **kw):
        if not isinstance(model, FastTarget):
            model = FastTarget(model)
        super().__init__(model, **kw)  # type: ignore[arg-type]

    @torch.inference_mode()
    def propose(self, k: int) -> Proposal:
        if self.temperature > 0 or k <= 0:
            return super().propose(k)
        tokens = self.propose_device(k).tolist()  # the one host synchronisation of the round
        self._draft = tokens
        return Proposal(tuple(tokens))

    @torch.inference_mode()
    def propose_device(self, k: int) -> torch.Tensor:
        """A greedy proposal left on the device (see :meth:`FastSparrowDrafter.propose_device`): ``(k,) int64``.

        Call :meth:`set_draft` with the tokens once they are read, before :meth:`commit`.
        """
        if self.temperature > 0 or k <= 0:
            raise ValueError(f"propose_device drafts greedily k >= 1 tokens (k={k}, temperature={self.temperature})")
        state = self._state
        assert state is not None, "begin() first"
        pending = self._seq[state.length - self._base:]
        self._draft = []
        return self.model.greedy_chain_device(state, pending, k)  # type: ignore[attr-defined]

    def set_draft(self, tokens: list[int]) -> None:
        """The host copy of the tokens :meth:`propose_device` returned (what :meth:`commit` keeps from)."""
        self._draft = list(tokens)
