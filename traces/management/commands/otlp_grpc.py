"""``manage.py otlp_grpc``: serve OTLP/gRPC ingestion (``traces.otlp_grpc``) until stopped.

A process of its own beside the web server, on ``OTLP_GRPC_ADDRESS`` (``127.0.0.1:4317``) or
``--address``. Its spans reach open trace pages live through the channel layer, so with
several processes (this one and daphne) set ``REDIS_URL``: with the in-memory default, pages
show them when reloaded. SIGTERM or SIGINT stops it, letting calls under way finish.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from traces.otlp_grpc import otlp_grpc_server

#: Calls under way get this long to finish once the server is told to stop.
STOP_GRACE_S = 10


class Command(BaseCommand):
    help = "Serve OTLP/gRPC trace and log ingestion (TraceService, LogsService)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--address",
            default=settings.OTLP_GRPC_ADDRESS,
            help="host:port to listen on (default: OTLP_GRPC_ADDRESS, %(default)s)",
        )
        parser.add_argument(
            "--workers", type=int, default=4, help="calls served at once (default: %(default)s)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server, port = otlp_grpc_server(options["address"], workers=options["workers"])
        stopping = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.set())
        server.start()
        host = options["address"].rsplit(":", 1)[0]
        self.stdout.write(f"OTLP/gRPC on {host}:{port} (TraceService, LogsService)", ending="\n")
        self.stdout.flush()
        # Woken every second: a signal that the kernel hands to one of the server's threads
        # runs its Python handler only once this (main) thread runs again.
        while not stopping.wait(timeout=1):
            pass
        server.stop(STOP_GRACE_S).wait()
        self.stdout.write("OTLP/gRPC stopped")
