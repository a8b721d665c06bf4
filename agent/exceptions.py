"""The agent's domain errors (``devassist.api`` turns them into the error envelope)."""

from __future__ import annotations

from devassist.errors import BadRequest, Conflict, NotFound


class AgentInputInvalid(BadRequest):
    code = "agent_input_invalid"


class RunNotFound(NotFound):
    code = "run_not_found"


class RunFinished(Conflict):
    code = "run_finished"
