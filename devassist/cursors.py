"""Keyset cursors for lists ordered newest first by (timestamp, id): an opaque URL-safe token."""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime

from django.utils.dateparse import parse_datetime


def encode_cursor(when: datetime, ident: uuid.UUID) -> str:
    raw = f"{when.isoformat()}|{ident}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The (timestamp, id) of a cursor ``encode_cursor`` made; ``ValueError`` for anything
    else (callers turn it into their API's error)."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw, _, ident = base64.urlsafe_b64decode(padded).decode().partition("|")
        when = parse_datetime(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("not a cursor") from exc
    if when is None or when.tzinfo is None:
        raise ValueError("not a cursor: bad timestamp")
    return when, uuid.UUID(ident)
