"""Files uploaded with a chat message (the composer's attach button, or a multipart ``POST
/chat`` / ``POST /agent``): checked against the input limits before they are read."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.files.uploadedfile import UploadedFile

from sandbox.files import check_input_sizes


def uploaded_files(uploads: Sequence[UploadedFile]) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` of each upload; raises ``SandboxInputsTooLarge`` (413) from their
    sizes alone, before anything is read, when they are past the limits."""
    check_input_sizes([(upload.name or "file", upload.size or 0) for upload in uploads])
    return [(upload.name or "file", upload.read()) for upload in uploads]
