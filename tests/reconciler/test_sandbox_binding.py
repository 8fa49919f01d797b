"""A record acts on one sandbox and judges that one (issue 22 item 1, DOMAIN §2.2-2.3).

The attack: sandbox A is compared clean and approved in manual mode; then its
lease row is re-sent naming sandbox B, and a new `active` lease with a running
run and a writer takes A. Before the fix the next pass re-judged the lease (now
describing B), found no hold, kept the old approval (the fingerprint held no
sandbox id) and DELETEd A, which was in use.

Every depth refuses on its own: the fingerprint names the provider and sandbox
(a move voids every compare, export, attestation, approval and notice); the
gate judges the sandbox it destroys from every lease row naming it; the planner
and the listing close a record whose lease names another sandbox as
`dismissed` and list the new sandbox on its own. Ingest and the mirror refuse a
move that is not newer (tests/ingest/test_lease_move.py,
tests/mirror/test_lease_move.py).
"""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import actions
from sandboxes import models as m
from sandboxes.proof import fingerprint_of, proof_for
from sandboxes.reconciler.candidates import judge_lease_locked
from sandboxes.reconciler.gate import DestroyRefused, authorize_destroy
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.reconciler.plan import Action, Plan, plan_step
from sandboxes.reconciler.steps import retire_sandbox
from sandboxes.reconciler.worker import Worker
from sandboxes.roles import OPERATORS
from sandboxes.rules.proof import void_reason
from tests import factories as f

from .conftest import SAVED, claim, retirement_of
from .world import abandoned_warm, event, load_events, reconcile_once, record

pytestmark = pytest.mark.django_db

LEASE_MOVED = "the lease now names another sandbox"


def test_a_lease_re_pointed_to_another_sandbox_never_destroys_the_one_in_use(provider, tmp_path):
    """The attack end to end, through load_events and reconcile --once, on the
    simulator over loopback and on the local provider. Fails on main before the
    fix: sandbox A was deleted and the record closed `retired`."""
    a = provider.make(SAVED, files_root="workspace")
    ids, events = abandoned_warm(provider.name, a, saved=SAVED, mode="manual")
    load_events(tmp_path, events)
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL, (r.stage, r.last_error)
    actions.approve(r.pk, actor=f.UserFactory(groups=[OPERATORS]), reason="compare is clean")

    # The lease row is re-sent naming B (a newer report, which ingest accepts),
    # with a stop receipt for B; a new active lease with a running run and a
    # writer takes A.
    b = provider.make({"other.txt": b"b\n"}, files_root="workspace")
    run3, ws3, lease3 = (str(uuid.uuid4()) for _ in range(3))
    at = "2026-11-30T11:00:00Z"
    load_events(
        tmp_path,
        [
            event("lease.upserted", {**ids["lease_data"], "provider_lease_id": b}, at=at),
            event(
                "receipt.recorded",
                {
                    "lease_id": ids["lease"],
                    "kind": "termination",
                    "state": "stopped",
                    "run_id": ids["run"],
                    "provider_lease_id": b,
                    "confirmed_at": at,
                },
                at=at,
            ),
            event("run.upserted", {"run_id": run3, "issue_id": ids["issue"], "status": "running"}),
            event(
                "workspace.upserted",
                {
                    "workspace_id": ws3,
                    "issue_id": ids["issue"],
                    "save_state": "saving",
                    "writer_run_id": run3,
                },
            ),
            event(
                "lease.upserted",
                {
                    **ids["lease_data"],
                    "lease_id": lease3,
                    "status": "active",
                    "run_id": run3,
                    "workspace_id": ws3,
                    "acquired_at": "2026-11-30T10:30:00Z",
                },
                at=at,
            ),
        ],
    )
    provider.client.start(a)  # the new lease's run is using it

    reconcile_once()

    r.refresh_from_db()
    assert provider.deletes(a) == []
    assert provider.state(a) == "started"
    assert r.stage == m.Stage.DISMISSED
    assert r.closed_reason == LEASE_MOVED
    (moved,) = m.AuditEvent.objects.filter(action="lease.sandbox_moved")
    assert (moved.before["provider_lease_id"], moved.after["provider_lease_id"]) == (a, b)
    # The sandbox the lease names now is listed on its own, judged by its own
    # facts (the task has a live run again), and the old approval counts for
    # nothing there.
    (new,) = m.Retirement.objects.filter(provider_lease_id=b)
    assert new.lease_id == lease.pk
    assert new.stage == m.Stage.HELD
    assert m.HoldCode.ISSUE_RUN_ACTIVE in new.holds
    assert not new.receipts.exists()

    reconcile_once()
    assert provider.deletes(a) == []
    assert provider.deletes(b) == []
    assert not m.Retirement.objects.filter(stage=m.Stage.RETIRED).exists()


# --- each depth on its own ------------------------------------------------------------


def _move(lease, sandbox_id):
    """The lease row now names another sandbox (as ingest or the mirror would
    write a newer report)."""
    m.EnvironmentLease.objects.filter(pk=lease.pk).update(provider_lease_id=sandbox_id)
    lease.refresh_from_db()


def _approved(warm):
    lease = warm(
        status=m.LeaseStatus.FAILED,
        env=f.EnvironmentFactory(retirement_mode=m.RetirementMode.MANUAL),
    )
    sync_retirements()
    r = retirement_of(lease)
    f.ReceiptFactory(
        lease=lease,
        retirement=r,
        kind=m.ReceiptKind.SALVAGE_COMPARE,
        state=None,
        actor="system",
        payload={"clean": True, "added": [], "changed": [], "deleted": []},
    )
    f.ReceiptFactory(
        lease=lease,
        retirement=r,
        kind=m.ReceiptKind.APPROVAL,
        state=None,
        actor="op",
        payload={"user": "op", "reason": "ok"},
    )
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.AWAITING_APPROVAL)
    r.refresh_from_db()
    return lease, r


