from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path, re_path

from devassist import views
from devassist.api import api
from traces.otlp_api import otlp_elsewhere, otlp_logs, otlp_metrics, otlp_traces


def api_urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """The API's routes, exempt from ``LoginRequiredMiddleware``: the API authenticates each
    request itself (a session with CSRF, or a bearer token) and answers 401 in the error
    envelope rather than redirecting to the login page. Its docs and schema stay pages behind
    their own ``login_required`` (``devassist.api``)."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            login_not_required(pattern.callback)
    return patterns, app_name, namespace


urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    # OTLP/HTTP's standard path: an OTel exporter given this server's URL as
    # OTEL_EXPORTER_OTLP_ENDPOINT posts here. A signal's own endpoint variable
    # (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is used as written, so a trailing slash is taken too:
    # APPEND_SLASH cannot redirect a POST.
    re_path(r"^v1/traces/?$", otlp_traces, name="otlp_traces"),
    re_path(r"^v1/logs/?$", otlp_logs, name="otlp_logs"),
    re_path(r"^v1/metrics/?$", otlp_metrics, name="otlp_metrics"),
    re_path(r"^v1/(?P<rest>.*)$", otlp_elsewhere, name="otlp_elsewhere"),
    path("ui/theme", views.theme_switch, name="theme"),
    path("ui/language", views.language_switch, name="language"),
    path("jsi18n/", views.javascript_catalog, name="javascript-catalog"),
    path("tokens/", views.api_tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", views.api_token_revoke, name="token_revoke"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("traces/", include("traces.urls")),
    path("docs/", include("agent.knowledge.urls")),
    path("", include("chat.urls")),
    # The API first: its routes are exact, so the admin's catch-all below does not shadow
    # /admin/agent-traces.
    path("", api_urls()),
    path("admin/", admin.site.urls),
]

handler404 = "devassist.views.api_not_found"
handler500 = "devassist.views.server_error"
