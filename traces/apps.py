from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = _("Traces")
    default_auto_field = "django.db.models.BigAutoField"
