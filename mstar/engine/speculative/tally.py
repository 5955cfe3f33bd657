"""A request's speculation history (``Tally``) and the engine's recent acceptance
(``RecentAcceptance``): what ``Speculation`` sizes drafts and the verify gate weighs them by."""

from __future__ import annotations

from dataclasses import dataclass

from mstar.engine.speculative.ngram import NgramIndex

MAX_PAUSE = 31  # the most steps a request skips proposing after consecutive misses
PRIOR_ACCEPTANCE = 0.8  # the chance of a draft being accepted before any history...
PRIOR_WEIGHT = 2.0  # ...counted as this many drafts (hopeful: a new request gets to try)
RECENT_MEMORY = 64  # verifies after which the recent acceptance is an exponential average


def smoothed(accepted: float, tried: float, prior: float) -> float:
    """The accepted share of ``tried`` drafts, with ``prior`` counted as ``PRIOR_WEIGHT``."""
    return (accepted + prior * PRIOR_WEIGHT) / (tried + PRIOR_WEIGHT)


@dataclass
class Tally:
    """One request's proposer state and counts."""

    index: NgramIndex
    length: int  # drafts to propose next (at most k)
    proposed: int = 0
    accepted: int = 0
    rejected: int = 0  # verifies that rejected a draft
    misses: int = 0  # consecutive verifies that accepted nothing
    pause: int = 0  # steps left without proposals
    off: bool = False

    def verified(self, proposed: int, accepted: int, k: int) -> None:
        self.proposed += proposed
        self.accepted += accepted
        self.rejected += accepted < proposed
        self.length = min(k, 2 * self.length if accepted == proposed else accepted + 1)
        self.misses = 0 if accepted else self.misses + 1
        self.pause = min(MAX_PAUSE, 2**self.misses - 1)

    def acceptance(self, prior: float) -> float:
        """The chance that a draft is accepted given the ones before it were: of the drafts
        verified after accepted ones (each verify's accepted run plus its first rejected draft),
        the accepted share, with ``prior`` added as ``PRIOR_WEIGHT`` drafts."""
        return smoothed(self.accepted, self.accepted + self.rejected, prior)


@dataclass
class RecentAcceptance:
    """The engine's recent chance of a draft being accepted (``Tally.acceptance``'s measure over
    all requests' verifies, an exponential average after ``RECENT_MEMORY``): a new request's
    prior. ``PRIOR_ACCEPTANCE`` until the first verify."""

    accepted: float = 0.0
    tried: float = 0.0  # accepted runs plus their first rejected draft
    verifies: int = 0

    def add(self, accepted: int, rejected: bool) -> None:
        self.verifies += 1
        keep = 1.0 - 1.0 / RECENT_MEMORY if self.verifies > RECENT_MEMORY else 1.0
        self.accepted = keep * self.accepted + accepted
        self.tried = keep * self.tried + accepted + rejected

    def prior(self) -> float:
        return smoothed(self.accepted, self.tried, PRIOR_ACCEPTANCE)
