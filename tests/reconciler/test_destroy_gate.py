"""The destroy gate's own tests (issue 10 item 11).

Mutating the gate showed three changes no test noticed. Each test below was
checked by removing its check from sandboxes/proof.py or
sandboxes/reconciler/gate.py and watching it fail:

(a) only the LATEST compare counts: a dirty compare after a clean one voids it;
(b) only an explicit `clean: true` counts as clean;
(c) `authorize_destroy` re-judges the lease under the lock: a lease acquired
    again is refused there, even with an operator's attestation.

Mutations run (each made alone, the file run, the mutation reverted):
- proof.py, `latest.payload.get("clean") is True` → `any(c.payload.get("clean")
  is True for c in compares)`: both (a) tests fail;
- the same line → clean derived from empty added/changed/deleted when the flag
  is missing: the two "no clean flag" cases of (b) fail;
- the same line → truthiness (`if latest.payload.get("clean"):`): the "clean
  as 1" and "clean as a string" cases of (b) fail;
- gate.py, authorize_destroy without `if cand is None or cand.kind is None:
  raise DestroyRefused(...)`: (c) fails (the sandbox is destroyed).
"""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler.gate import DestroyRefused
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.reconciler.plan import Action, Plan
from sandboxes.reconciler.steps import retire_sandbox
from sandboxes.reconciler.worker import Worker
from tests import factories as f

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


def _claim(r):
    attempt = uuid.uuid4()
    m.Retirement.objects.filter(pk=r.pk).update(
        attempt_id=attempt, claimed_until=timezone.now() + timedelta(minutes=5)
    )
    return attempt


def _retire(r, local):
    """The one path to a provider destroy, called as a worker whose plan said retire."""
    r.refresh_from_db()
    plan = Plan(Action.RETIRE, r.pk, r.environment, r.provider_lease_id)
    retire_sandbox(plan, _claim(r), Worker(provider_for=lambda e: local))
    r.refresh_from_db()


def _record(warm):
    lease = warm(status=m.LeaseStatus.FAILED)
    sync_retirements()
    return lease, retirement_of(lease)


def _compare(r, payload, *, seconds=0):
    return f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.SALVAGE_COMPARE,
        state=None,
        actor="system",
        confirmed_at=timezone.now() + timedelta(seconds=seconds),
        payload=payload,
    )


CLEAN = {"clean": True, "added": [], "changed": [], "deleted": []}
DIRTY = {
    "clean": False,
    "added": [{"path": "notes.md", "sha256": "0" * 64, "size": 3}],
    "changed": [],
    "deleted": [],
}


# --- (a) only the latest compare counts ------------------------------------------------


def test_a_dirty_compare_after_a_clean_one_voids_the_proof(warm, local):
    lease, r = _record(warm)
    _compare(r, CLEAN)
    _compare(r, DIRTY, seconds=5)
    with pytest.raises(DestroyRefused, match="no proof: unsaved files found"):
        _retire(r, local)
    assert local.count("destroy") == 0
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.FAILED


def test_the_latest_compare_is_the_newest_confirmed_not_the_first_written(warm, local):
    """Receipts can be written out of order; the newest confirmation decides."""
    lease, r = _record(warm)
    _compare(r, DIRTY, seconds=5)
    _compare(r, CLEAN)  # written later, confirmed earlier
    with pytest.raises(DestroyRefused, match="no proof"):
        _retire(r, local)
    assert local.count("destroy") == 0


def test_a_clean_compare_after_a_dirty_one_is_proof(warm, local):
    lease, r = _record(warm)
    _compare(r, DIRTY)
    _compare(r, CLEAN, seconds=5)
    _retire(r, local)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1


# --- (b) only an explicit clean: true is clean -------------------------------------------


NOT_EXPLICIT = {
    "no clean flag, empty lists": {"added": [], "changed": [], "deleted": []},
    "no clean flag, no lists": {},
    "clean as a string": {"clean": "true", "added": [], "changed": [], "deleted": []},
    "clean as 1": {"clean": 1, "added": [], "changed": [], "deleted": []},
    "clean null": {"clean": None, "added": [], "changed": [], "deleted": []},
}


@pytest.mark.parametrize("case", sorted(NOT_EXPLICIT))
def test_a_compare_without_an_explicit_clean_flag_is_not_proof(case, warm, local):
    lease, r = _record(warm)
    _compare(r, NOT_EXPLICIT[case])
    with pytest.raises(DestroyRefused, match="no proof"):
        _retire(r, local)
    assert local.count("destroy") == 0


# --- (c) the gate re-judges the lease under the lock ------------------------------------


def _attest(r):
    return f.ReceiptFactory(
        lease=r.lease,
        retirement=r,
        kind=m.ReceiptKind.OPERATOR_ATTESTED,
        state=None,
        actor="admin",
        payload={"typed_sandbox_id": r.provider_lease_id, "reason": "scratch", "user": "admin"},
    )


def test_a_lease_acquired_again_is_refused_by_the_gate_even_with_an_attestation(warm, local):
    """Planned to retire, then Paperclip acquires the lease again before the
    destroy: the row is no candidate any more. No hold says so (its run is not
    live, the task is bound elsewhere) and the proof's fingerprint has not moved
    (same lease, run, receipts and save): only the gate's own re-judging under the
    lock stands between this sandbox and the destroy."""
    lease, r = _record(warm)
    _attest(r)
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.RETIRING)
    m.EnvironmentLease.objects.filter(pk=lease.pk).update(status=m.LeaseStatus.ACTIVE)

    with pytest.raises(DestroyRefused, match="no longer a candidate"):
        _retire(r, local)
    assert local.count("destroy") == 0
    assert local.count("get") == 0  # refused before any provider call
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.ACTIVE


def test_with_the_lease_still_a_candidate_the_same_attestation_retires(warm, local):
    """The control for (c): the same setup without the re-acquisition destroys."""
    lease, r = _record(warm)
    _attest(r)
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.RETIRING)
    _retire(r, local)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1
