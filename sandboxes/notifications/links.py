"""Console URLs as links a message can carry: absolute, on CONSOLE_BASE_URL."""

from urllib.parse import urljoin

from django.conf import settings


def absolute(path: str) -> str:
    """A console URL as a link a message can carry (CONSOLE_BASE_URL)."""
    base = getattr(settings, "CONSOLE_BASE_URL", "") or "http://localhost:8000"
    return urljoin(base.rstrip("/") + "/", path.lstrip("/"))
