from __future__ import annotations

from http import HTTPStatus

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.cache import cache_page, never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error
from django.views.i18n import JavaScriptCatalog
from django_htmx.http import HttpResponseClientRefresh, trigger_client_event

from chat.views import chat_page
from devassist.envelope import error_response, is_api_path
from devassist.exceptions import Conflict, NotFound
from devassist.forms import ApiTokenForm
from devassist.health import health_report
from devassist.htmx import HtmxHttpRequest, local_next
from devassist.i18n import JS_CATALOG_CACHE_S, language_cookie_set
from devassist.models import Language, Theme
from devassist.selectors import api_tokens_for, language_for
from devassist.services import user_preferences_update
from devassist.tokens import (
    MAX_ACTIVE_TOKENS,
    TOKEN_NAME_MAX,
    api_token_create,
    api_token_revoke_for,
)


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


@require_POST
def theme_switch(request: HtmxHttpRequest) -> HttpResponse:
    """Store the user's theme (``theme``: system, light or dark; anything else is 400). Answers
    HTMX with the switch and a ``theme-changed`` event (``{"theme": ...}``) that the page
    applies at once; a form posted without JavaScript goes back to ``next`` (a local URL) or
    home."""
    if request.POST.get("theme") not in Theme.values:
        return HttpResponseBadRequest(_("Unknown theme."))
    theme = Theme(request.POST["theme"])
    user_preferences_update(user=request.user, theme=theme)
    if not request.htmx:
        return redirect(local_next(request))
    response = render(request, "_theme_switch.html", {"theme": theme.value})
    return trigger_client_event(response, "theme-changed", {"theme": theme.value})


@require_POST
def language_switch(request: HtmxHttpRequest) -> HttpResponse:
    """Store the user's language (``language``: a ``Language`` value, ``""`` for the browser's;
    anything else is 400) and set the language cookie to it (``devassist.i18n``). HTMX is told
    to reload the page, which every string of it needs; a form posted without JavaScript goes
    back to ``next`` (a local URL) or home."""
    if request.POST.get("language") not in Language.values:
        return HttpResponseBadRequest(_("Unknown language."))
    language = Language(request.POST["language"])
    user_preferences_update(user=request.user, language=language)
    response = HttpResponseClientRefresh() if request.htmx else redirect(local_next(request))
    language_cookie_set(response, language.value)
    return response


@never_cache
@require_http_methods(["GET", "POST"])
def api_tokens(request: HtmxHttpRequest) -> HttpResponse:
    """The user's API tokens. GET lists them with the form for a new one; POST creates one
    (``ApiTokenForm``) and answers the page with its text, shown this once, and the two
    variables that send an agent's traces here (docs/opentelemetry.md). A refused name is the
    form's error (400; 409 past ``MAX_ACTIVE_TOKENS``). Never cached: the answer may hold a
    token."""
    form = ApiTokenForm(request.POST if request.method == "POST" else None)
    created = None
    error = ""
    status = HTTPStatus.OK
    if form.is_bound and not form.is_valid():
        status, error = HTTPStatus.BAD_REQUEST, str(form.errors["name"][0])
    elif form.is_bound:
        try:
            token, raw = api_token_create(user=request.user, name=form.cleaned_data["name"])
        except Conflict:
            status = HTTPStatus.CONFLICT
            error = _(
                "You have %(count)d active tokens, the most one may hold: revoke one you no "
                "longer use first."
            ) % {"count": MAX_ACTIVE_TOKENS}
        else:
            created = {"token": token, "raw": raw}
    context = {
        "tokens": api_tokens_for(user=request.user),
        "created": created,
        "error": error,
        "name": request.POST.get("name", "") if error else "",
        "name_max": TOKEN_NAME_MAX,
        "base_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render(request, "tokens.html", context, status=status)


@require_POST
def api_token_revoke(request: HtmxHttpRequest, token_id: int) -> HttpResponse:
    """Revoke the user's token ``token_id`` (404 for another's), then back to the list."""
    try:
        api_token_revoke_for(user=request.user, token_id=token_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return redirect("tokens")


class LoginView(auth_views.LoginView):
    """Django's login, which also puts the user's stored language into the language cookie
    (or removes the cookie when they left it to the browser), so that their choice holds in
    any browser they sign in from (``devassist.i18n``)."""

    redirect_authenticated_user = True

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_valid(form)
        language_cookie_set(response, language_for(user=form.get_user()))
        return response


#: The JavaScript catalogue (``gettext`` and friends for the pages' scripts, with the active
#: language's formats), which the login page needs too. Its URL carries the catalogue's
#: version and language (``base.html``), so it is cached for a day, in this process and in
#: browsers.
javascript_catalog = login_not_required(
    cache_page(JS_CATALOG_CACHE_S, key_prefix="jsi18n")(JavaScriptCatalog.as_view())
)


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
