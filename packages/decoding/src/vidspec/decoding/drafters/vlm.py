"""``ModelDrafter``: a separate, smaller Video-LLM of the target's family drafts the tokens.

The draft model sees the video itself, optionally with part of its video tokens pruned (the draft
setting of LVSpec and SpecVLM).
"""

from __future__ import annotations

import torch

from vidspec.decoding.drafters.base import DraftPrefillStart
from vidspec.decoding.models.base import HFVideoTarget, crop_cache
from vidspec.decoding.types import Proposal, Request, TargetState, VerifyOutput
from vidspec.decoding.verifiers.strict import draft_choice


class ModelDrafter(DraftPrefillStart):
    """A separate small Video-LLM drafts greedily (or by sampling) with its own KV cache.

    The drafter keeps the full committed sequence and feeds whatever its cache lacks before
    drafting, so after a rejection it only crops its cache; no token is recomputed twice.

    Args:
        model: the draft model's adapter (same family and vocabulary as the target).
        prune_ratio: fraction of the draft's video tokens dropped before its prefill (0 keeps
            all). Tokens are dropped uniformly over the video, keeping their positions.
        temperature: 0 drafts greedily; > 0 samples and returns the draft distributions, which
            strict sampling verification needs. :class:`~vidspec.decoding.loops.SpeculativeDecoder`
            sets it to each request's temperature for the duration of that request (and restores
            it afterwards), so this value only matters when the drafter is driven directly.
        top_p: nucleus mass when sampling; likewise replaced by each request's ``top_p``, so draft
            and verifier agree.
        generator: RNG for sampled drafts (likewise replaced by the request's seeded RNG).
    """

    def __init__(self, model: HFVideoTarget, prune_ratio: float = 0.0, temperature: float = 0.0,
                 top_p: float = 1.0, generator: torch.Generator | None = None):
        if not 0.0 <= prune_ratio < 1.0:
            raise ValueError(f"prune_ratio must be in [0, 1), got {prune_ratio}")
        self.model = model
        self.prune_ratio = prune_ratio
        self.temperature = temperature
        self.top_p = top_p
        self.generator = generator
        self.name = f"model:{model.name}"
        self.need: frozenset[str] = frozenset()
        self._state: TargetState | None = None
        self._draft: list[int] = []
        self._seq: list[int] = []  # committed tokens after the prompt (x_last included)
        self._base = 0  # cache positions taken by the prompt

    def _draft_prefill(self, state: TargetState) -> TargetState:
        request: Request = state.request
        return self.model.prefill(request) if self.prune_ratio == 0 else self._pruned_prefill(request)

    def _pruned_prefill(self, request: Request) -> TargetState:
        """Prefill with a uniform subset of video frames (a cheap, family-independent pruning)."""
        from dataclasses import replace

        clip = request.clip
        if clip is None or clip.num_frames < 2:
            return self.model.prefill(request)
        keep = max(2, round(clip.num_frames * (1 - self.prune_ratio)))
        idx = torch.linspace(0, clip.num_frames - 1, keep).round().long().unique().numpy()
        small = replace(clip, frames=clip.frames[idx], timestamps=tuple(clip.timestamps[i] for i in idx)
                        if clip.timestamps else (), fps=clip.fps * len(idx) / clip.num_frames)
        return self.model.prefill(replace(request, clip=small))

    def prepare(self, target, state: TargetState) -> None:
        # Heads may differ by padding rows (see check_compatible): draft over the shared token ids only,
        # in the target's row space, so that no padding id is proposed and q has the target's size.
        from vidspec.decoding.models import real_vocab_size

        n_target = int(getattr(target, "vocab_size", self.model.vocab_size))
        n_real = real_vocab_size(self.model.tokenizer, min(n_target, self.model.vocab_size))
        self._rows = None if n_target == self.model.vocab_size else (n_real, n_target)
        super().prepare(target, state)

    def _choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        if getattr(self, "_rows", None) is not None:
            n_real, n_target = self._rows
            full = logits.new_full((n_target,), float("-inf"))
            full[:n_real] = logits[:n_real]
            logits = full
        return draft_choice(logits, self.temperature, self.top_p, self.generator)

    @torch.inference_mode()
    def propose(self, k: int) -> Proposal:
        state = self._state
        assert state is not None, "begin() first"
        if k <= 0:
            self._draft = []
            return Proposal(())
        pending = self._seq[state.length - self._base:]
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        out = self.model.verify(state, pending)
        for i in range(k):
            tok, dist = self._choose(out.logits[-1])
            tokens.append(tok)
            if dist is not None:
                dists.append(dist)
            if i < k - 1:
                out = self.model.verify(state, [tok])
        probs = torch.stack(dists) if dists else None
        self._draft = tokens
        return Proposal(tuple(tokens), probs)

    def commit(self, n_accepted: int, next_token: int, out: VerifyOutput) -> None:
        state = self._state
        assert state is not None
        self._seq.extend(self._draft[:n_accepted])
        self._seq.append(next_token)
        # The cache holds the old sequence + the draft tokens fed so far; keep the agreeing prefix.
        keep = min(state.length, self._base + len(self._seq) - 1)
        if keep < state.length:
            crop_cache(state.cache, keep)
            state.length = keep
        self._draft = []
