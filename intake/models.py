"""Intake's models, defined beside the code that writes them (``intake/otlp``, ``intake/hooks``)
and gathered here, where Django looks for an app's models."""

from intake.deployments.models import Deployment
from intake.hooks.models import Hook, RefusedDeliveries, ReviewLink, WebhookDelivery
from intake.otlp.models import (
    FingerprintMute,
    IngestedSignal,
    IngestToken,
    MergeWindow,
    MinuteCount,
    RefusedExports,
)

__all__ = [
    "Deployment",
    "FingerprintMute",
    "Hook",
    "IngestToken",
    "IngestedSignal",
    "MergeWindow",
    "MinuteCount",
    "RefusedDeliveries",
    "RefusedExports",
    "ReviewLink",
    "WebhookDelivery",
]
