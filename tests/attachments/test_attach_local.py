"""Local files under the attachment policy: roots, `../` and symlink escapes, caps."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from attach_support import PNG

from raygent import AttachmentPolicy, ImagePart, TextPart
from raygent.attachments import parse_attachments
from raygent.attachments.load import load_parts
from raygent.errors import AttachmentError, InvalidRequestError, OutboundPolicyError
from raygent.models import Capabilities

SEES = Capabilities(vision=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ (allowed) with a picture and notes; secret.txt beside it, outside."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "cat.png").write_bytes(PNG)
    (root / "sub" / "notes.md").write_text("# Notes\nShip on Friday.", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("the launch codes", encoding="utf-8")
    return root


async def load(items: list[object], policy: AttachmentPolicy) -> list[object]:
    return list(await load_parts(parse_attachments(items), policy, SEES))  # type: ignore[arg-type]


async def test_files_inside_the_root_become_parts(tree: Path) -> None:
    policy = AttachmentPolicy(allowed_roots=[tree])
    image, doc = await load([str(tree / "cat.png"), str(tree / "sub" / "notes.md")], policy)
    assert image == ImagePart(data=base64.b64encode(PNG).decode(), media_type="image/png")
    expected = '<document name="notes.md">\n# Notes\nShip on Friday.\n</document>\n'
    assert doc == TextPart(text=expected)


async def test_dot_dot_out_of_the_root_is_refused(tree: Path) -> None:
    policy = AttachmentPolicy(allowed_roots=[tree])
    with pytest.raises(OutboundPolicyError) as caught:
        await load([str(tree / "sub" / ".." / ".." / "secret.txt")], policy)
    assert caught.value.reason == "outside_roots"
    assert "launch codes" not in str(caught.value.to_dict())


async def test_a_symlink_out_of_the_root_is_refused(tree: Path) -> None:
    (tree / "innocent.txt").symlink_to(tree.parent / "secret.txt")
    (tree / "linked").symlink_to(tree.parent, target_is_directory=True)
    policy = AttachmentPolicy(allowed_roots=[tree])
    for escape in (tree / "innocent.txt", tree / "linked" / "secret.txt"):
        with pytest.raises(OutboundPolicyError) as caught:
            await load([str(escape)], policy)
        assert caught.value.reason == "outside_roots"


async def test_a_symlink_that_stays_inside_the_root_is_followed(tree: Path) -> None:
    (tree / "alias.md").symlink_to(tree / "sub" / "notes.md")
    [doc] = await load([str(tree / "alias.md")], AttachmentPolicy(allowed_roots=[tree]))
    assert isinstance(doc, TextPart) and "Ship on Friday." in doc.text


async def test_a_refusal_does_not_tell_whether_a_file_outside_exists(tree: Path) -> None:
    policy = AttachmentPolicy(allowed_roots=[tree])
    reasons = []
    for name in ("secret.txt", "no-such-file.txt"):
        with pytest.raises(OutboundPolicyError) as caught:
            await load([str(tree.parent / name)], policy)
        reasons.append(caught.value.reason)
    assert reasons == ["outside_roots", "outside_roots"]


async def test_relative_paths_resolve_against_the_working_directory_by_default(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    [doc] = await load(["sub/notes.md"], AttachmentPolicy())
    assert isinstance(doc, TextPart)
    with pytest.raises(OutboundPolicyError):
        await load(["../secret.txt"], AttachmentPolicy())


async def test_bare_paths_can_be_turned_off_leaving_absolute_path(tree: Path) -> None:
    policy = AttachmentPolicy(allowed_roots=[tree], allow_bare_local_paths=False)
    target = str(tree / "sub" / "notes.md")
    with pytest.raises(OutboundPolicyError) as caught:
        await load([target], policy)
    assert caught.value.reason == "bare_local_path"
    with pytest.raises(OutboundPolicyError):
        await load([{"type": "text", "source": target}], policy)
    [doc] = await load([{"type": "text", "source": {"absolute_path": target}}], policy)
    assert isinstance(doc, TextPart)


async def test_a_file_over_the_cap_and_odd_files_are_refused(tree: Path) -> None:
    policy = AttachmentPolicy(allowed_roots=[tree], max_file_bytes=len(PNG) - 1)
    with pytest.raises(OutboundPolicyError) as caught:
        await load([str(tree / "cat.png")], policy)
    assert caught.value.reason == "too_large"
    roomy = AttachmentPolicy(allowed_roots=[tree])
    with pytest.raises(AttachmentError):
        await load([str(tree / "missing.txt")], roomy)
    os.mkfifo(tree / "pipe.txt")  # would block a plain open() forever
    with pytest.raises(AttachmentError, match="not a regular file"):
        await load([str(tree / "pipe.txt")], roomy)
    (tree / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(AttachmentError, match="not UTF-8"):
        await load([str(tree / "latin1.txt")], roomy)


async def test_no_vision_is_refused_before_any_file_is_read(tree: Path) -> None:
    # The path does not exist: a read would be an AttachmentError, not this.
    items = parse_attachments([str(tree / "absent.png")])
    with pytest.raises(InvalidRequestError, match="vision"):
        await load_parts(items, AttachmentPolicy(allowed_roots=[tree]), Capabilities(vision=False))


async def test_an_image_media_type_comes_from_its_bytes_first(tree: Path) -> None:
    (tree / "mislabelled.jpg").write_bytes(PNG)
    (tree / "scan").write_bytes(b"\xff\xd8\xff\xe0" + b"0" * 16)
    policy = AttachmentPolicy(allowed_roots=[tree])
    items = [str(tree / "mislabelled.jpg"), {"type": "image", "source": str(tree / "scan")}]
    png, jpeg = await load(items, policy)
    assert isinstance(png, ImagePart) and png.media_type == "image/png"
    assert isinstance(jpeg, ImagePart) and jpeg.media_type == "image/jpeg"
