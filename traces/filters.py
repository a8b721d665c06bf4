"""The trace browser's query strings, parsed by forms.

The browser never answers a malformed parameter with an error: a value that does not parse is
dropped, with a notice saying which and why (``TraceFilters.notices``), and a malformed offset
or step id reads as none. The REST API parses its own query strings with its schemas
(``traces.api``), which answer 422 instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import QueryDict
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from traces.exceptions import InvalidCursor
from traces.models import TraceMode, TraceStatus
from traces.selectors import TRACE_PAGE_SIZE, decode_cursor

#: Offsets and seqs from query strings are clamped below what a bigint holds.
MAX_QUERY_INT = 2**62
#: The rows of a list page a poll for new traces names at most (a page has 25).
MAX_SHOWN_ROWS = 100


@dataclass(frozen=True)
class TraceFilters:
    """The list's filters, each already checked; ``notices`` say which parameters were
    ignored and why."""

    mode: str = ""
    status: str = ""
    agent_type: str = ""
    user: str = ""
    q: str = ""
    since: date | None = None
    until: date | None = None
    cursor: str = ""
    #: Rows the page shows. Not a filter: "Show 60 new traces" asks for as many as the page
    #: had and the new ones (``traces.views._new_traces``); the address bar leaves it out.
    limit: int = TRACE_PAGE_SIZE
    notices: tuple[str, ...] = ()

    def criteria(self) -> dict[str, Any]:
        """The filters as ``selectors.trace_list_for`` takes them."""
        return {
            "mode": self.mode,
            "status": self.status,
            "agent_type": self.agent_type,
            "user": self.user,
            "q": self.q,
            "since": self.since,
            "until": self.until,
            "cursor": self.cursor,
        }

    def query(self, **changes: Any) -> dict[str, str]:
        """The filters as query parameters (without the cursor unless given)."""
        values = {
            "mode": self.mode,
            "status": self.status,
            "agent_type": self.agent_type,
            "user": self.user,
            "q": self.q,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
        }
        values.update(changes)
        return {name: value for name, value in values.items() if value}


def _choices(values: list[str]) -> dict[str, Any]:
    # The message leaves the value out: it may hold characters a page should not show. Lazy:
    # it is worded when shown, in the reader's language.
    return {
        "choices": [(value, value) for value in values],
        "required": False,
        "error_messages": {
            "invalid_choice": format_lazy(_("not one of {values}."), values=", ".join(values))
        },
    }


class TraceFilterForm(forms.Form):
    """The trace list's filters (``/traces/?...``). ``user`` is for staff only. CharFields
    refuse NUL, which PostgreSQL text cannot hold and no stored value contains."""

    mode = forms.ChoiceField(**_choices(TraceMode.values))
    status = forms.ChoiceField(**_choices(TraceStatus.values))
    agent_type = forms.CharField(max_length=100, required=False)
    user = forms.CharField(max_length=150, required=False)
    q = forms.CharField(max_length=500, required=False)
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    cursor = forms.CharField(max_length=200, required=False)
    limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_SHOWN_ROWS)

    def __init__(self, data: QueryDict, *, staff: bool) -> None:
        super().__init__(data)
        self.staff = staff

    def clean_user(self) -> str:
        user: str = self.cleaned_data["user"]
        if user and not self.staff:
            raise ValidationError(_("only staff see other people's traces."))
        return user

    def clean_cursor(self) -> str:
        cursor: str = self.cleaned_data["cursor"]
        if cursor:
            try:
                decode_cursor(cursor)
            except InvalidCursor as exc:
                raise ValidationError(
                    _("it is not one this page gave; showing the newest.")
                ) from exc
        return cursor

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            cleaned["since"] = cleaned["until"] = None
            raise ValidationError(_("Ignored the time range: 'since' is after 'until'."))
        return cleaned

    def filters(self) -> TraceFilters:
        """The filters that parsed, with a notice for each parameter that did not."""
        self.is_valid()
        notices = [
            str(message)
            if name == NON_FIELD_ERRORS
            else gettext("Ignored %(name)s: %(message)s") % {"name": name, "message": message}
            for name, messages in self.errors.items()
            for message in messages
        ]
        values = {name: self.cleaned_data.get(name) for name in self.fields}
        return TraceFilters(
            mode=values["mode"] or "",
            status=values["status"] or "",
            agent_type=values["agent_type"] or "",
            user=values["user"] or "",
            q=values["q"] or "",
            since=values["since"],
            until=values["until"],
            cursor=values["cursor"] or "",
            limit=values["limit"] or TRACE_PAGE_SIZE,
            notices=tuple(notices),
        )


def trace_filters(params: QueryDict, *, staff: bool) -> TraceFilters:
    """The list filters of a query string (``TraceFilterForm``)."""
    return TraceFilterForm(params, staff=staff).filters()


@dataclass(frozen=True)
class NewTracesQuery:
    """What a first page of the list asks when it polls for new traces (``/traces/new/``,
    beside its filters): the ids of its rows, its ``next_cursor`` (empty when it was not full)
    and the count of new traces it shows."""

    shown: tuple[uuid.UUID, ...]
    last: str
    seen: int


class NewTracesForm(forms.Form):
    """``NewTracesQuery`` from a query string; a malformed id in ``shown`` is dropped."""

    shown = forms.CharField(required=False, max_length=40 * MAX_SHOWN_ROWS)
    last = forms.CharField(required=False, max_length=200)
    seen = forms.IntegerField(required=False, min_value=0, max_value=MAX_QUERY_INT)

    def clean_last(self) -> str:
        last: str = self.cleaned_data["last"]
        if last:
            try:
                decode_cursor(last)
            except InvalidCursor as exc:
                raise ValidationError("not a cursor of this list") from exc  # never shown
        return last

    def query(self) -> NewTracesQuery | None:
        """The query; None when ``last`` or ``seen`` does not parse."""
        if not self.is_valid():
            return None
        values = self.cleaned_data["shown"].split(",")[:MAX_SHOWN_ROWS]
        shown = tuple(i for i in map(parse_step_id, values) if i)
        return NewTracesQuery(
            shown=shown, last=self.cleaned_data["last"], seen=self.cleaned_data["seen"] or 0
        )


class TreeQueryForm(forms.Form):
    """The parameters of the trace page and its fragments: ``step`` (a step id), ``offset``
    (a window's first child), ``after`` (a seq), ``open`` (a window's children opened as a
    reload opens them). A malformed value reads as none: a step id as None, a number as 0;
    numbers are clamped to 0..``MAX_QUERY_INT``; ``open`` is on only for ``true``."""

    step = forms.UUIDField(required=False)
    offset = forms.IntegerField(required=False)
    after = forms.IntegerField(required=False)
    open = forms.NullBooleanField(required=False)

    def step_id(self) -> uuid.UUID | None:
        self.is_valid()
        step_id: uuid.UUID | None = self.cleaned_data.get("step")
        return step_id

    def number(self, name: str) -> int:
        self.is_valid()
        return min(max(0, self.cleaned_data.get(name) or 0), MAX_QUERY_INT)

    def opened(self) -> bool:
        self.is_valid()
        return self.cleaned_data.get("open") is True


def parse_step_id(value: str) -> uuid.UUID | None:
    """A step (or trace) id from a path or a list parameter; None when malformed."""
    return TreeQueryForm({"step": value}).step_id()
