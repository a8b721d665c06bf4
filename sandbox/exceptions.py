"""The sandbox's domain errors: refusals of code, and an engine or image that is not there.

The ``DomainError`` kinds are mapped to HTTP statuses by ``devassist.api``; ``ImageError`` and
``SandboxUnavailable`` are raised between the sandbox's own modules (and the ``sandbox_image``
command), which turn them into a message for people.
"""

from __future__ import annotations

from devassist.exceptions import Busy, InvalidInput, TooLarge, Unavailable


class SandboxCodeBlocked(InvalidInput):
    code = "sandbox_code_blocked"


class SandboxCodeTooLarge(TooLarge):
    code = "sandbox_code_too_large"


class SandboxBusy(Busy):
    """The user already holds all their sandbox slots. ``details``: ``user_slots``."""

    code = "sandbox_busy"


class DockerNotAvailable(Unavailable):
    code = "docker_not_available"


class SandboxUnavailable(Exception):
    """The backend cannot run code right now (for Docker: no engine reachable)."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class ImageError(Exception):
    """The image cannot be built or inspected; the message says why and what to do."""


class EngineUnavailable(ImageError):
    """No Docker engine answered."""


class SandboxInputsTooLarge(TooLarge):
    """Files given to a run are past ``SANDBOX_INPUT_FILES_MAX`` or the size limits.
    ``details``: ``max_files``, ``max_file_bytes``, ``max_total_bytes`` and what was given."""

    code = "sandbox_inputs_too_large"
