"""Proof is bound to what it saw (issue 10 item 2, DOMAIN §2.3).

Every compare, export, attestation and approval receipt records a fingerprint
(lease id, the lease's run id, the newest receipt Paperclip reported for the
sandbox, the workspace's saved_at). The destroy gate recomputes it under the row
lock; any change voids the proof: the record goes back to compare, the history
says why in plain words, and nothing is destroyed. An approval counts only for
the proof it approved.

Here the database half: what the sandbox is now (`sandboxes/proof.py`), the gate
under the row lock, the planner, the pages. The rule itself, every kind of
proof voided on every field, approvals bound to their proof, runs on plain data
in tests/rules/test_proof.py.
"""

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sandboxes import actions
from sandboxes import models as m
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.roles import OPERATORS
from tests import factories as f

from .conftest import SAVED, retire, retirement_of
from .world import abandoned_warm, event, load_events, reconcile_once, record

pytestmark = pytest.mark.django_db

RESUMED = "proof void: the lease was resumed after the compare"


def _operator():
    return f.UserFactory(groups=[OPERATORS])


# --- end to end: load_events + reconcile --once, simulator and local ----------------------


def test_an_approval_never_destroys_on_a_compare_the_resumed_lease_outdated(provider, tmp_path):
    sid = provider.make(SAVED, files_root="workspace")
    ids, events = abandoned_warm(provider.name, sid, saved=SAVED, mode="manual")
    load_events(tmp_path, events)
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])

    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL, (r.stage, r.last_error)
    first = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert first.payload["clean"] is True
    assert first.payload["fingerprint"]["run_id"] == ids["run"]
    operator = _operator()
    actions.approve(r.pk, actor=operator, reason="the compare is clean")

    # Before the next pass, the same lease row is resumed by a new run, which writes
    # files, fails, and is stopped by Paperclip.
    run2 = str(uuid.uuid4())
    load_events(
        tmp_path,
        [
            event(
                "run.upserted",
                {"run_id": run2, "issue_id": ids["issue"], "status": "running"},
                at="2026-11-30T11:00:00Z",
            ),
            event(
                "lease.upserted",
                {**ids["lease_data"], "status": "active", "run_id": run2},
                at="2026-11-30T11:00:00Z",
            ),
        ],
    )
    provider.write(sid, "workspace/notes/after-resume.md", b"written by the resumed run\n")
    provider.client.stop(sid)
    load_events(
        tmp_path,
        [
            event(
                "run.upserted",
                {"run_id": run2, "issue_id": ids["issue"], "status": "failed"},
                at="2026-11-30T11:10:00Z",
            ),
            event(
                "lease.upserted",
                {**ids["lease_data"], "status": "failed", "run_id": run2},
                at="2026-11-30T11:10:00Z",
            ),
            event(
                "receipt.recorded",
                {
                    "lease_id": ids["lease"],
                    "kind": "termination",
                    "state": "stopped",
                    "run_id": run2,
                    "provider_lease_id": sid,
                    "confirmed_at": "2026-11-30T11:10:00Z",
                },
                at="2026-11-30T11:10:00Z",
            ),
        ],
    )

    reconcile_once()

    r.refresh_from_db()
    assert provider.deletes(sid) == []
    assert provider.state(sid) == "stopped"
    (void,) = m.AuditEvent.objects.filter(action="retirement.proof_void", object_id=str(r.pk))
    assert void.reason == RESUMED
    assert void.after["receipt"] == str(first.pk)
    # It compared again, found the resumed run's file, exported it, and waits for
    # an approval of THAT proof: the old approval does not count.
    compares = list(r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).order_by("created_at"))
    assert len(compares) == 2
    assert [x["path"] for x in compares[1].payload["added"]] == ["notes/after-resume.md"]
    assert compares[1].payload["fingerprint"]["run_id"] == run2
    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    assert [x["path"] for x in export.payload["files"]] == ["notes/after-resume.md"]
    assert r.stage == m.Stage.AWAITING_APPROVAL, (r.stage, r.last_error)

    # The operator sees it, in plain words, on the receipt that shows it.
    from django.test import Client

    client = Client()
    client.force_login(operator)
    body = client.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).content.decode()
    assert RESUMED in body
    assert "Approve retirement" in body  # a new approval is asked for

    # A new approval of the new proof converges: the sandbox is retired once.
    actions.approve(r.pk, actor=operator, reason="the export has the resumed run's file")
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    assert len(provider.deletes(sid)) == 1


