"""Django settings. Everything configurable is read from the environment in this one module.

With nothing set, Ephyra runs on its embedded default: SQLite and a filesystem broker, both
under ``./.ephyra`` (or ``EPHYRA_DATA_DIR``), so a laptop needs no server.
"""

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from ephyra.environment import (
    env_bool,
    env_broker,
    env_database,
    env_int,
    env_list,
    env_mapping,
    env_origins,
    env_path,
    env_proxy_ssl_header,
    env_secret,
    env_secret_key,
    env_str,
    filesystem_broker,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
DATA_DIR = env_path("EPHYRA_DATA_DIR", BASE_DIR / ".ephyra")
# The embedded default keeps everything here; creating it is what lets a fresh clone just run.
DATA_DIR.mkdir(parents=True, exist_ok=True)

# SECRET_KEY wins over SECRET_KEY_FILE; with neither, a key is made once in the data directory
# (mode 0600), so every command of a fresh clone runs. Several web hosts must share one key:
# production sets it.
SECRET_KEY = env_secret_key("SECRET_KEY", DATA_DIR / "secret_key")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

# HTTPS in production (docs/deploy.md). All off by default: `make run` serves plain HTTP on
# localhost, where a secure-only cookie would never come back.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# A load balancer or a container's health probe asks over plain HTTP, from inside.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Only behind a proxy that sets this header itself and drops a client's copy: otherwise a
# client could claim HTTPS.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
CSRF_TRUSTED_ORIGINS = env_origins("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "journal",
    "ledger",
    "quests",
    "intake",
    "landing",
    "work",
    "missions",
    "worker",
    "inbox",
    "demo",
    "ops",
    "api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS) without a web server in front, in production too.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "ephyra.urls"
LOGIN_URL = "inbox:login"
LOGIN_REDIRECT_URL = "inbox:inbox"
LOGOUT_REDIRECT_URL = "inbox:login"
WSGI_APPLICATION = "ephyra.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env_database("DATABASE_URL", DATA_DIR / "ephyra.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves the files where the finders find them (the apps' and static/), read once
# at start, so no collectstatic step is needed. STATIC_ROOT is where `collectstatic` copies
# them for a proxy or CDN that serves them instead; WhiteNoise serves it too, so it must exist.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)

# The audit chain's head is anchored in Git every so many entries (ledger/audit.py).
EPHYRA_AUDIT_ANCHOR_EVERY = env_int("EPHYRA_AUDIT_ANCHOR_EVERY", 100, minimum=1)

# Celery: the message is only a doorbell; the ledger and the journal hold the truth.
REDIS_URL = env_broker("REDIS_URL")
BROKER_DIR = DATA_DIR / "broker"
# Longer than the longest job, so Redis never hands a running job to a second worker.
EPHYRA_VISIBILITY_TIMEOUT = env_int("EPHYRA_VISIBILITY_TIMEOUT", 7200, minimum=60)
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {"visibility_timeout": EPHYRA_VISIBILITY_TIMEOUT}
else:
    # The host is meaningless to the folder queue, but kombu warns on every connection
    # without one ("No hostname was supplied").
    CELERY_BROKER_URL = "filesystem://localhost/"
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(BROKER_DIR)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "ephyra"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# The worker lease (ledger/lease.py) and the ledger's delivery limits (ledger/delivery.py).
EPHYRA_LEASE_MS = env_int("EPHYRA_LEASE_MS", 30_000, minimum=100)
EPHYRA_POLL_MS = env_int("EPHYRA_POLL_MS", 1_000, minimum=10)
# effect type -> dotted path of its adapter class, over ephyra/compose.py's built-in table.
EPHYRA_EFFECT_ADAPTERS = env_mapping("EPHYRA_EFFECT_ADAPTERS")
EPHYRA_MAX_DELIVERIES = env_int("EPHYRA_MAX_DELIVERIES", 5, minimum=1)
EPHYRA_RETRY_SECONDS = env_int("EPHYRA_RETRY_SECONDS", 10, minimum=0)
# Off only where no worker listens (the unit tests): workers also poll, so nothing is lost.
EPHYRA_DOORBELL = env_bool("EPHYRA_DOORBELL", True)
# The sandboxed runner (ephyra/runner/sandbox.py): the bubblewrap executable, and directories a
# sandboxed command may read besides the system's own (a toolchain outside /usr, say), each
# absolute; the data directory, /root and /home are never among them by default.
EPHYRA_BWRAP = env_str("EPHYRA_BWRAP", "bwrap")
EPHYRA_SANDBOX_PATHS = env_list("EPHYRA_SANDBOX_PATHS", [])
# Job threads per worker process for long effects (agent steps: a test suite, a bisect), so the
# loop keeps applying events and short effects meanwhile (worker/jobs.py).
EPHYRA_JOBS = env_int("EPHYRA_JOBS", 2, minimum=1)
# How long a person's action waits for the worker's answer before the page says "queued".
EPHYRA_ACTION_WAIT_MS = env_int("EPHYRA_ACTION_WAIT_MS", 3000, minimum=0)
# A git-credentials file ("https://user:token@host" lines) for pushing to workspaces' remotes
# (landing, rollback): read by git's credential-store for `get` only, never written. Unset,
# git's own credential helper (or SSH agent and keys) of the worker's user answers.
_credentials = env_str("EPHYRA_GIT_CREDENTIALS_FILE", "").strip()
EPHYRA_GIT_CREDENTIALS_FILE = Path(_credentials).expanduser().resolve() if _credentials else None
# Fault injection for the crash tests and `make soak` (worker/faults.py): "<seed>:<one-in-N>
# [:<point>,…]" makes a worker kill itself at named points of delivery. Empty in production.
EPHYRA_FAULTS = env_str("EPHYRA_FAULTS", "")

# Forge webhooks (intake/): the largest body taken; larger ones are refused with 413.
EPHYRA_WEBHOOK_MAX_BYTES = env_int("EPHYRA_WEBHOOK_MAX_BYTES", 1024 * 1024, minimum=1024)
EPHYRA_OTLP_MAX_BYTES = env_int("EPHYRA_OTLP_MAX_BYTES", 4 * 1024 * 1024, minimum=1024)
# A file given as a mission's evidence (missions/evidence.py): larger ones are refused.
EPHYRA_EVIDENCE_MAX_BYTES = env_int("EPHYRA_EVIDENCE_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
# OTLP throttling (intake/otlp/throttle.py): exports per ingest token per window, then 429 with
# Retry-After; 0 turns it off. 3000 a minute is 50 a second, for every exporter sharing a token.
EPHYRA_OTLP_RATE_LIMIT = env_int("EPHYRA_OTLP_RATE_LIMIT", 3000, minimum=0)
EPHYRA_OTLP_RATE_WINDOW = env_int("EPHYRA_OTLP_RATE_WINDOW", 60, minimum=1)
# The HTTP API (api/): requests per personal token per window, then 429 with Retry-After.
EPHYRA_API_RATE_LIMIT = env_int("EPHYRA_API_RATE_LIMIT", 600, minimum=1)
EPHYRA_API_RATE_WINDOW = env_int("EPHYRA_API_RATE_WINDOW", 60, minimum=1)
# The same per records (log records and spans) in the token's window: one export may hold
# thousands. 0 turns it off.
EPHYRA_OTLP_RECORD_LIMIT = env_int("EPHYRA_OTLP_RECORD_LIMIT", 100_000, minimum=0)
# A quest hears of its repeated signals in at most one signal_merged per this many seconds
# (intake/otlp/sightings.py); 0 gives each export its own.
EPHYRA_MERGE_WINDOW_SECONDS = env_int("EPHYRA_MERGE_WINDOW_SECONDS", 60, minimum=0)
# How long an export may wait for another one holding its locks (intake/locks.py: the same
# export being stored, or a new error's fingerprints being routed) before it is answered 503
# with Retry-After; 0 waits without limit. PostgreSQL only.
EPHYRA_OTLP_LOCK_WAIT_MS = env_int("EPHYRA_OTLP_LOCK_WAIT_MS", 10_000, minimum=0)
# Resource attributes that name the commit a service runs (docs/work.md, "Deployments"): the
# first signal of a commit, in an environment, counts as its deployment there.
EPHYRA_OTLP_VERSION_ATTRIBUTES = env_list(
    "EPHYRA_OTLP_VERSION_ATTRIBUTES", ["service.version", "vcs.ref.head.revision"]
)

# The cache holds the OTLP rate counters; they must be shared by every web process: Redis when
# there is one, else files under the data directory (one host, several processes).
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "ephyra",
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
            # Past this many files Django deletes a third of them at random, live counters
            # too; two files per token and window stay far below it.
            "OPTIONS": {"MAX_ENTRIES": 10_000},
        }
    }

# Prometheus metrics (ops/): with a token, /metrics answers only "Authorization: Bearer <token>";
# without one, only requests from the host itself (127.0.0.1, ::1). docs/observability.md.
EPHYRA_METRICS_TOKEN = env_secret("EPHYRA_METRICS_TOKEN") or ""

# "text" (the default) or "json": one JSON object per line, redacted (ephyra/jsonlog.py).
EPHYRA_LOG_FORMAT = env_str("EPHYRA_LOG_FORMAT", "text").strip().lower()
if EPHYRA_LOG_FORMAT not in {"text", "json"}:
    raise ImproperlyConfigured(
        f"EPHYRA_LOG_FORMAT must be text or json, not {EPHYRA_LOG_FORMAT!r}"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "ephyra.logformat.RedactingFormatter"},
        "json": {"()": "ephyra.logformat.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": EPHYRA_LOG_FORMAT},
    },
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        # Celery's "Task ... received" and "... succeeded" lines, one pair per message. Its only
        # messages are doorbells (the `ring` task) that carry no work; the worker logs what it
        # does itself. A task's failure is logged at ERROR and still shows.
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
    },
}

# The HTTP API (api/, docs/api.md): its views name their own authentication; every error is a
# problem (api/problems.py); the schema is drf-spectacular's, its pages served from our files.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.problems.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ephyra API",
    "DESCRIPTION": "Quests, the ledger, the audit trail, policies and missions over HTTP "
    "(docs/api.md). Every error is application/problem+json.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],  # the schema and its page need no credentials, and take none
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.add_problems",
    ],
}
