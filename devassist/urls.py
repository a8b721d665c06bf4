from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from devassist import views
from devassist.api import api

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("traces/", include("traces.urls")),
    path("", include("chat.urls")),
    # The API first: its routes are exact, so the admin's catch-all below does not shadow
    # /admin/agent-traces.
    path("", api.urls),
    path("admin/", admin.site.urls),
]

handler404 = "devassist.views.api_not_found"
handler500 = "devassist.views.server_error"
