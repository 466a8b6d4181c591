from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "HTTP API"

    def ready(self) -> None:
        from api import schema  # noqa: F401  (registers the schema's authentication extensions)
