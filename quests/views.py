from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ephyra.core.machine import MACHINE_VERSION
from ephyra.core.states import State


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "home.html",
        {"states": list(State), "machine_version": MACHINE_VERSION},
    )


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus the database it reached: what a load balancer or an operator checks."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok", "database": connection.vendor})
