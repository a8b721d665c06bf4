"""Files attached to chat messages: checked and named as a run's input files
(``sandbox.files.input_files``), stored through the artifact storage, recorded as
``Attachment`` rows of the user's message, given to every run that answers the message (its
first, a regeneration, an edit's), and served to the conversation's owner only.

The bytes are written before the message's transaction and removed again if it fails, so no
row ever names a file that is not stored; a file left behind by a process that died in between
is never named by a row, and a conversation's purge removes its messages' files.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog
from django.core.files.base import ContentFile

from chat.exceptions import AttachmentNotFound
from chat.models import Attachment, Conversation, Message
from sandbox.files import InputFile
from traces.artifacts import artifact_storage

logger = structlog.get_logger(__name__)


def storage_name_for(attachment_id: uuid.UUID) -> str:
    return f"attachments/{attachment_id}"


@contextmanager
def files_stored(inputs: Sequence[InputFile]) -> Iterator[list[Attachment]]:
    """Store ``inputs``' bytes and yield their unsaved ``Attachment`` rows (without their
    message), for the caller to save in its transaction; the bytes are removed again when
    the block raises."""
    storage = artifact_storage()
    rows: list[Attachment] = []
    try:
        for item in inputs:
            attachment_id = uuid.uuid4()
            name = storage.save(storage_name_for(attachment_id), ContentFile(item.data))
            rows.append(
                Attachment(
                    id=attachment_id,
                    name=item.name,
                    media_type=item.media_type,
                    size=item.size,
                    sha256=item.describe()["sha256"],
                    storage_name=name,
                )
            )
        yield rows
    except BaseException:
        _remove([row.storage_name for row in rows])
        raise
    if rows:
        logger.info("attachments_stored", count=len(rows))


def attachments_copy(*, source: Message, to: Message) -> list[Attachment]:
    """Give ``to`` (an edited version of ``source``) ``source``'s files: rows of its own on
    the same stored bytes."""
    rows = [
        Attachment(
            message=to,
            name=row.name,
            media_type=row.media_type,
            size=row.size,
            sha256=row.sha256,
            storage_name=row.storage_name,
        )
        for row in source.attachments.all()
    ]
    return Attachment.objects.bulk_create(rows)


def attachment_inputs(message: Message) -> tuple[InputFile, ...]:
    """The message's files as a run's input files, read back from the storage (a file the
    storage lost is left out, and logged)."""
    storage = artifact_storage()
    inputs = []
    for row in message.attachments.all():
        try:
            with storage.open(row.storage_name, "rb") as stored:
                data = bytes(stored.read())
        except FileNotFoundError:
            logger.warning("attachment_missing", attachment_id=str(row.id))
            continue
        inputs.append(InputFile(name=row.name, data=data, media_type=row.media_type))
    return tuple(inputs)


def attachment_get_for(*, user: Any, attachment_id: uuid.UUID) -> Attachment:
    """One of the files of the user's conversations (not deleted); ``AttachmentNotFound``
    (404) for anyone else's, as for a missing one."""
    attachment = (
        Attachment.objects.filter(
            pk=attachment_id, message__conversation__in=Conversation.objects.owned_by(user)
        )
        .select_related("message")
        .first()
    )
    if attachment is None:
        raise AttachmentNotFound(f"Attachment {attachment_id} does not exist.")
    return attachment


def attachment_open(attachment: Attachment) -> Any:
    """The stored bytes as an open file; raises ``AttachmentNotFound`` when the storage no
    longer has them."""
    try:
        return artifact_storage().open(attachment.storage_name, "rb")
    except FileNotFoundError as exc:
        raise AttachmentNotFound(f"Attachment {attachment.id} is no longer stored.") from exc


def attachments_forget(*, conversation_id: uuid.UUID) -> None:
    """Remove the stored bytes of a conversation's files (before it is purged)."""
    names = set(
        Attachment.objects.filter(message__conversation_id=conversation_id).values_list(
            "storage_name", flat=True
        )
    )
    _remove(sorted(names))


def _remove(names: Sequence[str]) -> None:
    storage = artifact_storage()
    for name in names:
        try:
            storage.delete(name)
        except Exception as exc:
            logger.warning("attachment_not_removed", storage_name=name, error=str(exc))
