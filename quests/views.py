from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
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
