"""Turn a loose verifier off for the rest of a request once it has stopped accepting anything strict would not.

A loose rule (LVSpec, PST, FLy) pays only in the rounds where it keeps a token that strict verification would
have rejected. In every other round it is pure cost: a relevance-reading rule asks the target for hidden
states and scores them; a device rule computes its decision inside the verify step; a host rule walks the
draft. Where the draft agrees with the target, or where the rule's gate never opens, the loose method is
therefore slower than its strict twin for the same tokens. :class:`LooseSwitch` watches the rounds of one
request and, after :attr:`LooseSwitch.patience` drafting rounds in a row without a loose or shifted
acceptance, tells the decoding loop to verify strictly from then on (the loop drops the rule from the
target's verify step and stops asking for the rule's inputs). What it did is recorded per request
(:meth:`LooseSwitch.record`, beside the adaptive draft policy's record).

Switching to strict can only make a request's output closer to the target's own; it never loosens it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vidspec.decoding.types import Decision

#: Drafting rounds in a row without a loose or shifted acceptance after which a request verifies strictly.
#: A round lasts ~1-3 ms on a GPU with the testbed models and the loose rule's own cost is ~0.1 ms a round
#: (docs/results.md, section 5): the rule pays when it helps in more than roughly one round in 16.
DEFAULT_LOOSE_PATIENCE = 16


@dataclass
class LooseSwitch:
    """Per request: stop loose verification once it has accepted nothing beyond strict for a while.

    Attributes:
        patience: drafting rounds in a row without a ``loose`` or ``shift`` acceptance before the switch
            turns the rule off (rounds that drafted nothing do not count).
    """

    patience: int = DEFAULT_LOOSE_PATIENCE

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        self.start()

    def start(self) -> None:
        """A new request: the rule is on."""
        self.quiet = 0  # drafting rounds since the rule last accepted a token
        self.rounds = 0  # drafting rounds while the rule was on
        self.helped = 0  # of those, rounds where it accepted at least one token
        self.stopped_at: int | None = None

    @property
    def on(self) -> bool:
        """Whether the loose rule still applies in this request."""
        return self.stopped_at is None

    def update(self, drafted: int, decision: Decision, emitted: int) -> bool:
        """Account one round; True exactly when the rule must be turned off from the next round on.

        Args:
            drafted: the round's draft tokens (0: a round that drafted nothing, not counted).
            decision: the verifier's decision.
            emitted: tokens of the request so far, where a switch-off is recorded.
        """
        if not self.on or drafted <= 0:
            return False
        self.rounds += 1
        if any(kind in ("loose", "shift") for kind in decision.kinds):
            self.quiet = 0
            self.helped += 1
            return False
        self.quiet += 1
        if self.quiet >= self.patience:
            self.stopped_at = emitted
            return True
        return False

    def record(self) -> dict:
        """``loose_stopped_at`` (tokens emitted when the rule was turned off, or None) and ``loose_rounds`` /
        ``loose_helped_rounds`` (drafting rounds with the rule on, and those where it accepted a token)."""
        return {"loose_stopped_at": self.stopped_at, "loose_rounds": self.rounds, "loose_helped_rounds": self.helped}
