"""A clock a test moves by hand, for stores given `clock=` (picklable)."""

from __future__ import annotations


class StepClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
