"""Paperclip's own proof, one to one (issue 23 items 2 and 3, DOMAIN §2.5).

The judge is paperclipai/paperclip:
`server/src/services/remote-execution-termination.ts` @ 555fcfccfda1f549ea1c84f559e9133a9a1f5fb5
(`hasRemoteTerminationReceipt`, lines 24-35, and `remoteTerminationReceipt`, 9-22) and
`server/src/services/sandbox-stop-and-retain.ts` @ c5df62352fd47c54520e7a39d56245fb2f7e5fc8
(`hasConfirmedSandboxStopAndRetain`, lines 15-43). The receipts are built in
the shapes Paperclip writes them (`settleStopOnlyCleanup`, lines 98-128: the
two receipts share `confirmedAt`; a plugin provider's stop names its plugin).

One lease satisfies both predicates; each case breaks one condition alone. For
every termination condition the SQL listing (`has_stop_receipt`), the pure
predicate, the preservation source and the destroy gate all refuse; for every
stop-and-retain condition the pure predicate and the preservation source do.
Fails on main before the fix: the listing took a bare receipt and ignored the
lease's cleanup_status and released_at, a stop-and-retain receipt alone counted
as a stop, and the preservation source took any stop-and-retain receipt.
"""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.reconciler.candidates import judge_lease_locked, judge_leases
from sandboxes.reconciler.gate import DestroyRefused, authorize_destroy
from sandboxes.reconciler.predicates import (
    lease_view,
    receipt_view,
    stop_and_retain_refusals,
    stop_refusals,
)
from sandboxes.reconciler.preservation import preservation_sources
from sandboxes.rules import paperclip as rules
from tests import factories as f

pytestmark = pytest.mark.django_db

COMPANY = uuid.UUID("7c4f9d3e-0000-4000-8000-000000000001")
PLUGIN = "paperclip-plugin-daytona"


def _iso(at):
    return at.isoformat().replace("+00:00", "Z")


def build(*, writer, lease=None, termination=None, stop=None, no_termination=False, no_stop=False):
    """The valid case, with the given fields replaced: (lease, [receipts])."""
    now = timezone.now()
    released = now - timedelta(hours=2)
    confirmed = released - timedelta(seconds=5)
    env = f.EnvironmentFactory(provider="daytona")
    run = f.HeartbeatRunFactory(status=m.RunStatus.CANCELLED)
    fields = {
        "environment": env,
        "issue": run.issue,
        "heartbeat_run": run,
        "execution_workspace": f.ExecutionWorkspaceFactory(
            issue=run.issue, writer_run=run if writer else None
        ),
        "status": m.LeaseStatus.RELEASED,
        "lease_policy": m.LeasePolicy.REUSE_BY_ENVIRONMENT,
        "provider": "daytona",
        "company_id": COMPANY,
        "acquired_at": now - timedelta(hours=3),
        "released_at": released,
        "expires_at": None,
        "cleanup_status": m.CleanupStatus.SUCCESS,
        "metadata": {"pluginId": PLUGIN, "remoteCwd": "workspace"},
        "bind": False,
        **(lease or {}),
    }
    row = f.EnvironmentLeaseFactory(**fields)
    f.rebind_to_new_workspace(row)  # the task moved on: an abandoned warm sandbox
    base = {
        "companyId": str(COMPANY),
        "runId": str(run.pk),
        "leaseId": str(row.pk),
        "provider": row.provider,
        "providerLeaseId": row.provider_lease_id,
        "confirmedAt": _iso(confirmed),
        "source": rules.MIRROR_SOURCE,
    }
    receipts = []
    if not no_termination:
        spec = {"payload": {**base, "schema": rules.TERMINATION_SCHEMA, "state": "stopped"}}
        spec.update(termination or {})
        receipts.append(_receipt(row, m.ReceiptKind.TERMINATION, confirmed, spec))
    if not no_stop:
        payload = {
            **base,
            "schema": rules.STOP_AND_RETAIN_SCHEMA,
            "requestId": "sar-1",
            "pluginId": PLUGIN,
            "method": "environmentStopLease",
        }
        spec = {"payload": payload, "state": m.TerminationState.STOPPED}
        spec.update(stop or {})
        receipts.append(_receipt(row, m.ReceiptKind.STOP_AND_RETAIN, confirmed, spec))
    return row, receipts


def _receipt(lease, kind, confirmed, spec):
    spec = dict(spec)
    payload = spec.pop("payload")
    for key, value in spec.pop("payload_changes", {}).items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    values = {
        "lease": lease,
        "run": lease.heartbeat_run,
        "kind": kind,
        "state": m.TerminationState.STOPPED,
        "schema": payload["schema"],
        "provider_lease_id": lease.provider_lease_id,
        "company_id": COMPANY,
        "confirmed_at": confirmed,
        "request_id": f"req-{uuid.uuid4().hex[:8]}",
        "payload": payload,
        "actor": "paperclip",
        **spec,
    }
    return f.ReceiptFactory(**values)


