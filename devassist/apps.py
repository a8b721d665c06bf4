from __future__ import annotations

from django.apps import AppConfig


class DevAssistConfig(AppConfig):
    name = "devassist"
    verbose_name = "DevAssist"
    default_auto_field = "django.db.models.BigAutoField"
