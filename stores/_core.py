"""The core (`raygent`) names the stores use, in one place.

mypy checks the source folders under their own names (runtime/, stores/) and cannot
follow the editable install's mapping of `runtime/` to `raygent`, so it is shown the
same modules by folder; Python imports them from `raygent` as users do.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.errors import RaygentError
    from runtime.messages import (
        MESSAGE_ADAPTER,
        MESSAGES_ADAPTER,
        AssistantMessage,
        Message,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from runtime.redaction import redact_value, register_secret
else:
    from raygent.errors import RaygentError
    from raygent.messages import (
        MESSAGE_ADAPTER,
        MESSAGES_ADAPTER,
        AssistantMessage,
        Message,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from raygent.redaction import redact_value, register_secret

__all__ = [
    "MESSAGES_ADAPTER",
    "MESSAGE_ADAPTER",
    "AssistantMessage",
    "Message",
    "RaygentError",
    "SystemMessage",
    "ToolMessage",
    "UserMessage",
    "redact_value",
    "register_secret",
]
