"""Settings for the console, read from environment variables (DOMAIN §4.4)."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from paperclip_console.env import envapiurl, envbool, envhosts, envint, envlist

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONSOLE_VAR_DIR", BASE_DIR / "var"))

DEBUG = envbool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is off")
    SECRET_KEY = "insecure-development-key-only-used-with-debug-on"

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required when DEBUG is off")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "csp",
    "template_partials",
    "django_q",
    "sandboxes",
]
# The harness (chaos wave, Daytona simulator, demo and benchmark fleets, their
# commands) is installed for development and by the test settings, never in
# production: DEBUG off is production (docs/architecture.md, the rooms).
if DEBUG:
    INSTALLED_APPS.append("devtools")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "sandboxes.middleware.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "paperclip_console.urls"
WSGI_APPLICATION = "paperclip_console.wsgi.application"
ASGI_APPLICATION = "paperclip_console.asgi.application"

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

# The embedded default is a SQLite file under var/; production and tests use
# PostgreSQL through DATABASE_URL.
_SQLITE_OPTIONS = {
    # WAL plus IMMEDIATE transactions keep the web server, the reconciler and
    # the q cluster from tripping over "database is locked".
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}
_default_db_url = f"sqlite:///{VAR_DIR / 'console.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", _default_db_url), conn_max_age=envint("CONN_MAX_AGE", 0)
    )
}
USING_SQLITE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
if USING_SQLITE:
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = dict(_SQLITE_OPTIONS)
    # django-q2's ORM broker polls constantly; on SQLite it gets its own file
    # so the queue never locks the console's tables (STYLE: django-q2 pitfalls).
    DATABASES["broker"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(DATABASES["default"]["NAME"]).with_name("broker.sqlite3")),
        "OPTIONS": dict(_SQLITE_OPTIONS),
    }
    DATABASE_ROUTERS = ["paperclip_console.routers.BrokerRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", VAR_DIR / "media"))
MEDIA_URL = "media/"
# Salvaged files are the console's only media, kept in the default storage:
# every writer and reader of salvaged bytes (the export, its verification, the
# attachments' FileField) uses this one selection. The embedded default is this
# machine's disk under MEDIA_ROOT; ATTACHMENTS_STORAGE=s3 keeps them in an
# S3-compatible bucket through django-storages, with its own setting names
# (README: object storage). Credentials come from the environment only: boto3
# reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an instance role) itself.
ATTACHMENTS_STORAGE = os.environ.get("ATTACHMENTS_STORAGE", "filesystem").strip().lower()
if ATTACHMENTS_STORAGE == "filesystem":
    _attachments: dict = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
elif ATTACHMENTS_STORAGE == "s3":
    AWS_STORAGE_BUCKET_NAME = os.environ.get("AWS_STORAGE_BUCKET_NAME", "").strip()
    if not AWS_STORAGE_BUCKET_NAME:
        raise ImproperlyConfigured(
            "AWS_STORAGE_BUCKET_NAME is required when ATTACHMENTS_STORAGE=s3"
        )
    AWS_S3_ENDPOINT_URL = os.environ.get("AWS_S3_ENDPOINT_URL", "").strip() or None
    AWS_S3_REGION_NAME = os.environ.get("AWS_S3_REGION_NAME", "").strip() or None
    AWS_S3_ADDRESSING_STYLE = os.environ.get("AWS_S3_ADDRESSING_STYLE", "").strip() or None
    AWS_LOCATION = os.environ.get("AWS_LOCATION", "").strip()
    _attachments = {"BACKEND": "sandboxes.object_storage.SalvageS3Storage"}
else:
    raise ImproperlyConfigured(
        f"ATTACHMENTS_STORAGE must be filesystem or s3, got {ATTACHMENTS_STORAGE!r}"
    )
STORAGES = {
    "default": _attachments,
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# The proxies whose X-Forwarded-For the console believes (the login limiter
# counts per client address). The same variable gunicorn reads
# (deploy/gunicorn.conf.py): comma-separated addresses or networks, "*" for any.
FORWARDED_ALLOW_IPS = envlist("FORWARDED_ALLOW_IPS", ["127.0.0.1", "::1"])
# Login limiter: free password checks per account (and per client address)
# before each further check waits a delay that doubles, up to the maximum.
LOGIN_FREE_ATTEMPTS = envint("LOGIN_FREE_ATTEMPTS", 5)
LOGIN_FREE_ATTEMPTS_PER_ADDRESS = envint("LOGIN_FREE_ATTEMPTS_PER_ADDRESS", 20)
LOGIN_BASE_DELAY_SECONDS = envint("LOGIN_BASE_DELAY_SECONDS", 5)
LOGIN_MAX_DELAY_SECONDS = envint("LOGIN_MAX_DELAY_SECONDS", 900)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# Secure defaults outside development (manage.py check --deploy).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Content-Security-Policy (django-csp): scripts and styles only from our own
# static files — no inline code, no eval (htmx is configured with allowEval
# false in base.html), nothing framed, forms only to ourselves.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
if not DEBUG:
    SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Ingest limits (DOMAIN §4.1).
INGEST_MAX_EVENTS = 1000
INGEST_MAX_BYTES = 5 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = INGEST_MAX_BYTES + 1024

# Providers (DOMAIN §3). Tokens only ever come from the environment.
DAYTONA_API_URL = os.environ.get("DAYTONA_API_URL", "")
DAYTONA_API_KEY = os.environ.get("DAYTONA_API_KEY", "")
# The variables an environment's api_key_env may name (never the console's own
# secrets: SECRET_KEY, database or Redis credentials are refused regardless).
PROVIDER_API_KEY_VARIABLES = envlist("PROVIDER_API_KEY_VARIABLES", ["DAYTONA_API_KEY"])
# Hosts besides the API's own that may receive DAYTONA_API_KEY as the toolbox
# proxy (Daytona's cloud: proxy.app.daytona.io); a toolboxProxyUrl naming any
# other host is refused.
DAYTONA_TOOLBOX_HOSTS = envlist("DAYTONA_TOOLBOX_HOSTS", [])
LOCAL_SANDBOX_ROOT = Path(os.environ.get("LOCAL_SANDBOX_ROOT", VAR_DIR / "sandboxes"))
PROVIDER_STEP_BUDGET_SECONDS = envint("PROVIDER_STEP_BUDGET_SECONDS", 90)
PROVIDER_MAX_CONCURRENCY = envint("PROVIDER_MAX_CONCURRENCY", 8)

# Paperclip's own API (README: Attaching salvage to the Paperclip task): a
# verified export is also attached to the task as zip parts. The key is read from
# PAPERCLIP_API_KEY in the environment when it is sent, and only to this URL's
# host. Unset: nothing is attached. The part ceiling stays under Paperclip's
# PAPERCLIP_ATTACHMENT_MAX_BYTES (10 MiB by default, server/src/attachment-types.ts).
PAPERCLIP_API_URL = envapiurl("PAPERCLIP_API_URL")
PAPERCLIP_ATTACHMENT_MAX_BYTES = envint("PAPERCLIP_ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024 - 65536)
if PAPERCLIP_ATTACHMENT_MAX_BYTES < 16 * 1024:
    raise ImproperlyConfigured(
        "PAPERCLIP_ATTACHMENT_MAX_BYTES must be at least 16384 (a part holds its "
        f"MANIFEST.json), got {PAPERCLIP_ATTACHMENT_MAX_BYTES}"
    )
PAPERCLIP_UPLOADS_PER_PASS = envint("PAPERCLIP_UPLOADS_PER_PASS", 20)
PAPERCLIP_TIMEOUT_SECONDS = envint("PAPERCLIP_TIMEOUT_SECONDS", 60)

# Metrics (/metrics): an operator-scope API token, or this shared secret for a
# Prometheus scraper (`Authorization: Bearer <METRICS_TOKEN>`). Empty: tokens only.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")

# Notifications: links in messages point at CONSOLE_BASE_URL; a reconciler with
# no finished pass for RECONCILER_OVERDUE_MINUTES is announced as overdue.
CONSOLE_BASE_URL = os.environ.get("CONSOLE_BASE_URL", "http://localhost:8000").strip()
RECONCILER_OVERDUE_MINUTES = envint("RECONCILER_OVERDUE_MINUTES", 10)
# Mail, for the set-password links admins send from the Users page. With no
# EMAIL_HOST (and the SMTP backend) nothing is mailed: the admin is shown the
# link to hand on (sandboxes/people.py:mail_configured).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_PORT = envint("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "paperclip-console@localhost")
PASSWORD_RESET_TIMEOUT = envint("PASSWORD_RESET_TIMEOUT_DAYS", 3) * 86400
# Channels may not reach loopback, link-local, private or metadata addresses
# (README: Notifications) unless their host, or host:port, is listed here.
NOTIFY_ALLOWED_HOSTS = envhosts("NOTIFY_ALLOWED_HOSTS", [])

# Mirror of a Paperclip database (manage.py mirror_paperclip). Cursors are kept
# in a JSON file; losing it only means the next run re-reads everything.
MIRROR_CURSOR_FILE = Path(os.environ.get("MIRROR_CURSOR_FILE", VAR_DIR / "mirror-cursors.json"))
MIRROR_INTERVAL_SECONDS = envint("MIRROR_INTERVAL_SECONDS", 10)
# Rows are re-read this far behind the cursor, so a source transaction that
# committed late (its updated_at is its start time) is still picked up.
MIRROR_OVERLAP_SECONDS = envint("MIRROR_OVERLAP_SECONDS", 30)
MIRROR_BATCH_SIZE = envint("MIRROR_BATCH_SIZE", 5000)
# N > 1: issues, workspaces, runs and leases are shared among N processes (N-1
# forked), each mirroring its share of every one of those tables, all reading
# one snapshot (sandboxes/mirror/tables.py STEPS); 1: every table in turn, in
# this process.
MIRROR_PROCESSES = envint("MIRROR_PROCESSES", 2)

# django-q2: Redis when REDIS_URL is set, the ORM broker otherwise.
REDIS_URL = os.environ.get("REDIS_URL", "")
Q_CLUSTER = {
    "name": "paperclip-console",
    "workers": envint("Q_WORKERS", 2),
    "timeout": envint("Q_TIMEOUT", 600),
    "retry": envint("Q_RETRY", 900),
    "max_attempts": 1,
    "catch_up": False,
    "save_limit": 500,
    "poll": 1,
    "label": "Task queue",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
    # One cache shared by every web worker, so the login limit counts across them.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "paperclip-console",
        }
    }
else:
    Q_CLUSTER["orm"] = "broker" if USING_SQLITE else "default"

# Logs: one JSON object per line (LOG_FORMAT=json, the default when DEBUG is
# off) or plain text (the default with DEBUG on). Both carry pass_id, lease_id
# and attempt_id when code sets them with sandboxes.logging.log_context().
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text" if DEBUG else "json").strip().lower()
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "sandboxes.logging.ContextFilter"}},
    "formatters": {
        "json": {"()": "sandboxes.logging.JsonFormatter"},
        "text": {"()": "sandboxes.logging.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # httpx logs every request at INFO; provider calls are counted elsewhere.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
