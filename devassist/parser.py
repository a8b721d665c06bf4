"""The API's request parser: django-ninja's, refusing at the door what cannot be stored."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from django.utils.datastructures import MultiValueDict
from ninja.errors import ValidationError
from ninja.parser import Parser

from devassist.storable import Path, value_problems


class StorableParser(Parser):
    """JSON bodies, query strings and form fields holding a value that cannot be stored
    (``devassist.storable``: NUL, lone surrogates, integers past 64 bits, NaN/Infinity,
    nesting past ``MAX_JSON_DEPTH``) raise ``ValidationError`` with each value's location,
    as pydantic's errors have them (``["body", "data", "x"]``), before any schema sees them.

    django-ninja reports any error of ``parse_body`` as a 400 "Cannot parse request body"
    raised from it; ``devassist.api`` answers one raised from a ``ValidationError`` with
    that error instead."""

    def parse_body(self, request: HttpRequest) -> Any:
        """The JSON body; a multipart request (one that uploads files) carries it in a part
        named ``payload``."""
        if request.content_type == "multipart/form-data":
            raw = request.POST.get("payload")
            if raw is None:
                raise ValidationError(
                    [
                        {
                            "loc": ("body", "payload"),
                            "msg": "A multipart request carries its JSON body in a part "
                            "named payload.",
                            "type": "missing",
                        }
                    ]
                )
            data = json.loads(raw)
        else:
            data = json.loads(request.body)
        _refuse(data, ("body",))
        return data

    def parse_querydict(
        self, data: MultiValueDict[str, Any], list_fields: list[str], request: HttpRequest
    ) -> dict[str, Any]:
        parsed = super().parse_querydict(data, list_fields, request)
        _refuse(parsed, ("query",) if data is request.GET else ("form",))
        return parsed


def _refuse(data: Any, where: Path) -> None:
    problems = value_problems(data, where)
    if problems:
        raise ValidationError(
            [
                {"loc": problem.path, "msg": problem.message, "type": problem.kind}
                for problem in problems
            ]
        )
