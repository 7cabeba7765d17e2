"""Django settings for the Kalena console, selected by environment (twelve-factor).

Embedded default (nothing set): SQLite at ``<project>/var/kalena.sqlite3`` in WAL mode, static
files collected to ``<project>/var/static`` and served by WhiteNoise, a secret key generated once
into ``<project>/var/secret_key``. Production: set ``DATABASE_URL`` (PostgreSQL, e.g.
``postgres://kalena@db:5432/kalena``), ``KALENA_SECRET_KEY`` and ``KALENA_ALLOWED_HOSTS``.

Environment:
    DATABASE_URL: database URL (dj-database-url); unset = embedded SQLite.
    KALENA_DB_PATH: SQLite file when DATABASE_URL is unset.
    KALENA_SECRET_KEY: secret key; unset = read or create ``var/secret_key``.
    KALENA_DEBUG: ``1`` for Django's debug mode (never in production); default off.
    KALENA_ALLOWED_HOSTS: comma-separated host names (default ``127.0.0.1,localhost``).
    KALENA_CSRF_TRUSTED_ORIGINS: comma-separated origins behind a TLS proxy (``https://kalena.example``).
    KALENA_SECURE_COOKIES: ``1`` when served over HTTPS (secure session and CSRF cookies).
    KALENA_STATIC_ROOT: where ``collectstatic`` writes (default ``var/static``).
    KALENA_VAR_DIR: the project-local state folder (default ``<project>/var``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KALENA_VAR_DIR") or BASE_DIR / "var")


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    """``KALENA_SECRET_KEY``, or a key generated once into ``var/secret_key`` (mode 0600)."""
    key = os.environ.get("KALENA_SECRET_KEY")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    if path.exists():
        return path.read_text().strip()
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


DEBUG = _flag("KALENA_DEBUG")
SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("KALENA_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "kalena_web.inventory",
    "kalena_web.archive",
    "kalena_web.ledger",
    "kalena_web.console",
    "kalena_web.control",
    "kalena_web.scheduling",
    "kalena_web.replan",
    "kalena_web.api",
    "kalena_web.telemetry",
    "kalena_web.kubehooks",
]

MIDDLEWARE = [
    "kalena_web.console.middleware.HealthProbeMiddleware",
    "kalena_web.console.middleware.NulRefusedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "kalena_web.console.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "kalena_web.console.middleware.ConsoleLoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kalena_web.urls"
ASGI_APPLICATION = "kalena_web.asgi.application"
WSGI_APPLICATION = "kalena_web.wsgi.application"

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

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60, conn_health_checks=True)}
else:
    _sqlite = Path(os.environ.get("KALENA_DB_PATH") or VAR_DIR / "kalena.sqlite3")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _sqlite,
            "OPTIONS": {
                # WAL: the console keeps reading while a replay is being persisted.
                # A 64 MiB page cache keeps a day's bulk inserts off the disk.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:runs"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("KALENA_STATIC_ROOT") or VAR_DIR / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "kalena_web.staticfinders.PlotlyJsFinder",  # plotly.min.js from the plotly package, never a CDN
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the finders too, so a console started without ``collectstatic`` still works.
WHITENOISE_USE_FINDERS = True

CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("KALENA_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _flag("KALENA_SECURE_COOKIES")
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("KALENA_LOG_LEVEL", "WARNING")},
}

# --- Control plane (DESIGN §1, §8): Celery loops, Channels, locks -------------------------------
# Embedded default (REDIS_URL unset): in-memory channel layer, Celery tasks run eagerly in the
# calling process and the periodic loops run on a thread of the serving process
# (kalena_web.control.embedded); locks live in the process-local cache. Production (REDIS_URL
# set, e.g. redis://redis:6379/0): Redis is the Celery broker, the channel layer and the lock
# store; loops run on Celery workers, scheduled by Celery beat.
#   REDIS_URL: Redis URL; unset = embedded.
#   KALENA_ESTIMATION_SHARDS: node shards for the estimation loop (default 16).
#   KALENA_ORCHESTRATOR: fake | kubernetes | docker | swarm (default fake).
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

if EMBEDDED:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "kalena"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_TASK_EAGER_PROPAGATES = True
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [REDIS_URL], "capacity": 5000, "expiry": 30}}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False

CELERY_TASK_ACKS_LATE = True               # a task is acknowledged only after it ran
CELERY_TASK_REJECT_ON_WORKER_LOST = True   # … and redelivered if its worker died mid-task
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"

KALENA_ESTIMATION_SHARDS = int(os.environ.get("KALENA_ESTIMATION_SHARDS", "16"))
KALENA_ORCHESTRATOR = os.environ.get("KALENA_ORCHESTRATOR", "fake")
KALENA_METRICS_TOKEN = os.environ.get("KALENA_METRICS_TOKEN", "")  # set: /metrics needs this bearer token
# Drift (DESIGN §10): window of the steady-state reservation and the recommendation threshold.
KALENA_DRIFT_WINDOW_S = float(os.environ.get("KALENA_DRIFT_WINDOW_S", "86400"))
KALENA_DRIFT_THRESHOLD = float(os.environ.get("KALENA_DRIFT_THRESHOLD", "0.25"))
# Usage archive retention (seconds): raw samples, 1-minute and 1-hour rollups, loop runs.
KALENA_RETENTION_RAW_S = float(os.environ.get("KALENA_RETENTION_RAW_S", "86400"))
KALENA_RETENTION_MINUTE_S = float(os.environ.get("KALENA_RETENTION_MINUTE_S", str(7 * 86400)))
KALENA_RETENTION_HOUR_S = float(os.environ.get("KALENA_RETENTION_HOUR_S", str(90 * 86400)))
KALENA_RETENTION_LOOPS_S = float(os.environ.get("KALENA_RETENTION_LOOPS_S", "86400"))

# --- Telemetry ingest and estimation (kalena_web.telemetry, kalena_web.ledger.estimation) -------
# Every limit below is a setting so an operator can see and change it; docs/control-plane-ingest.md.
#   KALENA_INGEST_MAX_BATCH_SAMPLES: samples kept from one `samples` message; the rest are
#       rejected as `oversize_batch` (default 2000).
#   KALENA_INGEST_MAX_FRAME_BYTES: a frame larger than this is refused unread (default 8 MiB).
#   KALENA_INGEST_MAX_FUTURE_S: a sample stamped further ahead of the server clock is `future` (120).
#   KALENA_INGEST_MAX_AGE_S: a sample older than this is `too_old` (default 7 days).
#   KALENA_INGEST_MAX_USAGE_RATIO: usage above this × the node's allocatable is `out_of_range` (4).
#   KALENA_INGEST_FLUSH_S: group-commit window of the ingest writer (default 0.05 s).
#   KALENA_INGEST_FLUSH_MAX_SAMPLES: a group commit holds at most this many samples (20000).
#   KALENA_ESTIMATION_LOCK_TTL_S: TTL of a shard's estimation lock (default 60 s).
#   KALENA_ESTIMATION_MAX_BATCHES: batches one estimation transaction takes (default 2000).
#   KALENA_ESTIMATION_BUDGET_S: a task re-queues itself after this long with work left (5 s).
KALENA_INGEST_MAX_BATCH_SAMPLES = int(os.environ.get("KALENA_INGEST_MAX_BATCH_SAMPLES", "2000"))
KALENA_INGEST_MAX_FRAME_BYTES = int(os.environ.get("KALENA_INGEST_MAX_FRAME_BYTES", str(8 * 1024 * 1024)))
KALENA_INGEST_MAX_FUTURE_S = float(os.environ.get("KALENA_INGEST_MAX_FUTURE_S", "120"))
KALENA_INGEST_MAX_AGE_S = float(os.environ.get("KALENA_INGEST_MAX_AGE_S", str(7 * 86400)))
KALENA_INGEST_MAX_USAGE_RATIO = float(os.environ.get("KALENA_INGEST_MAX_USAGE_RATIO", "4"))
KALENA_INGEST_FLUSH_S = float(os.environ.get("KALENA_INGEST_FLUSH_S", "0.05"))
KALENA_INGEST_FLUSH_MAX_SAMPLES = int(os.environ.get("KALENA_INGEST_FLUSH_MAX_SAMPLES", "20000"))
KALENA_ESTIMATION_LOCK_TTL_S = float(os.environ.get("KALENA_ESTIMATION_LOCK_TTL_S", "60"))
KALENA_ESTIMATION_MAX_BATCHES = int(os.environ.get("KALENA_ESTIMATION_MAX_BATCHES", "2000"))
KALENA_ESTIMATION_BUDGET_S = float(os.environ.get("KALENA_ESTIMATION_BUDGET_S", "5"))

# Kubernetes admission webhook (docs/kubernetes-admission.md):
#   KALENA_ADMISSION_INFER_JOBS=1: Job/CronJob pods without a tier label are batch (DESIGN §4).
#   KALENA_ADMISSION_EXTENDER_MODE=1: kube-scheduler keeps batch; schedulerName is left alone.
KALENA_ADMISSION_INFER_JOBS = _flag("KALENA_ADMISSION_INFER_JOBS")
KALENA_ADMISSION_EXTENDER_MODE = _flag("KALENA_ADMISSION_EXTENDER_MODE")
# Agents on Kubernetes authenticated by TokenReview (kalena_web/kubehooks/agent_auth.py):
KALENA_AGENT_TOKENREVIEW_CLUSTER = os.environ.get("KALENA_AGENT_TOKENREVIEW_CLUSTER", "")
KALENA_AGENT_SERVICE_ACCOUNT = os.environ.get("KALENA_AGENT_SERVICE_ACCOUNT",
                                              "system:serviceaccount:kalena-system:kalena-agent")
KALENA_AGENT_TOKEN_AUDIENCE = os.environ.get("KALENA_AGENT_TOKEN_AUDIENCE", "kalena")
