"""Parsing attachments: shorthand kinds from extensions, the tagged form, bad items."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from raygent.attachments import (
    InlineSource,
    PathSource,
    UrlSource,
    parse_attachment,
    parse_attachments,
)
from raygent.errors import AttachmentError


@pytest.mark.parametrize(
    ("item", "kind", "name"),
    [
        ("./photos/cat.PNG", "image", "cat.PNG"),
        ("scan.jpeg", "image", "scan.jpeg"),
        ("https://cdn.example.com/a/b.webp?size=2", "image", "b.webp"),
        ("notes.md", "text", "notes.md"),
        ("data/table.csv", "text", "table.csv"),
        ("https://example.com/report.json", "text", "report.json"),
        (Path("/srv/readme.txt"), "text", "readme.txt"),
    ],
)
def test_shorthand_kind_comes_from_the_extension(item: str | Path, kind: str, name: str) -> None:
    attachment = parse_attachment(item)
    assert (attachment.kind, attachment.name) == (kind, name)
    url = isinstance(item, str) and "://" in item
    assert isinstance(attachment.source, UrlSource if url else PathSource)


@pytest.mark.parametrize("item", ["archive.zip", "Makefile", "https://example.com/", ""])
def test_a_shorthand_without_a_known_extension_is_refused(item: str) -> None:
    with pytest.raises(AttachmentError):
        parse_attachment(item)


def test_the_tagged_form_says_the_kind_whatever_the_extension() -> None:
    data = base64.b64encode(b"hello").decode()
    text = parse_attachment({"type": "text", "source": {"base64": data, "media_type": "x/y"}})
    image = parse_attachment({"type": "image", "source": "https://example.com/render"})
    local = parse_attachment({"type": "text", "source": {"absolute_path": "/srv/Makefile"}})
    named = parse_attachment({"type": "text", "source": "./LICENSE", "name": "license"})
    assert text.kind == "text" and text.source == InlineSource(data, "x/y")
    assert image.kind == "image" and image.source == UrlSource("https://example.com/render")
    assert local.source == PathSource("/srv/Makefile", bare=False)
    assert named.source == PathSource("./LICENSE", bare=True) and named.name == "license"


@pytest.mark.parametrize(
    "item",
    [
        {"type": "video", "source": "clip.mp4"},
        {"type": "image"},
        {"type": "image", "source": {"base64": "!!!not base64!!!", "media_type": "image/png"}},
        {"type": "image", "source": {"base64": "aGk=", "media_type": "text/plain"}},
        {"type": "text", "source": {"absolute_path": "relative/file.txt"}},
        {"type": "text", "source": "a.txt", "unknown": 1},
        42,
    ],
)
def test_malformed_items_are_typed_errors(item: object) -> None:
    with pytest.raises(AttachmentError) as caught:
        parse_attachment(item)  # type: ignore[arg-type]
    assert caught.value.code == "ATTACHMENT" and caught.value.retryable is False


def test_a_single_string_is_not_taken_for_a_list_of_characters() -> None:
    with pytest.raises(AttachmentError):
        parse_attachments("cat.png")  # type: ignore[arg-type]
    assert [a.name for a in parse_attachments(["a.png", "b.txt"])] == ["a.png", "b.txt"]


def test_errors_never_carry_a_url_query_or_inline_data() -> None:
    with pytest.raises(AttachmentError) as caught:
        parse_attachment("https://example.com/file?token=secret123")
    assert "secret123" not in caught.value.message
    assert "secret123" not in str(caught.value.to_dict())
