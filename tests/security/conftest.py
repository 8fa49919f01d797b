"""Fixed users, a world every action can succeed on, and the before/after
snapshot the no-partial-write checks compare."""

from contextlib import contextmanager

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import connection, transaction
from django.test import Client
from hypothesis import HealthCheck, settings

from sandboxes.models import ApiToken, NotificationChannel
from sandboxes.models.choices import HoldCode, Stage
from sandboxes.notifications.secrets import encrypt
from sandboxes.roles import ADMINS, OPERATORS, REVIEWERS
from tests.console.conftest import clean_compare
from tests.factories import (
    CompanyFactory,
    EnvironmentFactory,
    ReconcilerPassFactory,
    RetirementFactory,
    UserFactory,
)

PASSWORD = "correct horse battery staple"

# Every fuzz test shares one database world per test; each example runs in a
# savepoint that is rolled back, so examples cannot see each other's writes.
FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ROLES = {"admin": [ADMINS], "operator": [OPERATORS], "reviewer": [REVIEWERS], "outsider": []}


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()  # the login limiter counts failures in the process-wide cache
    yield
    cache.clear()


@pytest.fixture
def users(db):
    return {
        role: UserFactory(username=f"{role}-sec", groups=groups) for role, groups in ROLES.items()
    }


def client_for(user=None, *, csrf=False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def world(db):
    """Objects on which every console and API action can succeed once."""
    awaiting = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(awaiting)
    held = RetirementFactory(
        stage=Stage.HELD,
        operator_hold_reason="customer asked",
        holds=[HoldCode.OPERATOR_HOLD],
        hold_reasons={HoldCode.OPERATOR_HOLD: "Held by someone: customer asked"},
    )
    token, raw = ApiToken.issue("victim-token", "ingest")
    environment = EnvironmentFactory(retirement_mode="auto")
    return {
        "awaiting": awaiting,
        "held": held,
        "environment": environment,
        # A webhook to a closed loopback port: a test send fails fast and is logged.
        "channel": NotificationChannel.objects.create(
            environment=environment,
            name="ops-webhook",
            kind="webhook",
            url_encrypted=encrypt("http://127.0.0.1:9/hook"),
            url_hint="http://127.0.0.1:9/…",
            secret_encrypted=encrypt("whsec_" + "A" * 43 + "="),
        ),
        "token": token,
        "token_raw": raw,
        "task": awaiting.lease.issue,
        "pass": ReconcilerPassFactory(),
        # Somebody whose role an admin can change (never the acting user).
        "member": UserFactory(username="member-sec"),
        # A company an admin can limit the member to (README, company scope).
        "company": CompanyFactory(name="Acme Sec"),
    }


def _tracked_models():
    return [
        *apps.get_app_config("sandboxes").get_models(),
        get_user_model(),
        Group,
    ]


def snapshot(*objects) -> dict:
    """Row counts of every console table and every field of the named rows."""
    models = _tracked_models()
    # One round trip: fuzz examples take two snapshots each.
    sql = "SELECT " + ", ".join(f"(SELECT count(*) FROM {m._meta.db_table})" for m in models)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    state = {"counts": {m._meta.label: n for m, n in zip(models, row, strict=True)}}
    for obj in objects:
        state[f"{obj._meta.label}:{obj.pk}"] = type(obj).objects.filter(pk=obj.pk).values().first()
    return state


def changes(before: dict, after: dict) -> dict:
    """{"counts": {label: delta}, row key: {field: (old, new)}} of what differs."""
    out = {
        "counts": {
            label: after["counts"][label] - n
            for label, n in before["counts"].items()
            if after["counts"][label] != n
        }
    }
    for key, row in before.items():
        if key == "counts":
            continue
        new = after[key]
        out[key] = {f: (row[f], new[f]) for f in row if row[f] != new[f]}
    return out


@contextmanager
def rolled_back():
    """Run one fuzz example and undo every write it made."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)
