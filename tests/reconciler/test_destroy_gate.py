"""The destroy gate's own tests (issue 10 item 11): `authorize_destroy`
re-judges the lease under the lock, so a lease acquired again is refused there,
even with an operator's attestation.

Mutating the gate showed three changes no test noticed. Two were in the proof
rule (only the LATEST compare counts; only an explicit `clean: true` is clean):
their tests run on plain data in tests/rules/test_proof.py, with the mutations
that make them fail. The third is here:
- gate.py, authorize_destroy without `if cand is None or cand.kind is None:
  raise DestroyRefused(...)`: (c) fails (the sandbox is destroyed).
"""

import pytest

from sandboxes import models as m
from sandboxes.reconciler.gate import DestroyRefused
from sandboxes.reconciler.listing import sync_retirements
from tests import factories as f

from .conftest import retire, retirement_of

pytestmark = pytest.mark.django_db


def _record(warm):
    lease = warm(status=m.LeaseStatus.FAILED)
    sync_retirements()
    return lease, retirement_of(lease)


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
        retire(r, local)
    assert local.count("destroy") == 0
    assert local.count("get") == 0  # refused before any provider call
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.ACTIVE


def test_with_the_lease_still_a_candidate_the_same_attestation_retires(warm, local):
    """The control for (c): the same setup without the re-acquisition destroys."""
    lease, r = _record(warm)
    _attest(r)
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.RETIRING)
    retire(r, local)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1
