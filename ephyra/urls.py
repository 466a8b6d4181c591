"""The project's URLs. Apps are included by name, so the project package imports none of them."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("ops.urls")),
    path("", include("inbox.urls")),
    path("", include("quests.urls")),
    path("missions/", include("missions.urls")),
    path("api/", include("api.urls")),
    path("tokens/", include("api.page_urls")),
    path("admin/", admin.site.urls),
    path("hooks/", include("intake.hooks.urls")),
    path("v1/", include("intake.otlp.urls")),
]
