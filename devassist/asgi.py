"""ASGI entry point: HTTP through Django, websockets through Channels."""

from __future__ import annotations

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devassist.settings")
django_asgi_app = get_asgi_application()

# Routing imports models, so it must come after Django is set up.
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from agent.executor import run_leases_start  # noqa: E402
from devassist.ws_auth import TokenAuthMiddlewareStack, browser_origin_validator  # noqa: E402
from sandbox.backends import warm_start  # noqa: E402
from traces.routing import websocket_urlpatterns as trace_websockets  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Serves /static/ from the app folders, async; a proxy in front may serve them instead.
        "http": ASGIStaticFilesHandler(django_asgi_app),
        "websocket": browser_origin_validator(
            TokenAuthMiddlewareStack(URLRouter([*trace_websockets]))
        ),
    }
)

if settings.SANDBOX_WARM_ON_START:
    warm_start()
# A worker fails the runs of workers that died, even when it runs nothing itself.
run_leases_start()
