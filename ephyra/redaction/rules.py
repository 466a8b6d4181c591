"""The redaction rules, as data: name, pattern, placeholder, and examples that must hold.

Each rule replaces what it finds with ``[redacted:<name>]``. ``positives`` are pairs of (text,
what that rule alone turns it into); ``negatives`` are texts the *whole* redaction must leave
exactly as they are. ``tests/telemetry/test_redaction.py`` iterates this table, and
``docs/telemetry.md`` lists every rule by name (a test checks the two agree).

Order matters: specific token formats first (so a GitHub token is called a GitHub token, not
"high entropy"), URL credentials before e-mail addresses (``user:pass@host.com`` is not an
address), and the generic detectors last.

A pattern either replaces its whole match or, when it has groups named ``secret...``, only those
groups (so ``password=hunter2`` keeps its key and ``"token": "x"`` keeps its quotes). A
``lower`` rule's pattern runs on the lowercased text (one case for the regular expression engine
is several times faster than ``(?i)``) and its spans are replaced in the original. ``check``
names a validator (in ``redact.py``) applied to the secret text; the match is left alone when it
fails (a Luhn checksum, an address that does not parse).

``redact._can_change`` holds, for each rule, something every match of its pattern holds (a
substring, a long run, enough digits): a new rule needs a line there too, and a test fails until
its examples wake it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    description: str
    pattern: str
    positives: tuple[tuple[str, str], ...]
    negatives: tuple[str, ...]
    check: str = ""
    lower: bool = False

    @property
    def placeholder(self) -> str:
        return f"[redacted:{self.name}]"


# Key names whose values are secrets: the key must *end* with one of these (case-insensitive), at
# a word boundary, so ``db_password``, ``csrftoken`` and ``X-Api-Key`` match but
# ``password_reset``, ``max_tokens``, ``monkey`` and ``author`` do not.
SECRET_KEY_WORDS = (
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "access_key",
    "access-key",
    "accesskey",
    "private_key",
    "private-key",
    "privatekey",
    "secret_key",
    "client_secret",
    "authorization",
    "cookie",
    "session",
    "session_id",
    "sessionid",
    "session-id",
    "credentials",
    "credential",
)
# The pattern finds the last word of a key; the check reads the whole key back from the text.
# Written as a trie (each alternative tried in the same order as the plain list "password|passwd|
# passphrase|pwd|secret|token|key|authorization|cookie|session_id|session-id|sessionid|session|
# credentials|credential", so the same stem matches): the engine tries fewer branches per
# position.
_KEY_STEMS = (
    "pass(?:word|wd|phrase)|pwd|secret|token|key|authorization|cookie"
    "|session(?:_id|-id|id)?|credentials?"
)
# Values: a quoted string (JSON, Python repr, or JSON escaped inside other strings, once or
# more), an auth scheme and its token, a placeholder left by an earlier pass, or a bare run up to
# a separator.
_VALUE = (
    r"(?:" + r'\\+"(?P<secret_eq>(?:[^"\\\n]|\\[^"\n])*?)\\+"'
    r"""|"(?P<secret_dq>(?:[^"\\\n]|\\.)*)"|'(?P<secret_sq>(?:[^'\\\n]|\\.)*)'"""
    r"|(?:(?:bearer|basic|token|digest)[ \t]+)?(?P<secret>\[redacted:[a-z0-9-]+\]"
    r"""|[^\s,;&'"<>(){}\[\]]+))"""
)
_SEPARATOR = r"""\\*["']?[ \t]*[:=][ \t]*"""

_B64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="  # "Aladdin:open sesame", RFC 7617's example
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFsaWNlIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
_PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
    "-----END RSA PRIVATE KEY-----"
)
_PGP = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXr1x0BCADQm4K7Z2J0c9wVt1kq8oXh\n=Zx8Q\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
_GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

