"""The Celery application. Configuration comes from Django settings (the CELERY_ namespace)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ephyra.settings")

app = Celery("ephyra")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
