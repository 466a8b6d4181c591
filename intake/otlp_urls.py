from django.urls import path

from intake import otlp

app_name = "otlp"

# OTLP/HTTP's default paths; exporters append them to OTEL_EXPORTER_OTLP_ENDPOINT.
urlpatterns = [
    path("logs", otlp.logs, name="logs"),
    path("traces", otlp.traces, name="traces"),
]
