import pytest

from sandboxes.models import ApiToken


@pytest.fixture
def ingest_token(db):
    """(token row, raw bearer value) with ingest scope."""
    return ApiToken.issue("paperclip-runtime", "ingest")


@pytest.fixture
def operator_token(db):
    return ApiToken.issue("ops-bot", "operator")
