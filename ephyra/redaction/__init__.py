"""Redaction: secrets and personal data taken out of any text before it is stored, logged,
shown or sent (``redact.redact``), with the rules it applies (``rules``).

Pure and shared: the standard library only, so every adapter may use it (telemetry for OTLP
records, intake for forge webhooks, the agent for prompts, the runner's records). It is held
equal to a plain reference implementation by the tests (``docs/telemetry.md``).
"""
