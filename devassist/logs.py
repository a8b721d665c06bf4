"""structlog set-up, done once at settings import: JSON in production, key=value in development.

Standard-library loggers (Django, daphne, channels) go through the same processors, so every line
carries the request id and whatever a run has bound with ``structlog.contextvars``.
"""

from __future__ import annotations

import logging
import logging.config

import structlog

_configured = False


def configure_logging(*, log_format: str, level: str) -> None:
    global _configured
    if _configured:
        return
    _configured = True

    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.types.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(ensure_ascii=False)
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)

    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "structlog": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        renderer,
                    ],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {
                "default": {"class": "logging.StreamHandler", "formatter": "structlog"},
            },
            "root": {"handlers": ["default"], "level": level.upper()},
            "loggers": {
                "django.db.backends": {"level": "WARNING"},
                "daphne": {"level": "WARNING"},
            },
        }
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