# --- the gate itself: recomputed under the lock at destroy time -----------------------


def _proven(warm, *, mode=m.RetirementMode.AUTO, proof="compare"):
    lease = warm(status=m.LeaseStatus.FAILED, env=f.EnvironmentFactory(retirement_mode=mode))
    sync_retirements()
    r = retirement_of(lease)
    if proof == "compare":
        f.ReceiptFactory(
            lease=lease,
            retirement=r,
            kind=m.ReceiptKind.SALVAGE_COMPARE,
            state=None,
            actor="system",
            payload={"clean": True, "added": [], "changed": [], "deleted": []},
        )
    else:
        f.ReceiptFactory(
            lease=lease,
            retirement=r,
            kind=m.ReceiptKind.OPERATOR_ATTESTED,
            state=None,
            actor="admin",
            payload={"typed_sandbox_id": r.provider_lease_id, "reason": "scratch", "user": "a"},
        )
    if mode == m.RetirementMode.MANUAL:
        f.ReceiptFactory(
            lease=lease,
            retirement=r,
            kind=m.ReceiptKind.APPROVAL,
            state=None,
            actor="op",
            payload={"user": "op", "reason": "ok"},
        )
        m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.AWAITING_APPROVAL)
    return lease, r


def _resume(lease):
    """The same lease row resumed by a new run, which failed and was stopped."""
    run = f.HeartbeatRunFactory(issue=lease.issue, status=m.RunStatus.FAILED)
    lease.heartbeat_run = run
    lease.save(update_fields=["heartbeat_run"])
    f.stop_receipt(lease, run=run)


def _newer_stop(lease):
    f.stop_receipt(lease, confirmed_at=timezone.now() + timedelta(seconds=1))


def _newer_save(lease):
    ws = lease.execution_workspace
    ws.saved_at = timezone.now()
    ws.save(update_fields=["saved_at"])


MOVES = {
    "resumed by a new run": (_resume, "proof void: the lease was resumed after the {}"),
    "a newer stop receipt": (
        _newer_stop,
        "proof void: Paperclip reported a newer stop receipt after the {}",
    ),
    "a newer save": (_newer_save, "proof void: the workspace was saved again after the {}"),
}


@pytest.mark.parametrize(
    ("proof", "mode"),
    [("compare", m.RetirementMode.AUTO), ("attestation", m.RetirementMode.MANUAL)],
)
@pytest.mark.parametrize("move", sorted(MOVES))
def test_the_gate_voids_a_proof_whose_sandbox_moved_on(move, proof, mode, warm, local):
    """Each move changes what the gate reads of the sandbox now (fingerprint_of),
    and a void proof sends the record back to compare in manual mode too, its
    approval notwithstanding. The rule voids every kind of proof on every field
    that moved, on plain data:
    tests/rules/test_proof.py::test_a_proof_is_void_once_what_it_saw_moved_on."""
    lease, r = _proven(warm, mode=mode, proof=proof)
    change, words = MOVES[move]
    change(lease)

    retire(r, local)

    assert local.count("destroy") == 0
    assert r.stage == m.Stage.COMPARING
    assert r.next_attempt_at is not None
    (void,) = m.AuditEvent.objects.filter(action="retirement.proof_void", object_id=str(r.pk))
    assert void.reason == words.format(proof)
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.FAILED
    # Said once, not on every refusal.
    retire(r, local)
    assert m.AuditEvent.objects.filter(action="retirement.proof_void").count() == 1
    assert local.count("destroy") == 0


