"""The one rule for an option, a setting or a flag whose name nothing takes: it is
refused (`UnknownOptionError`) naming the closest known name, or where a name of
something else belongs ("max_tokens is a model option: ..."), spelt for whoever reads
the message (`Spelling`: a Python caller's `resume=True`, a CLI user's `--resume`).

A helper of the base (every part refuses unknown names with it), kept beside the model
contract: the adapters, its lowest users, refuse unknown settings with it, and the model
options it knows are the contract's.

The closest name: the smallest optimal-string-alignment distance (an insertion, a
deletion, a substitution or a swap of two neighbours each cost one) between the names
lowercased, with `-` read as `_`, within a third of the shorter name (one edit up to
five letters); a known name that is the given one's leading words or begins with its
words (`reasoning` for `reasoning_effort`, `system_prompt` for `system`), or has the
same words in another order, is close too. Ties go to the
longer common prefix, then the nearer length, then the order the names were declared in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

from ..errors import UnknownOptionError
from .contract import ModelOptions

__all__ = [
    "MODEL_OPTIONS",
    "PYTHON",
    "Spelling",
    "check_model_options",
    "check_run_options",
    "closest",
    "unknown_option",
]


class _Bare:
    def __repr__(self) -> str:
        return "BARE"


BARE: Final = _Bare()  # an option named without a value: `mode=`, `--mode`


class Spelling:
    """How an option is written in a message. Python (`PYTHON`): `resume=True`,
    `mode="append"`, `concurrency=`, `model_options={'max_tokens': ...}`. The CLI
    (`Spelling(flags)`, the flag of each option it has by the option's name):
    `--resume`, `--mode append`, `--concurrency`, `--model-option max_tokens=...`."""

    __slots__ = ("flags",)

    def __init__(self, flags: Mapping[str, str] | None = None) -> None:
        self.flags = None if flags is None else dict(flags)

    @property
    def cli(self) -> bool:
        return self.flags is not None

    def option(self, name: str, value: object = BARE) -> str:
        """The option `name` (given `value`), as the reader writes it."""
        flag = None if self.flags is None else self.flags.get(name)
        if flag is None:
            if value is BARE:
                return f"{name}="
            return f'{name}="{value}"' if isinstance(value, str) else f"{name}={value!r}"
        if value is BARE or value is True:
            return flag
        return f"{flag} {value}"

    def entry(self, option: str, key: str) -> str:
        """The entry `key` of the mapping option `option` (`model_options`)."""
        flag = None if self.flags is None else self.flags.get(option)
        if flag is None:
            return f"{option}={{{key!r}: ...}}"
        return f"{flag} {key}=..."

    def name(self, name: str) -> str:
        """A name in a message: quoted for Python, as typed on a command line."""
        return name if self.flags is not None else repr(name)


PYTHON: Final = Spelling()

# -- the closest name ---------------------------------------------------------------------


def _normal(name: str) -> str:
    return name.strip().lstrip("-").lower().replace("-", "_")


def _distance(a: str, b: str) -> int:
    """Optimal string alignment: insertions, deletions, substitutions and swaps of two
    neighbouring letters each cost one (`outptu` is one from `output`)."""
    if a == b:
        return 0
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            best = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                best = min(best, previous2[j - 2] + 1)
            current[j] = best
        previous2, previous = previous, current
    return previous[-1]


def _near(given: str, known: str, distance: int) -> bool:
    shorter = min(len(given), len(known))
    if distance <= max(1, shorter // 3):
        return True
    if shorter >= 4 and (given.startswith(known + "_") or known.startswith(given + "_")):
        return True  # `reasoning_effort` -> `reasoning`, `system` -> `system_prompt`
    words, known_words = given.split("_"), known.split("_")
    return len(words) > 1 and sorted(words) == sorted(known_words)  # `tokens_max`


def _prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely meant (see the module's docstring), or None
    when none is close."""
    given = _normal(name)
    best: tuple[int, int, int, int] | None = None
    found: str | None = None
    for order, candidate in enumerate(known):
        other = _normal(candidate)
        if other == given:
            return candidate
        distance = _distance(given, other)
        if not _near(given, other, distance):
            continue
        rank = (distance, -_prefix(given, other), abs(len(other) - len(given)), order)
        if best is None or rank < best:
            best, found = rank, candidate
    return found


# -- refusing -----------------------------------------------------------------------------


def unknown_option(
    name: str,
    known: Collection[str],
    *,
    subject: str,
    what: str = "option",
    elsewhere: Mapping[str, str] | None = None,
    aliases: Mapping[str, str] | None = None,
    spelling: Spelling = PYTHON,
    tail: str = "",
    listed: bool = True,
) -> UnknownOptionError:
    """The error for `name`, given to `subject` (`"execute()"`, `"OpenAIModel()"`; ""
    when the reader knows: a command's own message) where the `known` names are taken.
    `elsewhere`: names that belong somewhere else, each with the sentence that says
    where; `aliases`: names other libraries use, each with the known name it is here.
    With nothing close, the message lists the known names (unless not `listed`), then
    `tail`."""
    others = dict(elsewhere or {})
    alias = (aliases or {}).get(_normal(name))
    ordered = list(known) if isinstance(known, list | tuple) else sorted(known)
    suggestion = alias if alias is not None else closest(name, [*ordered, *others])
    message = f"{subject}: " if subject else ""
    message += f"unknown {what} {spelling.name(name)}"
    if suggestion is not None and suggestion in others and suggestion not in known:
        message += f": {others[suggestion]}"
    elif suggestion is not None:
        message += f" (did you mean {spelling.name(suggestion)}?)"
    else:
        if listed:
            message += "; known: " + ", ".join(sorted(known))
        if tail:
            message += f"; {tail}"
    return UnknownOptionError(message, option=name, suggestion=suggestion, where=subject)


# -- model options and run options ---------------------------------------------------------

# What a model option may be named (`ModelOptions`' fields), and `signal`, which the
# reference ignores there (a run's own, like `tools` and `response_schema`).
MODEL_OPTIONS: Final = frozenset(ModelOptions.model_fields) | {"signal"}
_RUNS_OWN: Final = frozenset({"signal", "tools", "response_schema"})
# Names other libraries give a model option, and the raygent name.
_MODEL_ALIASES: Final = {
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "reasoning_effort": "reasoning",
    "thinking": "reasoning",
    "response_format": "response_schema",
    "tier": "service_tier",
}


def _provider_tail(name: str, spelling: Spelling) -> str:
    """Where a provider's own parameter goes (`top_p`: not an option of every model)."""
    value = f'{{"openai": {{"{name}": ...}}}}'
    if spelling.cli:
        where = f"{spelling.option('model_options')} provider_options='{value}'"
    else:
        where = f"model_options={{'provider_options': {value}}}".replace('"', "'")
    return f"a provider's own parameter goes in provider_options, by adapter: {where}"


def check_model_options(
    options: Mapping[str, Any], *, subject: str, spelling: Spelling = PYTHON
) -> None:
    """Refuse a model option of an unknown name (`UnknownOptionError`)."""
    if MODEL_OPTIONS.issuperset(options):
        return
    name = next(n for n in options if n not in MODEL_OPTIONS)
    raise unknown_option(
        name,
        sorted(MODEL_OPTIONS - _RUNS_OWN),
        subject=subject,
        what="model option",
        aliases=_MODEL_ALIASES,
        spelling=spelling,
        tail=_provider_tail(name, spelling),
    )


def model_option_hints(spelling: Spelling = PYTHON, to: str = "") -> dict[str, str]:
    """Where each model option goes (`to` where that option is given), for a name
    given as something else."""
    return {
        name: f"{name} is a model option: pass {spelling.entry('model_options', name)}{to}"
        for name in sorted(MODEL_OPTIONS - _RUNS_OWN)
    }


def check_run_options(
    options: Mapping[str, Any],
    known: Collection[str],
    *,
    subject: str,
    spelling: Spelling = PYTHON,
    elsewhere: Callable[[], Mapping[str, str]] | None = None,
) -> None:
    """Refuse a run option of a name not in `known`, and, when it has `model_options`,
    a model option of an unknown name (`UnknownOptionError`). `elsewhere`: more names
    that belong somewhere else (a model option's are known here, where `known` takes
    `model_options`)."""
    if not isinstance(options, Mapping):
        raise TypeError(f"{subject}: run options are a mapping, not {type(options).__name__}")
    unknown = next((name for name in options if name not in known), None)
    if unknown is not None:
        hints = model_option_hints(spelling) if "model_options" in known else {}
        if elsewhere is not None:
            hints.update(elsewhere())
        raise unknown_option(
            unknown, known, subject=subject, what="run option", elsewhere=hints, spelling=spelling
        )
    model_options = options.get("model_options")
    if model_options:
        if not isinstance(model_options, Mapping):
            raise TypeError(
                f"{subject}: model_options is a mapping, not {type(model_options).__name__}"
            )
        check_model_options(model_options, subject=subject, spelling=spelling)
