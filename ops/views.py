"""``/healthz``, ``/readyz`` and ``/metrics``: what a load balancer, an orchestrator and
Prometheus ask (docs/observability.md)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ops.health import readiness
from ops.metrics import EphyraCollector

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
# Headers a reverse proxy adds: a request that carries one came through it, from anywhere,
# even though it reaches us from the loopback address.
PROXIED = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Alive: the process answers. Nothing else is checked (that is /readyz)."""
    return HttpResponse("ok\n", content_type="text/plain")


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Ready: database, broker and data directory, each by name, passed or failed."""
    checks = readiness()
    ready = all(checks.values())
    body = {
        "status": "ready" if ready else "unavailable",
        "checks": {name: "ok" if ok else "failed" for name, ok in checks.items()},
    }
    return JsonResponse(body, status=200 if ready else 503)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token = settings.EPHYRA_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            return None
        return HttpResponse(
            "metrics need Authorization: Bearer <EPHYRA_METRICS_TOKEN>\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    local = request.META.get("REMOTE_ADDR") in LOOPBACK
    if local and not any(header in request.META for header in PROXIED):
        return None
    return HttpResponse(
        "metrics are served only to this host unless EPHYRA_METRICS_TOKEN is set\n",
        status=403,
        content_type="text/plain",
    )


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        return refused
    # A registry per scrape: the collector reads the database now, whichever process answers.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EphyraCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
