from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SandboxConfig(AppConfig):
    name = "sandbox"
    verbose_name = _("Sandbox")
    default_auto_field = "django.db.models.BigAutoField"
