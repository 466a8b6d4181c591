"""OTLP/HTTP intake: ingest tokens, the receiver of logs and traces, the signals it stores,
their throttling and the folding of repeated signals (docs/otlp.md)."""
