"""Helpers for the admin tests: a page's query count and an object's change page."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext


def count_queries(client: Client, url: str) -> int:
    """The queries ``url`` takes to answer 200."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == HTTPStatus.OK
    return len(queries)


def change_url(obj: Any) -> str:
    meta = obj._meta
    return f"/admin/{meta.app_label}/{meta.model_name}/{obj.pk}/change/"
