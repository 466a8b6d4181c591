"""Deployments: which commit runs where, from forge webhooks, ``manage.py deployed`` and OTLP."""
