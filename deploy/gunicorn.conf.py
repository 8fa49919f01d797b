"""gunicorn settings for the console: `gunicorn -c deploy/gunicorn.conf.py`.

Every value can be overridden from the environment (GUNICORN_BIND,
WEB_CONCURRENCY, GUNICORN_THREADS, GUNICORN_TIMEOUT). Static files are served
by whitenoise inside the app, so no separate static server is needed. Logs
use the console's own formatter, one JSON object per line unless LOG_FORMAT=text.
"""

import os

wsgi_app = "paperclip_console.wsgi:application"
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
graceful_timeout = 30
# The console runs behind a TLS-terminating proxy on the same host by default;
# set FORWARDED_ALLOW_IPS to the proxy's address otherwise. The console reads the
# same variable (settings.FORWARDED_ALLOW_IPS): the login limiter believes
# X-Forwarded-For only from these addresses.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
max_requests = 2000
max_requests_jitter = 200
accesslog = "-"
errorlog = "-"

_format = os.environ.get("LOG_FORMAT", "json").strip().lower()
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "sandboxes.logging.JsonFormatter"},
        "text": {"()": "sandboxes.logging.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": _format if _format in ("json", "text") else "json",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}


def child_exit(server, worker):
    # With PROMETHEUS_MULTIPROC_DIR, a dead worker's metric files are merged
    # into the totals instead of lingering as a live process.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
