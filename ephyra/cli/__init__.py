"""The ``ephyra`` command line: a client of the HTTP API (``/api/v1/``) on urllib, plus the
commands that need no server (``policy check``, ``replay``, ``completion``). It imports no
Django and no app: it runs wherever Python and this package are installed."""

from ephyra.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
