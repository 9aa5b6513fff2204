"""What every drafter shares: the autoregressive no-op drafter and the draft-model prefill start.

- :class:`NoDrafter` proposes nothing: the loop becomes plain autoregressive decoding (K = 0).
- :class:`DraftPrefillStart`: the request start of a drafter that is a separate draft model with
  its own cache (the draft VLM drafters and the tree drafter of a draft VLM).
"""

from __future__ import annotations

from vidspec.decoding.types import Proposal, TargetModel, TargetState, VerifyOutput


class NoDrafter:
    """The autoregressive baseline: no draft tokens, one target pass per token."""

    name = "ar"
    need: frozenset[str] = frozenset()

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        pass

    def propose(self, k: int) -> Proposal:
        return Proposal(())

    def commit(self, n_accepted: int, next_token: int, out: VerifyOutput) -> None:
        pass


class DraftPrefillStart:
    """The request start of a drafter that is a separate draft model with its own cache.

    ``prepare`` runs the draft model's own prefill of the request (``_draft_prefill``); engines call it
    in the prefill phase, before the first token is known. ``begin`` runs it only when ``prepare`` did
    not run for this request, then queues the first token.
    """

    _prepared: TargetState | None = None  # the request prepare() started (begin finishes it)

    def _draft_prefill(self, state: TargetState) -> TargetState:
        raise NotImplementedError

    def prepare(self, target: TargetModel, state: TargetState) -> None:
        """The draft model's own prefill of the request (the prefill phase: it needs no first token)."""
        self._state = self._draft_prefill(state)
        self._base = self._state.length
        self._seq: list[int] = []
        self._prepared = state

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        if self._prepared is not state:
            self.prepare(target, state)
        self._prepared = None
        self._seq = [first_token]