def _other_run():
    return f.HeartbeatRunFactory(status=m.RunStatus.CANCELLED)


# Each termination condition broken alone (hasRemoteTerminationReceipt).
TERMINATION_CASES = {
    "no released_at (line 29)": {"lease": {"released_at": None}},
    "cleanup not success (line 29)": {"lease": {"cleanup_status": m.CleanupStatus.PENDING}},
    "status pending_cleanup (line 30)": {"lease": {"status": m.LeaseStatus.PENDING_CLEANUP}},
    "no termination receipt (line 30)": {"no_termination": True},
    "another schema (line 31)": {"termination": {"schema": "paperclip.remote-termination.v0"}},
    "another company (line 32)": {"termination": {"company_id": uuid.uuid4()}},
    "another run (line 32)": {"termination": {"run": "other"}},
    "another provider (line 33)": {"termination": {"payload_changes": {"provider": "e2b"}}},
    "provider local, mirrored (line 12)": {"lease": {"provider": "local"}},
    "another sandbox (line 13)": {"termination": {"provider_lease_id": "sbx-elsewhere"}},
    "state destroyed, not stopped": {"termination": {"state": m.TerminationState.DESTROYED}},
}

# Each stop-and-retain condition broken alone (hasConfirmedSandboxStopAndRetain).
STOP_CASES = {
    "no acquired_at (line 16)": {"lease": {"acquired_at": None}},
    "expired (line 20)": {"lease": {"expires_at": timezone.now() - timedelta(minutes=1)}},
    "no stop-and-retain receipt (line 22)": {"no_stop": True},
    "lease failed, not released (line 25)": {"lease": {"status": m.LeaseStatus.FAILED}},
    "no stopped termination beside it (line 26)": {"no_termination": True},
    "a stop-only intent pending (line 26)": {
        "lease": {"metadata": {"pluginId": PLUGIN, "sandboxStopAndRetain": {}}}
    },
    "an export-resume pending (line 26)": {
        "lease": {"metadata": {"pluginId": PLUGIN, "nativeWorkspaceExportResume": None}}
    },
    "cleanup in flight (line 27)": {
        "lease": {"metadata": {"pluginId": PLUGIN, "pendingCleanupInFlight": True}}
    },
    "another schema (line 28)": {"stop": {"schema": "paperclip.sandbox-stop-and-retain.v1"}},
    "another company (line 29)": {"stop": {"company_id": uuid.uuid4()}},
    "another run (line 29)": {"stop": {"run": "other"}},
    "another provider (line 30)": {"stop": {"payload_changes": {"provider": "e2b"}}},
    "no request id (line 32)": {"stop": {"payload_changes": {"requestIdMissing": True}}},
    "confirmed at another time (line 33)": {"stop": {"confirmed": "later"}},
    "confirmed after the release (line 35)": {"stop": {"confirmed": "after release"}},
    "a built-in's method for a plugin provider (line 41)": {
        "stop": {"payload_changes": {"method": "builtin.stopLease"}}
    },
    "another plugin (line 42)": {"stop": {"payload_changes": {"pluginId": "another-plugin"}}},
}


def _build_case(case: dict, *, writer: bool):
    case = {k: (dict(v) if isinstance(v, dict) else v) for k, v in case.items()}
    for part in ("termination", "stop"):
        spec = case.get(part)
        if spec is None:
            continue
        if spec.get("run") == "other":
            spec["run"] = _other_run()
            spec.setdefault("payload_changes", {})["runId"] = str(spec["run"].pk)
        when = spec.pop("confirmed", None)
        if when is not None:
            case["_shift"] = (part, when)
    shift = case.pop("_shift", None)
    lease, receipts = build(writer=writer, **case)
    if shift is not None:
        # A receipt confirmed at another moment than its pair, written afresh
        # (receipts are append-only: the shifted one replaces nothing, it is the only one).
        part, when = shift
        at = lease.released_at + timedelta(minutes=5) if when == "after release" else None
        return _rebuilt_with_shifted_stop(writer, at)
    return lease, receipts


def _rebuilt_with_shifted_stop(writer, after_release_at):
    """A valid lease whose stop-and-retain receipt alone moves in time; or, with
    `after_release_at`, both receipts confirmed then (the pair still matches, as
    Paperclip's settle writes it, but after the lease's release)."""
    lease, _ = build(writer=writer, no_stop=True, no_termination=True)
    base = {
        "companyId": str(COMPANY),
        "runId": str(lease.heartbeat_run_id),
        "leaseId": str(lease.pk),
        "provider": lease.provider,
        "providerLeaseId": lease.provider_lease_id,
        "source": rules.MIRROR_SOURCE,
    }
    first = after_release_at or (lease.released_at - timedelta(seconds=5))
    moved = after_release_at or (first + timedelta(seconds=1))
    termination = _receipt(
        lease,
        m.ReceiptKind.TERMINATION,
        first,
        {
            "payload": {
                **base,
                "schema": rules.TERMINATION_SCHEMA,
                "state": "stopped",
                "confirmedAt": _iso(first),
            }
        },
    )
    payload = {
        **base,
        "schema": rules.STOP_AND_RETAIN_SCHEMA,
        "requestId": "sar-1",
        "pluginId": PLUGIN,
        "method": "environmentStopLease",
        "confirmedAt": _iso(moved),
    }
    stop = _receipt(lease, m.ReceiptKind.STOP_AND_RETAIN, moved, {"payload": payload})
    return lease, [termination, stop]


