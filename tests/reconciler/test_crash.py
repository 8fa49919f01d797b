"""Crash safety: a worker that dies after any step leaves its claim to expire, and
another worker continues from the last receipt with no second destroy."""

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler.claims import claim_next
from tests import factories as f

from .conftest import retirement_of

pytestmark = pytest.mark.django_db

UNSAVED = {"README.md": b"# task\n", "draft.md": b"unsaved\n"}


class WorkerDied(BaseException):
    """Not an Exception: nothing in the worker may catch it, like a SIGKILL."""


@pytest.fixture
def die_at(at_checkpoint):
    """die_at(point): from now on a worker dies there; returns what ends that."""

    def arm(point):
        def die(name):
            if name == point:
                raise WorkerDied(name)

        return at_checkpoint(die)

    return arm


def expire_claims():
    m.Retirement.objects.exclude(attempt_id=None).update(claimed_until=timezone.now())


@pytest.mark.parametrize(
    "point",
    [
        "compare:before_receipt",
        "compare:after_receipt",
        "export:before_receipt",
        "export:after_receipt",
        "retire:after_destroy",
    ],
)
def test_another_worker_continues_from_the_last_receipt(point, warm, local, reconcile, die_at):
    lease = warm(status=m.LeaseStatus.FAILED, files=UNSAVED)
    survive = die_at(point)
    with pytest.raises(WorkerDied):
        reconcile()
    r = retirement_of(lease)
    assert r.attempt_id is not None  # the dead worker's claim is still there
    reconcile()  # claim not expired yet: nobody touches the record
    assert retirement_of(lease).stage != m.Stage.RETIRED

    survive()
    expire_claims()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    assert local.count("destroy", lease.provider_lease_id) <= 1
    assert local.inner.get(lease.provider_lease_id).state == "destroyed"
    assert r.receipts.filter(kind=m.ReceiptKind.RETIREMENT).count() == 1
    verified = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT, payload__verified=True)
    assert verified.count() == 1
    assert m.Attachment.objects.filter(retirement=r, path="draft.md").exists()


def test_a_crash_after_destroy_is_confirmed_by_a_read_not_a_second_destroy(
    warm, local, reconcile, die_at
):
    lease = warm(status=m.LeaseStatus.FAILED)
    survive = die_at("retire:after_destroy")
    with pytest.raises(WorkerDied):
        reconcile()
    assert local.count("destroy") == 1
    survive()
    expire_claims()
    reconcile()
    assert local.count("destroy") == 1
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.EXPIRED
    assert retirement_of(lease).stage == m.Stage.RETIRED


def test_a_crash_after_a_stop_only_step_never_destroys(warm, local, reconcile, die_at):
    lease = warm(
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.CANCELLED,
        receipt=False,
        stopped=False,
    )
    survive = die_at("stop_only:after_stop")
    with pytest.raises(WorkerDied):
        reconcile()
    survive()
    expire_claims()
    reconcile()
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.RELEASED
    assert m.Retirement.objects.get(lease=lease).stage == m.Stage.CORRECTED
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert local.count("destroy") == 0


def test_a_sandbox_started_by_a_dead_worker_is_stopped_by_the_next(warm, local, reconcile, die_at):
    env = f.EnvironmentFactory(retirement_mode=m.RetirementMode.MANUAL)
    lease = warm(env=env, status=m.LeaseStatus.FAILED, files=UNSAVED)
    survive = die_at("compare:before_receipt")
    with pytest.raises(WorkerDied):
        reconcile()
    assert local.inner.get(lease.provider_lease_id).state == "started"
    assert retirement_of(lease).started_for_salvage
    survive()
    expire_claims()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert not r.started_for_salvage


def test_an_operator_hold_on_a_dead_workers_started_sandbox_still_stops_it(
    warm, local, reconcile, die_at
):
    lease = warm(status=m.LeaseStatus.FAILED, files=UNSAVED)
    survive = die_at("compare:before_receipt")
    with pytest.raises(WorkerDied):
        reconcile()
    survive()
    # The console's hold action puts the record in `held` straight away.
    m.Retirement.objects.filter(lease=lease).update(
        stage=m.Stage.HELD, operator_hold_reason="look first"
    )
    expire_claims()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.HELD and r.holds == ["operator_hold"]
    assert not r.started_for_salvage
    assert local.inner.get(lease.provider_lease_id).state == "stopped"
    assert local.count("destroy") == 0


def test_switching_manual_to_auto_lets_an_awaiting_record_proceed(warm, local, reconcile):
    env = f.EnvironmentFactory(retirement_mode=m.RetirementMode.MANUAL)
    lease = warm(env=env, status=m.LeaseStatus.FAILED)
    reconcile()
    assert retirement_of(lease).stage == m.Stage.AWAITING_APPROVAL
    m.Environment.objects.filter(pk=env.pk).update(retirement_mode=m.RetirementMode.AUTO)
    reconcile()
    assert retirement_of(lease).stage == m.Stage.RETIRED


def test_a_worker_claims_one_record_at_a_time_so_a_crash_strands_at_most_one(
    warm, local, reconcile, die_at
):
    leases = [warm(status=m.LeaseStatus.FAILED) for _ in range(4)]
    survive = die_at("compare:before_receipt")
    with pytest.raises(WorkerDied):
        reconcile()
    claimed = m.Retirement.objects.exclude(attempt_id=None)
    assert claimed.count() == 1
    survive()
    reconcile()  # the others are worked at once; only the dead worker's record waits
    stages = sorted(retirement_of(lease).stage for lease in leases)
    assert stages.count(m.Stage.RETIRED) == 3
    expire_claims()
    reconcile()
    assert all(retirement_of(lease).stage == m.Stage.RETIRED for lease in leases)
    assert local.count("destroy") == 4


def test_claim_next_claims_exactly_one_due_record():
    from sandboxes.reconciler.listing import sync_retirements

    for _ in range(3):
        lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
        f.stop_receipt(lease)
    sync_retirements()
    first = claim_next()
    assert first is not None
    assert m.Retirement.objects.exclude(attempt_id=None).count() == 1
    second = claim_next()
    assert second.retirement_id != first.retirement_id
    assert second.attempt_id != first.attempt_id  # each claim is fenced on its own
    third = claim_next(exclude={first.retirement_id})
    assert third.retirement_id not in (first.retirement_id, second.retirement_id)
    assert claim_next() is None