def test_the_fingerprint_names_the_provider_and_the_sandbox(warm):
    lease, r = _approved(warm)
    before = fingerprint_of(r)
    assert (before["provider"], before["sandbox_id"]) == (lease.provider, lease.provider_lease_id)
    assert proof_for(r)

    _move(lease, "sandbox-b")

    after = fingerprint_of(r)
    assert after["sandbox_id"] == "sandbox-b"
    assert void_reason(before, after, "compare") == (
        "proof void: the lease now names another sandbox after the compare"
    )
    proof = proof_for(r)
    assert not proof
    assert proof.void == "proof void: the lease now names another sandbox after the compare"


def test_an_approval_and_a_notice_are_void_once_the_lease_moved(warm):
    """An approval is bound to its proof's fingerprint, a notice to its proof: both
    count for nothing once the lease names another sandbox."""
    from sandboxes.proof import approvals_of
    from sandboxes.rules.next_step import notice_valid
    from sandboxes.rules.proof import has_approval, proof_key

    lease, r = _approved(warm)
    proof = proof_for(r)
    assert has_approval(r, proof, approvals_of(r))
    notice_proof = proof_key(proof)
    _move(lease, "sandbox-b")
    moved = proof_for(r)
    assert not has_approval(r, moved, approvals_of(r))
    assert not notice_valid(timezone.now(), notice_proof, proof_key(moved))


def test_the_gate_refuses_a_candidate_whose_lease_names_another_sandbox(warm):
    lease, r = _approved(warm)
    _move(lease, "sandbox-b")
    f.stop_receipt(lease)  # a stop receipt for B: the lease is a clean candidate there
    cand = judge_lease_locked(lease.pk)
    assert cand.kind == m.RetirementKind.ABANDONED_WARM
    with pytest.raises(DestroyRefused, match=LEASE_MOVED):
        authorize_destroy(r, cand, timezone.now())


def test_the_gate_judges_every_lease_row_naming_the_sandbox_it_destroys(warm):
    """Even with facts that show no hold, another lease using the record's sandbox
    refuses the destroy: the gate reads the rows naming that sandbox itself."""
    lease, r = _approved(warm)
    cand = judge_lease_locked(lease.pk)
    assert authorize_destroy(r, cand, timezone.now())
    f.EnvironmentLeaseFactory(
        environment=lease.environment,
        provider=lease.provider,
        provider_lease_id=lease.provider_lease_id,
        status=m.LeaseStatus.ACTIVE,
        acquired_at=lease.acquired_at - timedelta(hours=1),
    )
    # `cand` was judged before the other row arrived: its facts say nothing of it.
    with pytest.raises(DestroyRefused, match="sandbox_shared"):
        authorize_destroy(r, cand, timezone.now())


def test_the_destroy_path_refuses_after_a_move(warm, local):
    lease, r = _approved(warm)
    sandbox_a = lease.provider_lease_id
    _move(lease, "sandbox-b")
    f.stop_receipt(lease)
    plan = Plan(Action.RETIRE, r.pk, r.environment, sandbox_a)
    with pytest.raises(DestroyRefused):
        retire_sandbox(plan, claim(r), Worker(provider_for=lambda e: local))
    assert local.count("destroy") == 0


def test_the_planner_dismisses_a_record_whose_lease_names_another_sandbox(warm, local):
    lease, r = _approved(warm)
    _move(lease, "sandbox-b")
    f.stop_receipt(lease)

    plan = plan_step(r.pk, claim(r), Worker(provider_for=lambda e: local))

    assert plan is None
    r.refresh_from_db()
    assert r.stage == m.Stage.DISMISSED
    assert r.closed_reason == LEASE_MOVED
    assert local.calls == []


def test_the_planner_stops_a_sandbox_it_started_before_closing(warm, local):
    lease, r = _approved(warm)
    m.Retirement.objects.filter(pk=r.pk).update(started_for_salvage=True)
    _move(lease, "sandbox-b")
    plan = plan_step(r.pk, claim(r), Worker(provider_for=lambda e: local))
    assert plan.action == Action.STOP_BEFORE_WAIT
    assert plan.sandbox_id == r.provider_lease_id  # the sandbox it started, not B


def test_the_listing_dismisses_the_old_record_and_lists_the_new_sandbox(warm):
    lease, r = _approved(warm)
    sandbox_a = lease.provider_lease_id
    _move(lease, "sandbox-b")
    f.stop_receipt(lease)

    result = sync_retirements()

    r.refresh_from_db()
    assert r.stage == m.Stage.DISMISSED
    assert r.closed_reason == LEASE_MOVED
    audit = m.AuditEvent.objects.get(action="retirement.dismissed", object_id=str(r.pk))
    assert audit.reason == LEASE_MOVED
    assert result.dismissed == 1
    (new,) = m.Retirement.objects.open()
    assert (new.lease_id, new.provider_lease_id) == (lease.pk, "sandbox-b")
    assert not m.Retirement.objects.open().filter(provider_lease_id=sandbox_a).exists()


def test_the_policy_preview_counts_the_moved_record_as_dismissed(warm):
    from sandboxes.reconciler.preview import Policy, preview

    lease, r = _approved(warm)
    _move(lease, "sandbox-b")
    result = preview(lease.environment, Policy.of(lease.environment))
    assert str(r.pk) in {str(pk) for pk in result.proposed.ids("dismissed")}
