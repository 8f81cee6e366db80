"""What a request counts against a rate before it is sent, as providers count it for
admission: its prompt, estimated, plus its output cap (`max_tokens`).

The prompt is estimated from its JSON (bytes / 4: more than a tokenizer counts), the
same count a budget's worst case reserves (`raygent.budgets.worst_case` uses this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pydantic_core

if TYPE_CHECKING:  # the base imports this part's `limits`: only types from it here
    from ..messages import Message
    from ..models.contract import Model, ModelOptions

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_OUTPUT_RESERVE", "estimate", "output_cap", "prompt_tokens"]

# The output reserved for a request that sets no `max_tokens` (and whose adapter has no
# default): a reply longer than this may pass a budget by the difference.
DEFAULT_OUTPUT_RESERVE = 4096
CHARS_PER_TOKEN = 4  # the prompt's JSON over this: more than any tokenizer counts


def prompt_tokens(messages: Sequence[Message], options: ModelOptions) -> int:
    """The prompt's tokens, estimated from its JSON (the messages and the tools)."""
    size = len(pydantic_core.to_json(list(messages)))
    if options.tools:
        size += len(pydantic_core.to_json(options.tools))
    return size // CHARS_PER_TOKEN + 1


def output_cap(model: Model, options: ModelOptions) -> int:
    """The most output a request may bill: `max_tokens`, else the adapter's default,
    else `DEFAULT_OUTPUT_RESERVE`."""
    cap = options.max_tokens or getattr(model, "default_max_tokens", None)
    return int(cap or DEFAULT_OUTPUT_RESERVE)


def estimate(messages: Sequence[Message], options: ModelOptions, model: Model) -> tuple[int, int]:
    """(input tokens, output tokens) a request counts for admission."""
    return prompt_tokens(messages, options), output_cap(model, options)
