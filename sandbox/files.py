"""Files given to a run's code: checked against the limits, named safely, described.

``input_files`` is the door: what a user attaches (a chat upload, an API client's files) goes
through it before a run is created, and comes out as ``InputFile`` values, which the sandbox
copies read-only under ``/tmp/inputs`` for each interpreter of the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from sandbox.backends.base import SandboxFile
from sandbox.exceptions import SandboxInputsTooLarge
from sandbox.kernel_program import INPUTS as INPUTS_DIR
from traces.artifacts import sanitise_name, sniff


@dataclass(frozen=True)
class InputFile(SandboxFile):
    """A file for a run's code: ``name`` is safe (``traces.artifacts.sanitise_name``) and
    unique among the run's files; ``media_type`` is sniffed from the content."""

    media_type: str

    @property
    def path(self) -> str:
        return f"{INPUTS_DIR}/{self.name}"

    def describe(self) -> dict[str, Any]:
        """What the trace records of it: name, path, size, media type and SHA-256."""
        return {
            "name": self.name,
            "path": self.path,
            "size": self.size,
            "media_type": self.media_type,
            "sha256": hashlib.sha256(self.data).hexdigest(),
        }


def input_files(files: Iterable[tuple[str, bytes]]) -> tuple[InputFile, ...]:
    """``(name as given, content)`` pairs as a run's input files: names made safe (``../x``
    becomes ``x``, ``<script>.csv`` ``_script_.csv``, NUL and control characters ``_``) and
    unique (``data.csv``, ``data-2.csv``), media types sniffed. Raises
    ``SandboxInputsTooLarge`` as ``check_input_sizes``."""
    given = list(files)
    check_input_sizes([(name, len(data)) for name, data in given])
    taken: set[str] = set()
    inputs: list[InputFile] = []
    for raw_name, data in given:
        name = _unique(sanitise_name(raw_name), taken)
        media_type, _ = sniff(data, name)
        inputs.append(InputFile(name=name, data=data, media_type=media_type))
    return tuple(inputs)


def check_input_sizes(sizes: Sequence[tuple[str, int]]) -> None:
    """Raise ``SandboxInputsTooLarge`` when ``(name, bytes)`` files are past the limits:
    more than ``SANDBOX_INPUT_FILES_MAX`` files, one past ``SANDBOX_INPUT_FILE_MAX_BYTES`` or
    all together past ``SANDBOX_INPUT_FILES_MAX_BYTES``. An upload is checked with this
    before its files are read."""
    limits = {
        "max_files": settings.SANDBOX_INPUT_FILES_MAX,
        "max_file_bytes": settings.SANDBOX_INPUT_FILE_MAX_BYTES,
        "max_total_bytes": settings.SANDBOX_INPUT_FILES_MAX_BYTES,
    }
    if len(sizes) > limits["max_files"]:
        raise SandboxInputsTooLarge(
            f"{len(sizes)} files were given; a run takes at most {limits['max_files']}.",
            details={**limits, "files": len(sizes)},
        )
    for raw_name, size in sizes:
        if size > limits["max_file_bytes"]:
            name = sanitise_name(raw_name)
            raise SandboxInputsTooLarge(
                f"{name} is {size:,} bytes; a file may have at most {limits['max_file_bytes']:,}.",
                details={**limits, "name": name, "bytes": size},
            )
    total = sum(size for _, size in sizes)
    if total > limits["max_total_bytes"]:
        raise SandboxInputsTooLarge(
            f"The files have {total:,} bytes together; a run takes at most "
            f"{limits['max_total_bytes']:,}.",
            details={**limits, "bytes": total},
        )


def _unique(name: str, taken: set[str]) -> str:
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        stem, dot, extension = name, "", ""
    candidate, number = name, 1
    while candidate.lower() in taken:
        number += 1
        candidate = f"{stem}-{number}{dot}{extension}"
    taken.add(candidate.lower())
    return candidate
