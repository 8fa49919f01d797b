"""K3: the database connection dropped in the middle of a pass (pg_terminate_backend).

The pass survives it: it reconnects, releases (or leaves to expire) the claim of
the record whose step was cut, goes on with the next record, and the record is
retried from its receipts — never destroyed twice, never without proof."""

import io
import json
import logging

import psycopg
import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.utils import timezone

from sandboxes import models as m
from sandboxes.logging import JsonFormatter
from sandboxes.reconciler import passes
from sandboxes.reconciler.claims import release_claim

from .conftest import retirement_of

pytestmark = pytest.mark.django_db(transaction=True)

UNSAVED = {"README.md": b"# task\n", "draft.md": b"unsaved\n"}


def terminate_my_backend():
    """Kill this thread's PostgreSQL backend from another connection, like a DB restart."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    s = connection.settings_dict
    with psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.fixture
def drop_at(at_checkpoint):
    """drop_at(point): the connection drops there (`times` times); the hits."""

    def arm(point, times=1):
        hits = []

        def drop(name):
            if name == point and len(hits) < times:
                hits.append(name)
                terminate_my_backend()

        at_checkpoint(drop)
        return hits

    return arm


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["compare:before_receipt", "export:before_receipt", "retire:after_destroy"]
)
def test_a_dropped_connection_mid_step_is_survived_and_retried(
    point, warm, local, reconcile, drop_at
):
    lease = warm(status=m.LeaseStatus.FAILED, files=UNSAVED)
    other = warm(status=m.LeaseStatus.FAILED)
    hits = drop_at(point)
    first = reconcile()  # no exception escapes the pass
    assert hits == [point]
    assert any("database lost" in e.get("error", "") for e in first.errors), first.errors
    # The cut record's claim was released on a fresh connection: nothing strands it.
    assert not m.Retirement.objects.exclude(attempt_id=None).exists()
    # The pass went on with the next record: whichever was not cut got retired.
    stages = {retirement_of(lease).stage, retirement_of(other).stage}
    assert m.Stage.RETIRED in stages, stages
    reconcile()
    for lease_ in (lease, other):
        r = retirement_of(lease_)
        assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
        assert local.count("destroy", lease_.provider_lease_id) == 1
        assert r.receipts.filter(kind=m.ReceiptKind.RETIREMENT).count() == 1
        assert r.attempts == 0  # a dropped connection is not the step's failure
    assert m.Attachment.objects.filter(path="draft.md").count() >= 1
    assert m.Retirement.objects.count() == 2


def test_a_claim_that_cannot_be_released_expires_and_fencing_still_holds(
    warm, local, reconcile, monkeypatch, drop_at
):
    lease = warm(status=m.LeaseStatus.FAILED)
    drop_at("retire:after_destroy")
    real_release = release_claim

    def release_fails(*args):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("sandboxes.reconciler.claims.release_claim", release_fails)
    reconcile()
    r = retirement_of(lease)
    assert r.attempt_id is not None and r.stage == m.Stage.RETIRING
    monkeypatch.setattr("sandboxes.reconciler.claims.release_claim", real_release)
    reconcile()  # the claim still holds: nobody touches the record
    assert retirement_of(lease).stage == m.Stage.RETIRING
    m.Retirement.objects.filter(pk=r.pk).update(claimed_until=r.listed_at)  # expired
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy", lease.provider_lease_id) == 1  # confirmed by a read


def test_the_pass_stops_claiming_while_the_database_stays_down(warm, reconcile, monkeypatch):
    warm(status=m.LeaseStatus.FAILED)
    calls = []

    def down(**kwargs):
        calls.append(1)
        raise OperationalError("connection refused")

    monkeypatch.setattr("sandboxes.reconciler.claims.claim_next", down)
    monkeypatch.setattr(passes.time, "sleep", lambda s: None)
    record = reconcile()
    assert len(calls) == passes.MAX_DB_ERRORS
    assert sum(1 for e in record.errors if e.get("step") == "claim") == passes.MAX_DB_ERRORS


def test_the_reconcile_loop_survives_database_restarts(monkeypatch):
    from sandboxes.management.commands import reconcile as command

    outcomes = [OperationalError("terminating connection"), None, OperationalError("gone"), None]
    runs, sleeps = [], []

    class Stop(Exception):
        pass

    def fake_run_pass(**kwargs):
        runs.append(1)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        now = timezone.now()
        return m.ReconcilerPass.objects.create(worker="t", started_at=now, finished_at=now)

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if not outcomes:
            raise Stop

    monkeypatch.setattr(command, "run_pass", fake_run_pass)
    monkeypatch.setattr(command.time, "sleep", fake_sleep)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(Stop):
        call_command("reconcile", "--interval", "5", stdout=out, stderr=err)
    assert len(runs) == 4
    assert err.getvalue().count("database lost") == 2
    assert out.getvalue().count("pass ") == 2
    assert sleeps[0] == 1.0 and sleeps[-1] == 5


def test_json_logs_carry_pass_lease_and_attempt_ids(warm, reconcile, caplog):
    lease = warm(status=m.LeaseStatus.FAILED)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(json.loads(JsonFormatter().format(record)))

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("sandboxes.reconciler")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        record = reconcile()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    steps = [r for r in records if r["message"].startswith("step ")]
    assert {r["message"].split()[1] for r in steps} >= {"compare", "retire"}
    for r in steps:
        assert r["pass_id"] == str(record.pk)
        assert r["lease_id"] == str(lease.pk)
        assert r.get("attempt_id")
    assert all(r.get("pass_id") == str(record.pk) for r in records)
