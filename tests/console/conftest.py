import pytest
from django.core.cache import cache
from django.test import Client

from sandboxes.models.choices import ReceiptKind, Stage
from sandboxes.roles import ADMINS, OPERATORS, REVIEWERS
from tests.factories import ReceiptFactory, RetirementFactory, UserFactory


@pytest.fixture(autouse=True)
def _fresh_cache():
    # The login limiter counts failures in the (process-wide) cache.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def admin(db):
    return UserFactory(username="alice-admin", groups=[ADMINS])


@pytest.fixture
def operator(db):
    return UserFactory(username="oscar-operator", groups=[OPERATORS])


@pytest.fixture
def reviewer(db):
    return UserFactory(username="rita-reviewer", groups=[REVIEWERS])


@pytest.fixture
def outsider(db):
    return UserFactory(username="otto-outsider")


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_admin(admin):
    return login(admin)


@pytest.fixture
def as_operator(operator):
    return login(operator)


@pytest.fixture
def as_reviewer(reviewer):
    return login(reviewer)


@pytest.fixture
def as_outsider(outsider):
    return login(outsider)


def clean_compare(retirement, **payload):
    return ReceiptFactory(
        kind=ReceiptKind.SALVAGE_COMPARE,
        state=None,
        lease=retirement.lease,
        retirement=retirement,
        provider_lease_id=retirement.provider_lease_id,
        actor="system",
        payload={"clean": True, "added": [], "changed": [], "deleted": [], **payload},
    )


@pytest.fixture
def awaiting(db):
    """A retirement awaiting approval, with a clean compare as its proof."""
    r = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(r)
    return r


@pytest.fixture
def unproven(db):
    """Awaiting approval, but the compare found unsaved files and nothing was exported."""
    r = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(r, clean=False, added=[{"path": "notes.md", "size": 12}])
    return r
