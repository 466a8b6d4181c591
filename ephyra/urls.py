from django.contrib import admin
from django.urls import include, path

from quests import views as quest_views

urlpatterns = [
    path("", quest_views.home, name="home"),
    path("healthz", quest_views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("hooks/", include("intake.urls")),
    path("v1/", include("intake.otlp_urls")),
]
