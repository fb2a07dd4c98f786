"""Settings of the demo/host project: SQLite by default, PostgreSQL when DATABASE_URL is set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django import conf as django_conf

BASE_DIR = Path(__file__).resolve().parent.parent

DEVELOPMENT_SECRET_KEY = "django-insecure-pikku-workflows-development-only"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") != "0"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pikku_workflows",
    "project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"

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


def database_from_environment() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        # Workers need persistent connections (about 10x throughput); no psycopg pool:
        # it broke django-q2 clusters (docs/operations.md, "Running workers in production").
        config = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
        if config["ENGINE"] == "django.db.backends.postgresql":
            # Server-side binding lets psycopg prepare the statements a worker repeats for every
            # step (from their second use): the server stops re-planning them (bench/queued.py).
            config["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 2}
        return config
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {
            # Deferred transactions fail read-then-write claims with "database is locked";
            # IMMEDIATE takes the write lock up front and waits up to `timeout` seconds for it.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {"NAME": str(BASE_DIR / "test_db.sqlite3")},
    }


DATABASES = {"default": database_from_environment()}

# The demo runs on SQLite by choice: the warning that SQLite suits one machine only would be
# printed by every process `make demo` starts (web server, its reloader, the worker, ...).
SILENCED_SYSTEM_CHECKS = (
    ["pikku_workflows.W004"] if DATABASES["default"]["ENGINE"].endswith("sqlite3") else []
)

AUTH_PASSWORD_VALIDATORS: list[dict] = []

# Django's limit on the bodies it reads itself (the admin's forms) agrees with the payloads the
# engine and the API accept (PIKKU_WORKFLOWS' MAX_PAYLOAD_BYTES, 10 MB; pikku_workflows.W008).
DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000_000

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    # The API (pikku_workflows.api) follows these: session (CSRF enforced) for the browser,
    # tokens for other clients, basic auth for curl.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

# The recommended django-q2 configuration for pikku_workflows (README, "Add it to your project").
Q_CLUSTER = {
    "name": "pikku",
    "orm": "default",
    "workers": int(os.environ.get("PIKKU_Q_WORKERS", "2")),
    "timeout": 300,
    "retry": 600,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": -1,
    "poll": 0.1,
    "catch_up": False,
    # FIFO dequeue with SKIP LOCKED, one statement per claim (bench/queued.py measures it).
    "broker_class": os.environ.get("PIKKU_Q_BROKER", "pikku_workflows.broker.SkipLockedOrmBroker")
    or None,
    # django-q2 logs every process it starts and every task it runs at INFO: the demo's terminal
    # would scroll past what the engine says. Its warnings and errors still show.
    "log_level": "WARNING",
}

# PIKKU_EXTRA_WORKFLOW_MODULES (comma-separated) lets test worker subprocesses load test workflows.
PIKKU_WORKFLOWS: dict[str, Any] = {
    "MODULES": [m for m in os.environ.get("PIKKU_EXTRA_WORKFLOW_MODULES", "").split(",") if m],
}

# The demo e-mails managers when an order waits for their approval; the console shows the mail.
# Django 6.1 configures mail with MAILERS and deprecates EMAIL_BACKEND; 5.2 and 6.0 know only that.
_EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)
if hasattr(django_conf, "DEPRECATED_EMAIL_SETTINGS"):
    MAILERS = {"default": {"BACKEND": _EMAIL_BACKEND}}
else:
    EMAIL_BACKEND = _EMAIL_BACKEND
DEFAULT_FROM_EMAIL = "pikku-demo@example.com"
DEMO_SITE_URL = os.environ.get("DEMO_SITE_URL", "http://127.0.0.1:8000")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "pikku_workflows": {"handlers": ["console"], "level": os.environ.get("PIKKU_LOG", "INFO")}
    },
}
