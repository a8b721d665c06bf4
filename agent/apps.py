from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent"
    default_auto_field = "django.db.models.BigAutoField"