@pytest.mark.parametrize("mode", [m.RetirementMode.AUTO, m.RetirementMode.MANUAL])
def test_the_gate_destroys_when_nothing_moved(mode, warm, local):
    lease, r = _proven(warm, mode=mode)
    retire(r, local)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1


def test_the_consoles_own_stop_after_an_inspection_does_not_void_the_proof(warm, local):
    lease, r = _proven(warm)
    f.ReceiptFactory(
        lease=lease,
        retirement=r,
        kind=m.ReceiptKind.TERMINATION,
        actor="system",
        confirmed_at=timezone.now() + timedelta(seconds=1),
        payload={"by": "console"},
    )
    retire(r, local)
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1


def test_approving_a_void_proof_is_refused_in_plain_words(warm):
    lease, r = _proven(warm)
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.AWAITING_APPROVAL)
    _resume(lease)
    with pytest.raises(actions.ActionRefused, match=RESUMED):
        actions.approve(r.pk, actor=_operator(), reason="looks fine")
    assert not m.Receipt.objects.filter(kind=m.ReceiptKind.APPROVAL).exists()


def test_the_planner_sends_a_void_proof_back_to_compare(warm, local, reconcile):
    """The pass itself (not only the gate) compares again after a resume."""
    lease, r = _proven(warm)
    _resume(lease)
    reconcile()
    r.refresh_from_db()
    assert m.AuditEvent.objects.get(action="retirement.proof_void").reason == RESUMED
    compares = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).order_by("created_at")
    assert compares.count() == 2
    assert compares.last().payload["fingerprint"]["run_id"] == str(lease.heartbeat_run_id)
    # The new compare is clean (the run wrote nothing): retired on it, once.
    assert r.stage == m.Stage.RETIRED
    assert local.count("destroy") == 1


def test_the_page_computes_the_same_fingerprint_as_the_gate(warm):
    """The sandbox page binds from the rows it loaded; the gate queries: both agree."""
    from sandboxes.proof import fingerprint_from, fingerprint_of

    lease, r = _proven(warm)
    _resume(lease)
    f.ReceiptFactory(lease=lease, retirement=r, kind=m.ReceiptKind.TERMINATION, actor="system")
    receipts = list(m.Receipt.objects.filter(provider_lease_id=r.provider_lease_id))
    lease = m.EnvironmentLease.objects.select_related("execution_workspace").get(pk=lease.pk)
    assert fingerprint_from(r, lease, receipts) == fingerprint_of(r)
    assert fingerprint_of(r)["run_id"] == str(lease.heartbeat_run_id)


@pytest.mark.parametrize("move", sorted(MOVES))
def test_every_kind_proved_by_a_receipt_refuses_a_destroy_on_a_void_proof(move, warm, local):
    """abandoned_warm, closed_restore_source and done_task_warm: the one destroy
    path refuses each of them once what the proof saw has moved on."""
    from .test_machine import _kind_leases

    leases = _kind_leases(warm)
    sync_retirements()
    change, words = MOVES[move]
    for lease in leases:
        r = retirement_of(lease)
        assert r is not None and r.kind != m.RetirementKind.RESUME_FAILED, lease
        f.ReceiptFactory(
            lease=lease,
            retirement=r,
            kind=m.ReceiptKind.SALVAGE_COMPARE,
            state=None,
            actor="system",
            payload={"clean": True, "added": [], "changed": [], "deleted": []},
        )
        change(lease)
        retire(r, local)
        assert r.stage == m.Stage.COMPARING, (r.kind, r.stage)
        void = m.AuditEvent.objects.get(action="retirement.proof_void", object_id=str(r.pk))
        assert void.reason == words.format("compare")
    assert {retirement_of(x).kind for x in leases} == {
        m.RetirementKind.ABANDONED_WARM,
        m.RetirementKind.CLOSED_RESTORE_SOURCE,
        m.RetirementKind.DONE_TASK_WARM,
    }
    assert local.count("destroy") == 0
