"""The traces app's domain errors. The store and the selectors raise them; ``devassist.api``
maps their kinds to HTTP statuses, and the browser views turn the ``NotFound`` ones into 404
pages."""

from __future__ import annotations

from devassist.exceptions import (
    Conflict,
    Forbidden,
    InvalidInput,
    InvalidValue,
    NotFound,
    TooLarge,
)


class TraceNotFound(NotFound):
    code = "trace_not_found"


class StepNotFound(NotFound):
    code = "step_not_found"


class StepValueNotFound(NotFound):
    """A key that a step's data does not have."""

    code = "step_value_not_found"


class TraceNotRunning(Conflict):
    code = "trace_not_running"


class StepIdConflict(Conflict):
    code = "step_id_conflict"


class InvalidParent(InvalidInput):
    code = "invalid_parent"


class InvalidStep(InvalidInput):
    code = "invalid_step"


class InvalidTraceStatus(InvalidInput):
    """A trace completes only with a final status."""


class BatchTooLarge(TooLarge):
    code = "batch_too_large"


class TreeTooLarge(TooLarge):
    code = "tree_too_large"


class CostOutOfRange(InvalidValue):
    code = "cost_out_of_range"


class InvalidCursor(InvalidValue):
    code = "validation_error"


class ArtifactNotFound(NotFound):
    code = "artifact_not_found"


class TraceOfAnotherUser(Forbidden):
    """OTLP spans for a trace id that another user's spans opened."""

    code = "trace_of_another_user"


class TraceNotFromOtlp(Conflict):
    """OTLP spans for a trace id that a trace recorded another way already has."""

    code = "trace_not_from_otlp"
