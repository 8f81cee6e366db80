"""`raygent.attachments`: images and text documents added to a run's input message.

_parse        the forms an attachment is given in, and `AttachmentPolicy`
_outbound     `OutboundPolicy` and the guarded fetcher: what raygent itself may download
load          attachments into content parts, under the policy

May import the base and models (a model's capabilities, media checks).
"""

from ._parse import (
    Attachment,
    AttachmentLike,
    AttachmentPolicy,
    InlineSource,
    OutboundPolicy,
    PathSource,
    UrlSource,
    parse_attachment,
    parse_attachments,
)

__all__ = [
    "Attachment",
    "AttachmentLike",
    "AttachmentPolicy",
    "InlineSource",
    "OutboundPolicy",
    "PathSource",
    "UrlSource",
    "parse_attachment",
    "parse_attachments",
]
