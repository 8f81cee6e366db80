"""A run with attachments: load them, then run the loop; a failure ends the run.

Loading happens before the loop, in the run's own task: a refusal or a bad attachment
becomes the run's setup error (a failed result, no model request), an abort of the
run's signal a cancelled one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..abort import abortable
from ..attachments import AttachmentLike, AttachmentPolicy, parse_attachments
from ..attachments.load import load_parts, with_parts
from ..errors import AbortedError, AttachmentError, RaygentError
from ..messages import Message
from ..observers.report import AgentResult
from ._loop import run_loop
from ._retry_resume import with_trail
from ._state import RunState

__all__ = ["start_run"]


async def start_run(
    state: RunState,
    user_input: list[Message],
    attachments: Iterable[AttachmentLike] | None,
    policy: AttachmentPolicy,
) -> AgentResult:
    """`run_loop`, with the attachments added to the input message first."""
    if attachments is not None and state.setup_error is None:
        try:
            parts = await abortable(
                load_parts(parse_attachments(attachments), policy, state.config.model.capabilities),
                state.signal,
            )
            user_input = with_parts(user_input, parts)
        except asyncio.CancelledError:
            # The task was cancelled while loading: record a cancelled run, then go on
            # cancelling (as the loop itself does).
            state.setup_error = AbortedError("cancelled while loading attachments")
            await run_loop(state, user_input)
            raise
        except RaygentError as exc:
            state.setup_error = exc
        except Exception as exc:
            state.setup_error = AttachmentError(
                f"attachments could not be loaded: {type(exc).__name__}: {exc}"
            )
    return with_trail(state, await run_loop(state, user_input))
