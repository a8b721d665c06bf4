"""The traces app's domain errors. The store and the selectors raise them; ``devassist.api``
turns them into the error envelope, and the browser views turn the ``NotFound`` ones into 404
pages."""

from __future__ import annotations

from http import HTTPStatus

from devassist.errors import ApiError, BadRequest, Conflict, NotFound, PayloadTooLarge


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


class InvalidParent(BadRequest):
    code = "invalid_parent"


class InvalidStep(BadRequest):
    code = "invalid_step"


class BatchTooLarge(PayloadTooLarge):
    code = "batch_too_large"


class TreeTooLarge(PayloadTooLarge):
    code = "tree_too_large"


class CostOutOfRange(ApiError):
    status = HTTPStatus.UNPROCESSABLE_ENTITY
    code = "cost_out_of_range"


class InvalidCursor(BadRequest):
    code = "validation_error"
    status = HTTPStatus.UNPROCESSABLE_ENTITY
