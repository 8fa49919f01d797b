"""Settings the type check loads (django-stubs' mypy plugin, pyproject.toml):
the test suite's apps, without its scratch folder. mypy ends with os._exit,
so the folder test_settings makes at import was never removed: one left in
the temp directory after every `mypy` run."""

import os

os.environ.setdefault("SECRET_KEY", "typecheck-only-secret-key-not-for-production")
os.environ.setdefault("ALLOWED_HOSTS", "localhost")

from paperclip_console.settings import *  # noqa: F403
from paperclip_console.settings import INSTALLED_APPS

# The harness the tests drive (devtools), as test_settings installs it.
if "devtools" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]
