"""The schema's shared parts: every operation may answer a problem (application/problem+json),
the token is a bearer scheme and the session a cookie."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.TokenAuthentication"
    name = "bearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal token: eph_..."}


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.SessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}


PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "object"},
        "reason": {"type": "string"},
        "state": {"type": "string"},
        "head": {"type": "string"},
    },
    "additionalProperties": True,
}
# The problems any operation may answer; a write adds 409, 415, 422.
READ = {
    "400": "Invalid input",
    "401": "Not authenticated",
    "403": "Forbidden",
    "404": "Not found",
    "429": "Too many requests",
}
WRITE = {**READ, "409": "Stale head", "415": "Unsupported media type", "422": "Refused"}


def add_problems(result, generator, request, public):
    components = result.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = PROBLEM
    ref = {"$ref": "#/components/schemas/Problem"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            codes = WRITE if method != "get" else READ
            responses = operation.setdefault("responses", {})
            for code, title in codes.items():
                content = {"application/problem+json": {"schema": ref}}
                responses.setdefault(code, {"description": title, "content": content})
    return result
