from django.urls import path

from intake.otlp import views as otlp

app_name = "otlp"

# OTLP/HTTP's default paths; exporters append them to OTEL_EXPORTER_OTLP_ENDPOINT.
urlpatterns = [
    path("logs", otlp.logs, name="logs"),
    path("traces", otlp.traces, name="traces"),
    # /v1/metrics and any other: a google.rpc.Status too, not Django's HTML 404 page (an SDK
    # configured with OTEL_EXPORTER_OTLP_ENDPOINT exports metrics there unless told not to).
    path("<path:rest>", otlp.elsewhere, name="elsewhere"),
]
