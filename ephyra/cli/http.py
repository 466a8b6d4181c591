"""The one place the command line speaks HTTP: JSON in and out over urllib, problem details
(RFC 9457 style) read into an ``ApiError`` that carries the exit code it means.

Exit codes (docs/cli.md): 0 ok, 1 refused by the machine (409, 422), 2 usage or input error
(400 and the other client errors about the request itself), 3 not found or not allowed (401,
403, 404), 4 the server cannot be used now (unreachable, 429, 5xx).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_DENIED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
API_PREFIX = "/api/v1/"
USER_AGENT = "ephyra-cli/1"
TIMEOUT = 30.0  # seconds; a server that says nothing for this long counts as unreachable


def exit_code_for(status: int) -> int:
    if status in (409, 422):
        return EXIT_REFUSED
    if status in (401, 403, 404):
        return EXIT_DENIED
    if status == 429 or status >= 500:
        return EXIT_UNREACHABLE
    return EXIT_USAGE


@dataclass
class ApiError(Exception):
    """A request the command could not complete. ``status`` is 0 when no answer came."""

    status: int
    message: str
    problem: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def exit_code(self) -> int:
        return EXIT_UNREACHABLE if self.status == 0 else exit_code_for(self.status)

    def lines(self) -> list[str]:
        """What the person reads: the message, then each field error of a 400."""
        out = [self.message]
        errors = self.problem.get("errors")
        if isinstance(errors, dict):
            for name, problems in errors.items():
                for problem in problems if isinstance(problems, list) else [problems]:
                    out.append(f"  {name}: {_text_of(problem)}")
        elif isinstance(errors, list):
            out.extend(f"  {_text_of(problem)}" for problem in errors)
        return out


def _text_of(problem: Any) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    parts = [str(problem[k]) for k in ("line", "path") if problem.get(k) not in (None, "")]
    parts.append(str(problem.get("message") or problem.get("msg") or json.dumps(problem)))
    return ": ".join(parts)


class Client:
    """Requests to one server with one token. Paths are relative to ``/api/v1/``."""

    def __init__(self, url: str, token: str, *, timeout: float = TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v not in (None, "", False)}
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any] | None = None, *, key: str = "") -> Any:
        """A write; each carries an ``Idempotency-Key`` so a retried request applies once."""
        return self.request(
            "POST", path, body or {}, headers={"Idempotency-Key": key or uuid.uuid4().hex}
        )

    def upload(self, path: str, field: str, name: str, content: bytes) -> Any:
        """One file as ``multipart/form-data`` (the evidence upload)."""
        boundary = uuid.uuid4().hex
        safe = name.replace('"', "_").replace("\r", "_").replace("\n", "_")
        data = b"".join(
            [
                f"--{boundary}\r\n".encode(),
                f'Content-Disposition: form-data; name="{field}"; filename="{safe}"\r\n'.encode(),
                b"Content-Type: application/octet-stream\r\n\r\n",
                content,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        return self.request(
            "POST", path, data=data, content_type=f"multipart/form-data; boundary={boundary}"
        )

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
    ) -> Any:
        target = path if path.startswith(("http://", "https://")) else self.url + API_PREFIX + path
        sent = {"Accept": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            data = json.dumps(body).encode("utf-8")
        if data is not None:
            sent["Content-Type"] = content_type
        request = urllib.request.Request(target, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                raw = answer.read()
                kind = answer.headers.get_content_type()
        except urllib.error.HTTPError as failure:
            raise _problem(failure) from None
        except (TimeoutError, urllib.error.URLError, OSError) as failure:
            reason = getattr(failure, "reason", failure)
            raise ApiError(0, f"cannot reach {self.url}: {reason}") from None
        if not raw:
            return {}
        if kind.endswith("json"):
            return json.loads(raw)
        return raw.decode("utf-8", "replace")


def _problem(failure: urllib.error.HTTPError) -> ApiError:
    status = failure.code
    try:
        problem = json.loads(failure.read() or b"{}")
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    detail = problem.get("detail") or problem.get("title") or failure.reason or "error"
    message = str(detail)
    if status == 409 and problem.get("state"):
        head = str(problem.get("head") or "")[:12]
        now = [] if f"now {problem['state']}" in message else [f"now {problem['state']}"]
        now += [f"head {head}"] if head else []
        message = f"{message} ({', '.join(now)})" if now else message
    elif status == 422 and problem.get("reason") and problem["reason"] not in message:
        message = f"{message}: {problem['reason']}"
    elif status == 429:
        wait = failure.headers.get("Retry-After")
        message = f"{message} (retry after {wait} s)" if wait else message
    elif status >= 500 and not problem:
        message = f"the server failed ({status} {failure.reason})"
    return ApiError(status, message, problem)