def _has_stop_receipt(lease) -> bool:
    return judge_leases([lease.pk])[lease.pk].facts.has_stop_receipt


def _proven_record(lease):
    r = f.RetirementFactory(lease=lease, kind=m.RetirementKind.ABANDONED_WARM)
    f.ReceiptFactory(
        lease=lease,
        retirement=r,
        kind=m.ReceiptKind.SALVAGE_COMPARE,
        state=None,
        actor="system",
        payload={"clean": True, "added": [], "changed": [], "deleted": []},
    )
    return r


def test_the_valid_lease_satisfies_every_judge():
    lease, receipts = build(writer=False)
    views = [receipt_view(r) for r in receipts]
    assert rules.stopped_termination_refusal(lease_view(lease), views) == ""
    assert stop_and_retain_refusals([lease], timezone.now()) == {lease.pk: ""}
    assert _has_stop_receipt(lease)
    r = _proven_record(lease)
    assert authorize_destroy(r, judge_lease_locked(lease.pk), timezone.now())

    source, _ = build(writer=True)
    assert source.pk in {x.pk for x in preservation_sources()}


@pytest.mark.parametrize("name", sorted(TERMINATION_CASES))
def test_each_termination_condition_is_refused_by_every_judge(name):
    lease, receipts = _build_case(TERMINATION_CASES[name], writer=False)
    why = rules.stopped_termination_refusal(lease_view(lease), [receipt_view(r) for r in receipts])
    assert why, f"the pure predicate accepted: {name}"
    assert not _has_stop_receipt(lease), f"the SQL listing accepted: {name}"
    r = _proven_record(lease)
    with pytest.raises(DestroyRefused):
        authorize_destroy(r, judge_lease_locked(lease.pk), timezone.now())

    source, _ = _build_case(TERMINATION_CASES[name], writer=True)
    assert source.pk not in {x.pk for x in preservation_sources()}, name
    # The record's hold says which condition failed, where a receipt exists.
    if not TERMINATION_CASES[name].get("no_termination"):
        assert stop_refusals([lease.pk])[lease.pk] == why


@pytest.mark.parametrize("name", sorted(STOP_CASES))
def test_each_stop_and_retain_condition_is_refused(name):
    source, _ = _build_case(STOP_CASES[name], writer=True)
    refused = stop_and_retain_refusals([source], timezone.now())[source.pk]
    assert refused, f"the pure predicate accepted: {name}"
    assert source.pk not in {x.pk for x in preservation_sources()}, name


def test_the_words_name_the_condition():
    lease, _ = _rebuilt_with_shifted_stop(True, None)
    lease.refresh_from_db()
    late, _ = _rebuilt_with_shifted_stop(True, lease.released_at + timedelta(minutes=5))
    words = stop_and_retain_refusals([lease, late], timezone.now())
    assert words[lease.pk] == (
        "the stop-and-retain receipt was confirmed at another time than the termination"
    )
    assert words[late.pk] == "the stop-and-retain receipt was confirmed after the release"
    bare, _ = build(writer=False, lease={"cleanup_status": m.CleanupStatus.PENDING})
    assert stop_refusals([bare.pk])[bare.pk] == (
        "the lease's cleanup_status is pending, not success"
    )


def test_the_consoles_own_local_provider_keeps_its_receipts():
    """Paperclip never issues a termination receipt for provider `local`
    (remote-execution-termination.ts line 12); the console's embedded local
    provider, fed through ingest, is not Paperclip's: its receipts count."""
    mirrored, _ = build(writer=False, lease={"provider": "local"})
    ingested, _ = build(
        writer=False,
        lease={"provider": "local"},
        termination={"payload_changes": {"source": None, "provider": None}},
    )
    assert not _has_stop_receipt(mirrored)
    assert _has_stop_receipt(ingested)


def test_a_lease_with_no_company_is_judged_without_it():
    """An ingest client that sends no company is judged without it; a lease that
    has one binds its receipts to it."""
    lease, _ = build(
        writer=False,
        lease={"company_id": None},
        termination={"company_id": None},
    )
    assert _has_stop_receipt(lease)
    bound, _ = build(writer=False, termination={"company_id": None})
    assert not _has_stop_receipt(bound)
