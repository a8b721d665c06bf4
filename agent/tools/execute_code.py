"""The ``execute_code`` tool: run model-written Python through the safety scan and the sandbox.

The observation is data for the model, never an exception for what the code did: blocked code,
a non-zero exit or a timeout all come back as a dict. Only an unreachable sandbox or a user who
already holds all their sandbox slots (``ToolFailed``, which the loop hands to the model as the
step's error) or oversized code (``SandboxCodeTooLarge``, wrapped by the registry into
``ToolFailed``) raise.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agent.exceptions import ToolFailed
from agent.tools.registry import Tool, ToolContext
from sandbox.exceptions import SandboxBusy, SandboxUnavailable
from sandbox.services import code_size_check, run_scanned

DEFAULT_TIMEOUT_S = 10
MAX_TIMEOUT_S = 60
MAX_CODE_CHARS = 100 * 1024

_STATE = {
    "run": "Calls of one request share one Python interpreter, as a notebook's cells do: "
    "variables, imports and files in /tmp persist from one call to the next (the result says "
    "when the interpreter was restarted and earlier state is gone).",
    "call": "Each call starts fresh: nothing is kept between calls.",
}


def description() -> str:
    """What the model reads about the tool, for the configured ``SANDBOX_STATE``."""
    return (
        "Run Python 3 code in an isolated sandbox and return its stdout, stderr and exit "
        f"code; print what you want to see. {_STATE.get(settings.SANDBOX_STATE, _STATE['call'])} "
        "There is no network, no subprocesses and a read-only filesystem except /tmp. numpy, "
        "pandas and matplotlib are installed (other third-party packages may be missing: if an "
        "import fails, do without it). Figures you draw with matplotlib (shown with plt.show() "
        "or left open) and files you write under /tmp/outputs/ are shown to the user; the "
        "result lists them. Files the user attached are in /tmp/inputs/ (read-only). A safety "
        "check runs first and may block the code with a reason: rewrite the code to avoid what "
        "it names."
    )


PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CODE_CHARS,
            "description": "The complete Python 3 source to run.",
        },
        "timeout_s": {
            "type": "number",
            "minimum": 1,
            "maximum": MAX_TIMEOUT_S,
            "default": DEFAULT_TIMEOUT_S,
            "description": "Seconds before the run is stopped (wall clock).",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


async def execute_code(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Scan, then run ``args["code"]`` in the run's sandbox (``context.sandbox``; a fresh
    container without one); returns the result (see ``docs/tools.md``): the program's output
    and exit, the files it wrote (``artifacts``: records of the files stored for the run's
    trace), the outputs left out and why, and a note when the interpreter's state was lost.

    Blocked code returns ``{"blocked": True, "safety", "findings"}`` without running. What
    the program prints goes to ``context.on_output`` while it runs, when one is given.
    Cancelling the awaiting task stops the container (``run_scanned`` sets the sandbox
    thread's cancel event) and raises ``asyncio.CancelledError``. Raises
    ``SandboxCodeTooLarge`` and ``ToolFailed`` (sandbox unavailable, or ``context.user``
    already has ``SANDBOX_USER_SLOTS`` executions running: code ``sandbox_busy``)."""
    code: str = args["code"]
    timeout_s = float(args.get("timeout_s", DEFAULT_TIMEOUT_S))
    code_size_check(code)
    try:
        ran = await run_scanned(
            user=context.user,
            code=code,
            timeout_s=timeout_s,
            on_output=context.on_output,
            session=context.sandbox,
        )
    except SandboxBusy as exc:
        raise ToolFailed(
            f"code execution is busy: {exc.message} Answer without running code, or call "
            "execute_code again in a later step.",
            details={"tool": TOOL.name, "error": "SandboxBusy", "code": exc.code, **exc.details},
        ) from exc
    except SandboxUnavailable as exc:
        raise ToolFailed(
            f"code execution is unavailable: {exc}. Answer without running code, or try "
            "again later.",
            details={"tool": TOOL.name, "error": "SandboxUnavailable", "hint": exc.hint},
        ) from exc
    report, result = ran.report, ran.result
    if result is None:
        return {
            "blocked": True,
            "safety": report.text,
            "findings": [
                {"rule_id": f.rule_id, "level": f.level, "line": f.line} for f in report.findings
            ],
        }
    observation: dict[str, Any] = {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "oom_killed": result.oom_killed,
        "cancelled": result.cancelled,
        "truncated": result.truncated,
        "duration_ms": result.duration_ms,
    }
    if ran.artifacts:
        observation["artifacts"] = [artifact.as_dict() for artifact in ran.artifacts]
    if result.skipped_files or result.skipped_more:
        observation["skipped_files"] = [f.as_dict() for f in result.skipped_files]
        if result.skipped_more:
            observation["skipped_more"] = result.skipped_more
    if result.state_lost:
        observation["state_lost"] = True
        observation["state"] = STATE_LOST
    elif result.state_restarted:
        observation["state_restarted"] = True
        observation["state"] = STATE_RESTARTED
    if report.warnings:
        observation["safety"] = report.text
    return observation


#: The notes the model reads when the interpreter of its run was lost.
STATE_LOST = (
    "The interpreter stopped during this call (it timed out, crashed or was stopped): the "
    "variables, imports and files of earlier calls are gone. The next call starts in a fresh "
    "interpreter: load or compute again what it needs."
)
STATE_RESTARTED = (
    "This call ran in a fresh interpreter (the previous one was lost): variables, imports "
    "and files of earlier calls were gone; /tmp/inputs is there again."
)
#: What the model reads of an output file's record.
_SHOWN_KEYS = ("name", "media_type", "size", "width", "height")


def observe(result: Any) -> Any:
    """What the model reads of a result: the files listed by name, type, size and image
    dimensions only (never their bytes, ids or hashes)."""
    if not isinstance(result, dict) or not isinstance(result.get("artifacts"), list):
        return result
    files = [
        {key: record[key] for key in _SHOWN_KEYS if key in record}
        for record in result["artifacts"]
        if isinstance(record, dict)
    ]
    return {**result, "artifacts": files}


TOOL = Tool(
    name="execute_code",
    description=description(),
    parameters=PARAMETERS,
    handler=execute_code,
    observe=observe,
)
