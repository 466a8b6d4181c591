"""The typed errors of the ingest package. Each carries a human message fit for a response."""

from __future__ import annotations


class IngestError(Exception):
    """Base class: ``str(error)`` and ``error.message`` are the sentence to show the sender."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OtlpDecodeError(IngestError):
    """The body cannot be read as the OTLP request it claims to be (HTTP 400, not retryable)."""


class UnsupportedMediaType(IngestError):
    """The content type (or content encoding) is not one OTLP/HTTP defines (HTTP 415)."""


class PayloadTooLarge(IngestError):
    """The body, once decompressed, is larger than the receiver accepts (HTTP 413)."""
