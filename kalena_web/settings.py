"""Django settings for the Kalena console, selected by environment (twelve-factor).

Embedded default (nothing set): SQLite at ``<project>/var/kalena.sqlite3`` in WAL mode, static
files collected to ``<project>/var/static`` and served by WhiteNoise, a secret key generated once
into ``<project>/var/secret_key``. Production: set ``DATABASE_URL`` (PostgreSQL, e.g.
``postgres://kalena@db:5432/kalena``), ``KALENA_SECRET_KEY`` and ``KALENA_ALLOWED_HOSTS``.

Environment:
    DATABASE_URL: database URL (dj-database-url); unset = embedded SQLite.
    KALENA_DB_PATH: SQLite file when DATABASE_URL is unset.
    KALENA_SECRET_KEY: secret key; unset = read or create ``var/secret_key``; set, it must be
        strong (50+ random characters; empty or example values such as ``change-me`` are refused).
    <NAME>_FILE: read KALENA_SECRET_KEY, DATABASE_URL, REDIS_URL or KALENA_METRICS_TOKEN from a
        file (Docker secrets: ``/run/secrets/...``).
    KALENA_DEBUG: ``1`` for Django's debug mode (never in production); default off.
    KALENA_ALLOWED_HOSTS: comma-separated host names (default ``127.0.0.1,localhost``).
    KALENA_CSRF_TRUSTED_ORIGINS: comma-separated origins behind a TLS proxy (``https://kalena.example``).
    KALENA_TRUSTED_PROXY_HEADER: the header a reverse proxy puts the client's address in
        (``X-Forwarded-For``, or ``X-Real-IP``); unset = none is read. Login throttling
        (kalena_web.console.login) and the audit log take the client's address from it, but only
        on requests whose peer is in KALENA_TRUSTED_PROXIES; from any other peer the header is
        ignored and the peer's own address counts.
    KALENA_TRUSTED_PROXIES: comma-separated addresses or networks of those proxies
        (``10.0.0.0/8,127.0.0.1``); required with KALENA_TRUSTED_PROXY_HEADER, and a malformed
        entry is refused at start, naming it.
    KALENA_HTTPS: ``1`` when served over HTTPS behind a TLS-terminating proxy: SSL redirect (the
        proxy's ``X-Forwarded-Proto`` trusted), HSTS, secure session and CSRF cookies. Probes
        (``/livez``, ``/readyz``, ``/healthz``, ``/metrics``) are exempt from the redirect and the
        host check, so an orchestrator can probe a pod by its IP over plain HTTP.
    KALENA_SECURE_COOKIES: ``1``: secure cookies only (implied by ``KALENA_HTTPS``).
    KALENA_HSTS_SECONDS: HSTS max-age with ``KALENA_HTTPS`` (default one year); KALENA_HSTS_PRELOAD=0
        drops the ``preload`` directive.
    KALENA_STATIC_MANIFEST: ``1`` once ``collectstatic`` has run (the images): hashed static names.
    KALENA_LOG_FORMAT: ``json`` (default) or ``text`` (human-readable); KALENA_LOG_LEVEL.
    KALENA_STATIC_ROOT: where ``collectstatic`` writes (default ``var/static``).
    KALENA_VAR_DIR: the state folder (default ``<checkout>/var`` in a source checkout, else
        ``$XDG_STATE_HOME/kalena``, i.e. ``~/.local/state/kalena``; never inside the package).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agents.logs import logging_config

PACKAGE_DIR = Path(__file__).resolve().parent
BASE_DIR = PACKAGE_DIR.parent
#: A source checkout (the repository: ``pyproject.toml`` beside the package) keeps its state in
#: ``<checkout>/var``; an installed package never writes beside itself.
SOURCE_CHECKOUT = (BASE_DIR / "pyproject.toml").is_file()


def _state_dir() -> Path:
    """``KALENA_VAR_DIR``; else ``<checkout>/var`` in a source checkout; else
    ``$XDG_STATE_HOME/kalena`` (``~/.local/state/kalena``) for an installed package."""
    if os.environ.get("KALENA_VAR_DIR"):
        return Path(os.environ["KALENA_VAR_DIR"])
    if SOURCE_CHECKOUT:
        return BASE_DIR / "var"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kalena"


def _asset_dir(name: str) -> Path:
    """``templates`` or ``static``: shipped inside the package in a wheel (copied at build time by
    setup.py from the top-level folders, the one place pages are edited); the top-level folder
    in a source checkout or an editable install."""
    packaged = PACKAGE_DIR / name
    return packaged if packaged.is_dir() else BASE_DIR / name


VAR_DIR = _state_dir()


#: Settings that may come from a file (Docker/Swarm secrets, Kubernetes secret volumes): with
#: ``<NAME>_FILE`` set and ``<NAME>`` unset, ``<NAME>`` is that file's content, stripped.
FILE_SETTINGS = ("KALENA_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "KALENA_METRICS_TOKEN")


def _settings_from_files() -> None:
    """Raises ImproperlyConfigured: a ``<NAME>_FILE`` that cannot be read (naming it)."""
    for name in FILE_SETTINGS:
        path = os.environ.get(f"{name}_FILE")
        if path and name not in os.environ:
            try:
                os.environ[name] = Path(path).read_text().strip()
            except OSError as exc:
                raise ImproperlyConfigured(f"{name}_FILE={path}: cannot read it ({exc.strerror or exc})") from None


_settings_from_files()


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


#: Secret keys shipped in examples or guessed first: never accepted.
KNOWN_SECRET_KEYS = frozenset({"change-me", "changeme", "change_me", "secret", "kalena", "django", "build", "test"})
MIN_SECRET_KEY_LENGTH = 50  # Django's own deploy check (security.W009)


def _secret_key() -> str:
    """``KALENA_SECRET_KEY``, or (embedded default: the variable unset) a key generated once into
    ``var/secret_key`` (mode 0600).

    Raises:
        ImproperlyConfigured: the variable is set but empty, a known example value, shorter than
            50 characters or with fewer than 5 distinct characters (Django's security.W009 rule).
    """
    if "KALENA_SECRET_KEY" in os.environ:
        key = os.environ["KALENA_SECRET_KEY"].strip()
        if not key or key.lower() in KNOWN_SECRET_KEYS or key.startswith("django-insecure") \
                or len(key) < MIN_SECRET_KEY_LENGTH or len(set(key)) < 5:
            raise ImproperlyConfigured(
                "KALENA_SECRET_KEY is empty, an example value or too weak: set at least "
                f"{MIN_SECRET_KEY_LENGTH} random characters (e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(50))'), or unset it for the embedded default's generated key")
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
    "kalena_web.policy",
    "ninja",  # serves Swagger UI for /api/docs from its own static files, not a CDN
]

MIDDLEWARE = [
    "kalena_web.console.middleware.ProbeMiddleware",
    "kalena_web.api.errors.ApiErrorMiddleware",
    "kalena_web.console.middleware.NulRefusedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "kalena_web.console.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "kalena_web.policy.audit.AuditActorMiddleware",
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
        "DIRS": [_asset_dir("templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "kalena_web.console.context.open_replans",
            ],
        },
    },
]

#: SQLite, however it is named (the embedded default or a sqlite:// DATABASE_URL, as the lab's
#: Kubernetes mode and the demo's lab give their processes): WAL, so the console keeps reading
#: while a replay is persisted or the loops write; IMMEDIATE transactions and a 30 s busy
#: timeout, so several processes writing at once wait their turn instead of failing with
#: "database is locked"; a 64 MiB page cache keeps a day's bulk inserts off the disk.
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["OPTIONS"] = {**SQLITE_OPTIONS, **DATABASES["default"].get("OPTIONS", {})}
else:
    _sqlite = Path(os.environ.get("KALENA_DB_PATH") or VAR_DIR / "kalena.sqlite3")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _sqlite,
            "OPTIONS": dict(SQLITE_OPTIONS),
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
STATICFILES_DIRS = [_asset_dir("static")]
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

if _flag("KALENA_STATIC_MANIFEST"):
    STORAGES["staticfiles"] = {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}



def _trusted_proxies(header: str, proxies: str) -> tuple[str, tuple[str, ...]]:
    """``(header, networks)`` from KALENA_TRUSTED_PROXY_HEADER and KALENA_TRUSTED_PROXIES;
    networks in ``ipaddress`` notation (``10.0.0.0/8``, a bare address = one host).

    Raises:
        ImproperlyConfigured: a malformed entry, or a header without any trusted proxy.
    """
    import ipaddress

    header = header.strip()
    networks = []
    for entry in (e.strip() for e in proxies.split(",")):
        if not entry:
            continue
        try:
            networks.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"KALENA_TRUSTED_PROXIES: {entry!r} is not an IP address or network "
                                       "(accepted: e.g. 10.0.0.0/8, 127.0.0.1, fd00::/8)") from None
    if header and not networks:
        raise ImproperlyConfigured(f"KALENA_TRUSTED_PROXY_HEADER={header} needs KALENA_TRUSTED_PROXIES: the "
                                   "addresses of the proxies that set it (any other peer could send it too)")
    if header and not all(c.isalnum() or c == "-" for c in header):
        raise ImproperlyConfigured(f"KALENA_TRUSTED_PROXY_HEADER: {header!r} is not a header name "
                                   "(accepted: letters, digits and '-', e.g. X-Forwarded-For)")
    return header, tuple(networks)


KALENA_TRUSTED_PROXY_HEADER, KALENA_TRUSTED_PROXIES = _trusted_proxies(
    os.environ.get("KALENA_TRUSTED_PROXY_HEADER", ""), os.environ.get("KALENA_TRUSTED_PROXIES", ""))
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("KALENA_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
HTTPS = _flag("KALENA_HTTPS")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS or _flag("KALENA_SECURE_COOKIES")
#: Paths answered for orchestrator probes and scrapers by pod IP over plain HTTP
#: (kalena_web.console.middleware.ProbeMiddleware; exempt from the SSL redirect and host check).
PROBE_PATHS = ("/livez", "/readyz", "/healthz", "/metrics", "/metrics/cluster")
if HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [rf"^{p.lstrip('/')}$" for p in PROBE_PATHS]
    SECURE_HSTS_SECONDS = int(os.environ.get("KALENA_HSTS_SECONDS", str(365 * 86400)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = _flag("KALENA_HSTS_PRELOAD", default=True)
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = logging_config(fmt=os.environ.get("KALENA_LOG_FORMAT", "json"), level=os.environ.get("KALENA_LOG_LEVEL", "WARNING"))

# --- Control plane (docs/design.md §1, §8): Celery loops, Channels, locks -------------------------------
# Embedded default (REDIS_URL unset): in-memory channel layer, Celery tasks run eagerly in the
# calling process and the periodic loops run on a thread of the serving process
# (kalena_web.control.embedded); locks live in the process-local cache. Production (REDIS_URL
# set, e.g. redis://redis:6379/0): Redis is the Celery broker, the channel layer and the lock
# store; loops run on Celery workers, scheduled by Celery beat.
#   REDIS_URL: Redis URL; unset = embedded.
#   KALENA_ESTIMATION_SHARDS: node shards for the estimation loop (default 16).
#   KALENA_ORCHESTRATOR: fake | kubernetes | docker | swarm (default fake).
#   KALENA_LOOP_LOCK_TTL_S: TTL of every per-cluster loop lock (scheduling, escalation, the batch
#       capacity publisher, archive, drift), renewed every TTL/3 while its run lasts, so the loops
#       of a worker that died mid-run resume within about TTL (default 5 s; kalena_web.control.locks).
#   KALENA_HOOKS_AUDIT_COALESCE_S: the hooks listener audits the first refusal of each (peer host,
#       endpoint, reason) per this many seconds and counts every one (default 60; 0 audits each).
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
CELERY_WORKER_HIJACK_ROOT_LOGGER = False   # workers and beat log through LOGGING (agents.logs)
# Liveness of workers and beat: each writes a heartbeat file the probe reads (kalena probe).
#   KALENA_HEARTBEAT_DIR: where (default var/heartbeat); KALENA_HEARTBEAT_S: how often (10 s).
KALENA_HEARTBEAT_DIR = Path(os.environ.get("KALENA_HEARTBEAT_DIR") or VAR_DIR / "heartbeat")
KALENA_HEARTBEAT_S = float(os.environ.get("KALENA_HEARTBEAT_S", "10"))
CELERY_BEAT_SCHEDULER = "kalena_web.control.heartbeat:HeartbeatScheduler"

KALENA_ESTIMATION_SHARDS = int(os.environ.get("KALENA_ESTIMATION_SHARDS", "16"))
# KALENA_WATCH_SHARDS=1: `kalena watch` (and `kalena serve`'s watch) schedules a share of a
# Kubernetes cluster beside the other instances, as with --shards (docs/scheduler.md "Sharding").
KALENA_WATCH_SHARDS = _flag("KALENA_WATCH_SHARDS")
KALENA_ORCHESTRATOR = os.environ.get("KALENA_ORCHESTRATOR", "fake")
KALENA_LOOP_LOCK_TTL_S = float(os.environ.get("KALENA_LOOP_LOCK_TTL_S", "5"))
KALENA_HOOKS_AUDIT_COALESCE_S = float(os.environ.get("KALENA_HOOKS_AUDIT_COALESCE_S", "60"))
#   KALENA_ORCHESTRATOR_THROUGH_WORKERS: 1 in a console that mounts no docker.sock / holds no
#       orchestrator credentials: its pod stops are forwarded to the Celery workers and awaited
#       (kalena_web.control.forwarding) for at most KALENA_FORWARDED_EVICT_TIMEOUT_S (60 s).
KALENA_ORCHESTRATOR_THROUGH_WORKERS = os.environ.get("KALENA_ORCHESTRATOR_THROUGH_WORKERS", "").strip().lower() in {
    "1", "true", "yes", "on"}
KALENA_FORWARDED_EVICT_TIMEOUT_S = float(os.environ.get("KALENA_FORWARDED_EVICT_TIMEOUT_S", "60"))
# docker/swarm: engines as nodes, "[node=]unix:///path,[node=]tcp://host:2376" (docs/docker.md)
KALENA_DOCKER_ENGINES = os.environ.get("KALENA_DOCKER_ENGINES", "")
KALENA_METRICS_TOKEN = os.environ.get("KALENA_METRICS_TOKEN", "")  # set: /metrics needs this bearer token
# Drift (docs/design.md §10): window of the steady-state reservation and the recommendation threshold.
KALENA_DRIFT_WINDOW_S = float(os.environ.get("KALENA_DRIFT_WINDOW_S", "86400"))
KALENA_DRIFT_THRESHOLD = float(os.environ.get("KALENA_DRIFT_THRESHOLD", "0.25"))
# share (0–1) of the blueprint's production pods that must have steady samples before drift
# recommends a re-plan: D from a handful of pods stands for nothing
KALENA_DRIFT_MIN_COVERAGE = float(os.environ.get("KALENA_DRIFT_MIN_COVERAGE", "0.5"))
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
#   KALENA_ESTIMATION_LOCK_TTL_S: TTL of a shard's estimation lock, renewed every TTL/3 while held,
#     so a dead holder's shard resumes within about TTL (default 6 s).
#   KALENA_ESTIMATION_MAX_BATCHES: batches one estimation transaction takes (default 2000).
#   KALENA_ESTIMATION_BUDGET_S: a task re-queues itself after this long with work left (5 s).
KALENA_INGEST_MAX_BATCH_SAMPLES = int(os.environ.get("KALENA_INGEST_MAX_BATCH_SAMPLES", "2000"))
KALENA_INGEST_MAX_FRAME_BYTES = int(os.environ.get("KALENA_INGEST_MAX_FRAME_BYTES", str(8 * 1024 * 1024)))
KALENA_INGEST_MAX_FUTURE_S = float(os.environ.get("KALENA_INGEST_MAX_FUTURE_S", "120"))
KALENA_INGEST_MAX_AGE_S = float(os.environ.get("KALENA_INGEST_MAX_AGE_S", str(7 * 86400)))
KALENA_INGEST_MAX_USAGE_RATIO = float(os.environ.get("KALENA_INGEST_MAX_USAGE_RATIO", "4"))
KALENA_INGEST_FLUSH_S = float(os.environ.get("KALENA_INGEST_FLUSH_S", "0.05"))
KALENA_INGEST_FLUSH_MAX_SAMPLES = int(os.environ.get("KALENA_INGEST_FLUSH_MAX_SAMPLES", "20000"))
KALENA_ESTIMATION_LOCK_TTL_S = float(os.environ.get("KALENA_ESTIMATION_LOCK_TTL_S", "6"))
KALENA_ESTIMATION_MAX_BATCHES = int(os.environ.get("KALENA_ESTIMATION_MAX_BATCHES", "2000"))
KALENA_ESTIMATION_BUDGET_S = float(os.environ.get("KALENA_ESTIMATION_BUDGET_S", "5"))

# Kubernetes admission webhook (docs/kubernetes-admission.md):
#   KALENA_ADMISSION_INFER_JOBS=1: Job/CronJob pods without a tier label are batch (docs/design.md §4).
#   KALENA_ADMISSION_EXTENDER_MODE=1: kube-scheduler keeps batch; schedulerName is left alone.
KALENA_ADMISSION_INFER_JOBS = _flag("KALENA_ADMISSION_INFER_JOBS")
KALENA_ADMISSION_EXTENDER_MODE = _flag("KALENA_ADMISSION_EXTENDER_MODE")
# Agents on Kubernetes authenticated by TokenReview (kalena_web/kubehooks/agent_auth.py):
KALENA_AGENT_TOKENREVIEW_CLUSTER = os.environ.get("KALENA_AGENT_TOKENREVIEW_CLUSTER", "")
KALENA_AGENT_SERVICE_ACCOUNT = os.environ.get("KALENA_AGENT_SERVICE_ACCOUNT",
                                              "system:serviceaccount:kalena-system:kalena-agent")
KALENA_AGENT_TOKEN_AUDIENCE = os.environ.get("KALENA_AGENT_TOKEN_AUDIENCE", "kalena")
# Agents joining with the stack's join secret (kalena_web/telemetry/join.py, docs/security.md):
#   KALENA_AGENT_JOIN_SECRET_FILE (a Docker secret; one secret per line, re-read at every join) or
#   KALENA_AGENT_JOIN_SECRET; unset or empty: joining is off. KALENA_AGENT_JOIN_CLUSTER: the live
#   cluster joined nodes belong to (default: the only live cluster).
KALENA_AGENT_JOIN_SECRET_FILE = os.environ.get("KALENA_AGENT_JOIN_SECRET_FILE", "")
KALENA_AGENT_JOIN_SECRET = os.environ.get("KALENA_AGENT_JOIN_SECRET", "")
KALENA_AGENT_JOIN_CLUSTER = os.environ.get("KALENA_AGENT_JOIN_CLUSTER", "")
