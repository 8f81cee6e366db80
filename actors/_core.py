"""The core (`raygent`) names the Ray backend uses, importable for mypy too.

At run time the core is the package `raygent`. mypy checks the `runtime/` folder as a
package named `runtime` (setuptools' package-dir mapping is invisible to it, and the
editable install is an import hook it cannot follow), so under TYPE_CHECKING the very
same modules are imported by that name. Everything in `actors/` imports the core from
here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.abort import AbortController, AbortSignal, AbortWatch, abortable
    from runtime.errors import (
        ProviderConnectionError,
        RateLimitError,
        RaygentError,
        ToolExecutionError,
    )
    from runtime.memory import LocalSessions
    from runtime.messages import Message
    from runtime.models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
    from runtime.redaction import logger as redacting_logger
    from runtime.seams import Backend, _routed, closing_stream
    from runtime.tools import Tool, ToolContext, ToolTimeoutError
    from runtime.usage import Cost, Usage
else:
    from raygent.abort import AbortController, AbortSignal, AbortWatch, abortable
    from raygent.errors import (
        ProviderConnectionError,
        RateLimitError,
        RaygentError,
        ToolExecutionError,
    )
    from raygent.memory import LocalSessions
    from raygent.messages import Message
    from raygent.models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
    from raygent.redaction import logger as redacting_logger
    from raygent.seams import Backend, _routed, closing_stream
    from raygent.tools import Tool, ToolContext, ToolTimeoutError
    from raygent.usage import Cost, Usage

__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortWatch",
    "Backend",
    "Cost",
    "Done",
    "LocalSessions",
    "Message",
    "Model",
    "ModelOptions",
    "ModelResponse",
    "ProviderConnectionError",
    "RateLimitError",
    "RaygentError",
    "StreamChunk",
    "Tool",
    "ToolContext",
    "ToolExecutionError",
    "ToolTimeoutError",
    "Usage",
    "_routed",
    "abortable",
    "closing_stream",
    "redacting_logger",
]
