import os

import pytest
from hypothesis import settings as hypothesis_settings

from sandboxes.models import ApiToken

# CI replays the same generated cases every run, so a red build is reproducible.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.fixture
def ingest_token(db):
    """(token row, raw bearer value) with ingest scope."""
    return ApiToken.issue("paperclip-runtime", "ingest")


@pytest.fixture
def operator_token(db):
    return ApiToken.issue("ops-bot", "operator")
