"""The real model server for tests and benchmarks: SmolLM2-135M-Instruct under llama-cpp-python's
OpenAI-compatible server (``tests/llama_server.py``), started from its own virtualenv on a free
loopback port.

The virtualenv is ``.venv-model`` beside the project's (``make model-venv`` installs it from
``requirements/model-server.txt``); ``DEVASSIST_MODEL_PYTHON`` names another interpreter.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import REPO, free_port, http_server

MODEL_PYTHON = Path(
    os.environ.get("DEVASSIST_MODEL_PYTHON") or REPO / ".venv-model" / "bin" / "python"
)
LAUNCHER = REPO / "tests" / "llama_server.py"
#: Loading the model takes a second or two alone; much longer on a machine busy with builds.
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ModelServer:
    """A running model server."""

    #: Its root, ``http://127.0.0.1:<port>``.
    root: str
    #: The model's id as ``GET /v1/models`` reports it (the GGUF file's path): the ``LLM_MODEL``.
    model: str
    process: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        """The ``LLM_BASE_URL`` to point DevAssist at."""
        return f"{self.root}/v1"


def model_server_missing() -> str | None:
    """Why no model server can start here, or None when one can."""
    if MODEL_PYTHON.exists():
        return None
    return (
        f"no model server virtualenv at {MODEL_PYTHON}: `make model-venv` installs it "
        "(or set DEVASSIST_MODEL_PYTHON)"
    )


@contextmanager
def model_server(*, chat_format: str = "") -> Iterator[ModelServer]:
    """Start the model server (with ``chat_format``, see ``tests/llama_server.py``) and yield
    it once it answers ``/v1/models``; it is stopped at the end (a caller that killed it
    itself is fine). Raises ``RuntimeError`` (with the server's output) when it exits or does
    not answer within ``START_TIMEOUT_S``."""
    port = free_port()
    started: list[subprocess.Popen[bytes]] = []
    formats = ["--chat-format", chat_format] if chat_format else []
    with http_server(
        [str(MODEL_PYTHON), str(LAUNCHER), "--port", str(port), *formats],
        port=port,
        ready_path="/v1/models",
        timeout_s=START_TIMEOUT_S,
        started=started.append,
    ) as root:
        models = httpx.get(f"{root}/v1/models", timeout=10).json()
        yield ModelServer(root=root, model=models["data"][0]["id"], process=started[0])
