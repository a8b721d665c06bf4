from __future__ import annotations

from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    verbose_name = "Sandbox"
    default_auto_field = "django.db.models.BigAutoField"
