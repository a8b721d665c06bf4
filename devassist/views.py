from __future__ import annotations

from http import HTTPStatus

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error

from chat.views import chat_page
from devassist.envelope import error_response, is_api_path
from devassist.health import health_report
from devassist.htmx import HtmxHttpRequest


@login_not_required
@never_cache
@require_GET
async def healthz(request: HttpRequest) -> HttpResponse:
    healthy, report = await health_report()
    status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
    return JsonResponse(report, status=status)


def home(request: HtmxHttpRequest) -> HttpResponse:
    """The home page is the chat, on a new conversation."""
    return chat_page(request)


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for paths no view matches: the envelope under /api/, the HTML page elsewhere."""
    if is_api_path(request):
        return error_response(request, status=404, code="not_found", message="No such endpoint.")
    return page_not_found(request, exception or Exception("not found"))


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api_path(request):
        return error_response(
            request, status=500, code="internal_error", message="Internal server error."
        )
    return django_server_error(request)
