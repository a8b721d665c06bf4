"""The ``execute_code`` tool: run model-written Python through the safety scan and the sandbox.

The observation is data for the model, never an exception for what the code did: blocked code,
a non-zero exit or a timeout all come back as a dict. Only an unreachable sandbox or a user who
already holds all their sandbox slots (``ToolFailed``, which the loop hands to the model as the
step's error) or oversized code (``SandboxCodeTooLarge``, wrapped by the registry into
``ToolFailed``) raise.
"""

from __future__ import annotations

from typing import Any

from agent.exceptions import ToolFailed
from agent.tools.registry import Tool, ToolContext
from sandbox.exceptions import SandboxBusy, SandboxUnavailable
from sandbox.services import code_size_check, run_scanned

DEFAULT_TIMEOUT_S = 10
MAX_TIMEOUT_S = 60
MAX_CODE_CHARS = 100 * 1024

DESCRIPTION = (
    "Run a Python 3 script in an isolated sandbox and return its stdout, stderr and exit "
    "code; print what you want to see. Each call starts fresh (nothing is kept between "
    "calls), with no network, no subprocesses and a read-only filesystem except /tmp. The "
    "interpreter has Python 3's standard library; third-party packages may be missing (if "
    "an import fails, do without it). A safety check runs first and may block the code with "
    "a reason: rewrite the code to avoid what it names."
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
    """Scan, then run ``args["code"]``; returns the observation (see ``docs/tools.md``).

    Blocked code returns ``{"blocked": True, "safety", "findings"}`` without running.
    Cancelling the awaiting task stops the container (``run_scanned`` sets the sandbox
    thread's cancel event) and raises ``asyncio.CancelledError``. Raises
    ``SandboxCodeTooLarge`` and ``ToolFailed`` (sandbox unavailable, or ``context.user``
    already has ``SANDBOX_USER_SLOTS`` executions running: code ``sandbox_busy``)."""
    code: str = args["code"]
    timeout_s = float(args.get("timeout_s", DEFAULT_TIMEOUT_S))
    code_size_check(code)
    try:
        report, result = await run_scanned(user=context.user, code=code, timeout_s=timeout_s)
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
    if report.warnings:
        observation["safety"] = report.text
    return observation


TOOL = Tool(
    name="execute_code",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    handler=execute_code,
)
