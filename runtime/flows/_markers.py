"""`raygent.END` and `raygent.Goto`: where a workflow or a supervisor goes next."""

from __future__ import annotations

__all__ = ["END", "Goto"]


class _End:
    """`raygent.END`: where a workflow's `next`, or a supervisor's route, stops."""

    __slots__ = ()
    _instance: _End | None = None

    def __new__(cls) -> _End:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "raygent.END"

    def __reduce__(self) -> str:
        # One END in every process: a flow shipped to a Ray runner compares by identity.
        return "END"


END = _End()


class Goto:
    """`raygent.Goto(name)`: what `on_failure` returns to go to another step (a step may
    be revisited: loops are bounded by the workflow's `max_steps`)."""

    __slots__ = ("step",)

    def __init__(self, step: str) -> None:
        if not isinstance(step, str) or not step:
            raise TypeError(f"Goto takes a step's name, not {step!r}")
        self.step = step

    def __repr__(self) -> str:
        return f"raygent.Goto({self.step!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Goto) and other.step == self.step

    def __hash__(self) -> int:
        return hash(("Goto", self.step))
