"""Settings for the test suite: PostgreSQL (row locks, SKIP LOCKED and CHECK
constraints behave differently on SQLite), fast hashing, throwaway storage."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/paperclip_console")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")

from paperclip_console.settings import *  # noqa: F403
from paperclip_console.settings import INSTALLED_APPS, STORAGES

# The harness the tests drive (the simulator, the demo and chaos fleets), which
# production never installs.
if "devtools" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]

SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
SECURE_HSTS_SECONDS = 0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
_scratch = Path(tempfile.mkdtemp(prefix="paperclip-console-tests-"))


def _remove_scratch(owner: int = os.getpid()) -> None:
    # One scratch folder per process that loads these settings (pytest, a
    # bench, a subprocess the tests start), removed when that process exits;
    # a forked child that runs atexit handlers leaves its parent's alone.
    if os.getpid() == owner:
        shutil.rmtree(_scratch, ignore_errors=True)


atexit.register(_remove_scratch)
# The processes this one starts make their scratch folders (and any temp
# file) inside this one's: a child killed before its atexit (SIGKILL, a test
# of a crash) leaves nothing behind once this process removes its own.
os.environ["TMPDIR"] = str(_scratch)
MEDIA_ROOT = _scratch / "media"
LOCAL_SANDBOX_ROOT = _scratch / "sandboxes"
STATIC_ROOT = _scratch / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True