RULES: tuple[Rule, ...] = (
    Rule(
        name="private-key",
        description=(
            "PEM private keys (RSA, EC, OpenSSH, PKCS#8) and OpenPGP private key blocks, to the "
            "END line or the end"
        ),
        pattern=(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        positives=(
            (f"key: {_PEM} loaded", "key: [redacted:private-key] loaded"),
            ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN (cut)", "[redacted:private-key]"),
            (f"gpg: {_PGP} imported", "gpg: [redacted:private-key] imported"),
        ),
        negatives=(
            "-----BEGIN CERTIFICATE-----",
            "private key file not found",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
        ),
    ),
    Rule(
        name="jwt",
        description="JSON Web Tokens: three base64url parts, the first two JSON objects",
        pattern=r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        positives=((f"jwt={_JWT}", "jwt=[redacted:jwt]"),),
        negatives=("eyJ alone", "header.payload.signature"),
    ),
    Rule(
        name="aws-access-key-id",
        description="AWS access key ids (AKIA…, ASIA… and the other documented prefixes)",
        pattern=r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b",
        positives=(("key AKIAIOSFODNN7EXAMPLE used", "key [redacted:aws-access-key-id] used"),),
        negatives=("AKIA", "ASIAN markets", "AKIAIOSFODNN7"),
    ),
    Rule(
        name="github-token",
        description="GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ and fine-grained github_pat_",
        pattern=r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        positives=(
            (f"git push with {_GHP}", "git push with [redacted:github-token]"),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQ",
                "[redacted:github-token]",
            ),
        ),
        negatives=("ghp_short", "the ghs_ prefix"),
    ),
    Rule(
        name="gitlab-token",
        description="GitLab personal, deploy and runner tokens (glpat-, gldt-, glrt-)",
        pattern=r"\b(?:glpat|gldt|glrt)-[A-Za-z0-9_-]{20,}",
        positives=(
            ("PRIVATE-TOKEN glpat-xxxxxxxxxxxxxxxxxxxx1", "PRIVATE-TOKEN [redacted:gitlab-token]"),
        ),
        negatives=("glpat-short", "glpat prefix"),
    ),
    Rule(
        name="slack-token",
        description="Slack bot, user, app and refresh tokens (xoxb-, xoxp-, xoxa-, xoxr-, xapp-)",
        pattern=r"\b(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,})",
        positives=(
            ("xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp", "[redacted:slack-token]"),
            ("app token xapp-1-A0123456789-1234567890-abcdef", "app token [redacted:slack-token]"),
        ),
        negatives=("xoxb-", "xox marks the spot"),
    ),
    Rule(
        name="slack-webhook",
        description="Slack incoming-webhook URLs (the host stays, the secret path goes)",
        pattern=r"hooks\.slack\.com/(?P<secret>(?:services|workflows|triggers)/[A-Za-z0-9/_-]+)",
        positives=(
            (
                "post https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
                "post https://hooks.slack.com/[redacted:slack-webhook]",
            ),
        ),
        negatives=("https://hooks.slack.com/", "see api.slack.com/messaging/webhooks"),
    ),
    Rule(
        name="anthropic-key",
        description="Anthropic API keys (sk-ant-…)",
        pattern=r"\bsk-ant-[A-Za-z0-9_-]{20,}",
        positives=(("sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345", "[redacted:anthropic-key]"),),
        negatives=("sk-ant-short",),
    ),
    Rule(
        name="openai-key",
        description="OpenAI-style API keys (sk-…, sk-proj-…)",
        pattern=r"\bsk-(?!ant-)[A-Za-z0-9_-]{20,}",
        positives=(
            (
                "Incorrect API key provided: sk-proj-abcdEFGH1234ijklMNOP5678",
                "Incorrect API key provided: [redacted:openai-key]",
            ),
        ),
        negatives=("task-runner-process-manager", "sk-learn", "desk-lamp"),
    ),
    Rule(
        name="stripe-key",
        description="Stripe secret and restricted keys, live and test (sk_live_, rk_live_…)",
        pattern=r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        positives=(("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe [redacted:stripe-key]"),),
        negatives=("sk_live_", "publishable pk_live_ keys are public"),
    ),
    Rule(
        name="google-api-key",
        description="Google API keys (AIza followed by 35 characters)",
        pattern=r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        positives=(
            ("key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "key=[redacted:google-api-key]"),
        ),
        negatives=("AIza", "AIzaTooShort"),
    ),
    Rule(
        name="url-credentials",
        description=(
            "the user:password@ or token@ of a URL, all of it up to the last @ of the address "
            "(a password may hold an unencoded /, ?, # or @); the scheme and host stay"
        ),
        # With a colon, the password runs to the last @ before the host (it may hold / ? # @,
        # unencoded: a URL that does not parse keeps its secret otherwise); without one, a
        # token or user name runs to the last @ before the path.
        pattern=(
            r"""://(?P<secret>[^\s/?#"'<>]*:[^\s"'<>]*|[^\s/?#"'<>]+)"""
            r"""@(?=[^\s/?#@"'<>])"""
        ),
        positives=(
            (
                "postgres://app:s3cr3t@db.internal:5432/shop",
                "postgres://[redacted:url-credentials]@db.internal:5432/shop",
            ),
            ("redis://:hunter2@cache:6379/0", "redis://[redacted:url-credentials]@cache:6379/0"),
            (
                "https://deploy:pa/ss#w?rd@git.example.com/shop.git",
                "https://[redacted:url-credentials]@git.example.com/shop.git",
            ),
            ("amqp://app:p@ss@mq:5672", "amqp://[redacted:url-credentials]@mq:5672"),
        ),
        negatives=(
            "https://example.com/@alice",
            "https://github.com/acme/shop.git",
            "https://example.com/a?b=c",
        ),
    ),
    Rule(
        name="bearer-token",
        description="Bearer tokens (RFC 6750 token68) of at least 8 characters with a digit, or 20",
        pattern=r"\bbearer[ \t]+(?P<secret>[a-z0-9\-._~+/]+=*)",
        lower=True,
        check="tokenish",
        positives=(
            (
                "Authorization: Bearer abc123def456ghi789",
                "Authorization: Bearer [redacted:bearer-token]",
            ),
        ),
        negatives=("bearer token missing", "Bearer authentication failed", "the bearer"),
    ),
    Rule(
        name="basic-auth",
        description="HTTP Basic credentials: base64 that decodes to user:password",
        pattern=r"\bbasic[ \t]+(?P<secret>[a-z0-9+/]{8,}={0,2})(?![a-z0-9+/=])",
        lower=True,
        check="basic",
        positives=((f"Authorization: Basic {_B64}", "Authorization: Basic [redacted:basic-auth]"),),
        negatives=("Basic authentication failed", "basic usage", "BASIC programming"),
    ),
    Rule(
        name="secret",
        description=(
            "values of secret-named keys (password, token, api_key, secret, cookie, session, …) in "
            'key=value, key: value and JSON/Python-dict "key": "value" forms'
        ),
        pattern=r"(?P<stem>" + _KEY_STEMS + r")\b" + _SEPARATOR + _VALUE,
        lower=True,
        check="secret-key",
        positives=(
            (
                "login failed password=hunter2 user=bob",
                "login failed password=[redacted:secret] user=bob",
            ),
            ('{"api_key": "abc def", "n": 1}', '{"api_key": "[redacted:secret]", "n": 1}'),
            ("{'db_password': 'x y z'}", "{'db_password': '[redacted:secret]'}"),
            ('{\\"password\\": \\"hunter2\\"}', '{\\"password\\": \\"[redacted:secret]\\"}'),
            (
                '{\\\\\\"password\\\\\\": \\\\\\"hunter2\\\\\\"}',
                '{\\\\\\"password\\\\\\": \\\\\\"[redacted:secret]\\\\\\"}',
            ),
            ("X-Api-Key: 1234abcd", "X-Api-Key: [redacted:secret]"),
            (
                "cookie: sessionid=abc; csrftoken=def",
                "cookie: [redacted:secret]; csrftoken=[redacted:secret]",
            ),
            (
                "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bb",
                "Authorization: Token [redacted:secret]",
            ),
            ("accessToken=eyJhbGc", "accessToken=[redacted:secret]"),
        ),
        negatives=(
            "password",
            "password reset failed",
            "token expired for user 42",
            "max_tokens=512",
            "password_reset_count=3",
            "author=Bob",
            "the session ended",
            'File "/app/shop/tokens.py", line 42, in refresh',
        ),
    ),
    Rule(
        name="aws-secret-key",
        description="AWS secret access keys: 40 base64 characters, mixed case, digits, entropy",
        pattern=r"(?<![A-Za-z0-9/+=])(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        check="aws-secret",
        positives=((f"aws {_AWS_SECRET} end", "aws [redacted:aws-secret-key] end"),),
        negatives=(
            "0123456789012345678901234567890123456789",
            "src/main/java/com/example/shop/Checkout",
            "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        ),
    ),
    Rule(
        name="email",
        description="e-mail addresses",
        # Not begun inside a word; may begin right after a glue character (".", "-", "+", "%"):
        # in "a@b.co-x@y.com" the second address is found in the same pass as the first.
        pattern=r"(?<!\w)[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b",
        positives=(
            ("user alice.smith+shop@example.co.uk not found", "user [redacted:email] not found"),
        ),
        negatives=(
            "@app.route('/checkout')",
            "java.lang.Object@1b6d3586",
            "/go/pkg/mod/github.com/lib/pq@v1.10.9/conn.go:42",
            "node_modules/@babel/core/lib/index.js",
        ),
    ),
    Rule(
        name="credit-card",
        description="payment card numbers: 13-19 digits, a card prefix, a valid Luhn checksum",
        pattern=r"(?<![0-9.-])(?P<secret>[2-6][0-9]{3}(?:[ -]?[0-9]){9,15})(?![0-9-])",
        check="luhn",
        positives=(
            ("card 4111 1111 1111 1111 declined", "card [redacted:credit-card] declined"),
            ("pan=5500-0000-0000-0004", "pan=[redacted:credit-card]"),
        ),
        negatives=(
            "order 4111111111111112 failed",
            "line 1234567890123",
            "at 1544712660300000000",
            "2024-01-15 10:30:00",
        ),
    ),
    Rule(
        name="ipv6",
        description="IPv6 addresses (validated by the standard library; at least one digit)",
        pattern=(
            r"(?<![\w:.])(?P<secret>(?:[0-9A-Fa-f]{0,4}:){2,7}"
            r"(?:[0-9A-Fa-f]{1,4}|[0-9]{1,3}(?:\.[0-9]{1,3}){3})?)(?![\w:])"
        ),
        check="ipv6",
        positives=(
            ("from 2001:db8::8a2e:370:7334 refused", "from [redacted:ipv6] refused"),
            ("peer fe80:0:0:0:0:0:0:1 down", "peer [redacted:ipv6] down"),
            ("bind ::1 failed", "bind [redacted:ipv6] failed"),
        ),
        negatives=(
            "at 10:30:45",
            "std::vector",
            "app.js:10:5",
            "mac 00:1a:2b:3c:4d:5e",
            "Abc::Def",
        ),
    ),
    Rule(
        name="ipv4",
        description="IPv4 addresses (each octet 0-255; not part of a longer dotted number)",
        pattern=(
            r"(?<![\w.])(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
            r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?![\w]|\.[0-9])"
        ),
        positives=(
            ("connect to 10.0.0.12:5432 timed out.", "connect to [redacted:ipv4]:5432 timed out."),
            ("client 203.0.113.7", "client [redacted:ipv4]"),
        ),
        negatives=("version 1.2.3", "v1.2.3.4", "python3.11.4", "1.2.3.4.5", "999.1.1.1"),
    ),
    Rule(
        name="high-entropy",
        description=(
            "long random-looking tokens: 24+ characters of base64/base62 with upper and lower case "
            "and a digit, Shannon entropy >= 3.5 bits per character, not made of words. Pure hex "
            "(commit SHAs, digests, trace ids) and UUIDs are kept: they identify, they do not grant"
        ),
        pattern=r"(?<![A-Za-z0-9+/=_-])(?P<secret>[A-Za-z0-9+/_=-]{24,})(?![A-Za-z0-9+/=_-])",
        check="entropy",
        positives=(
            ("X-Upload-Id: Zk8qR2vLw9XbT4mN7pQs1YcH", "X-Upload-Id: [redacted:high-entropy]"),
            ("nonce 3fJq9ZL0pWm2XvR8tKc5Ny7B hmm", "nonce [redacted:high-entropy] hmm"),
        ),
        negatives=(
            "commit da39a3ee5e6b4b0d3255bfef95601890afd80709",
            "request 6f1c1f4e-8b8a-4b0e-9a52-0c6d7e2f6a11",
            "trace 5b8efff798038103d269b633813fc60c",
            "at AbstractAutowireCapableBeanFactory.createBean",
            "TestUserAccountServiceV2Impl1",
            "pod checkout-7d9f8b6c4d-x2x9k",
            "processPaymentRequestV2Async",
        ),
    ),
)
