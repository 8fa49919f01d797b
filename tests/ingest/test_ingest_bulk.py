"""Ingest applies a batch set-based (issue 16 item 4): one statement per table
and kind of write, the ordering check and the release rule in SQL, whatever
the batch's size and mix."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.events import event, graph, uid
from sandboxes import models as m
from sandboxes.ingest import apply_events, validate_batch
from sandboxes.ingest.batch import UnitOfWork

pytestmark = pytest.mark.django_db

T0, T1, T2, T3 = (f"2026-11-01T0{h}:00:00Z" for h in range(4))


def ingest(events, source="test"):
    batch, errors = validate_batch({"events": events}, max_events=1000)
    assert not errors, errors
    return apply_events(source, batch)


def sandbox_events(n: int, at: str = T0) -> list[dict]:
    """Ten events of every lease-side type for one sandbox: a new graph, a
    release, a receipt, an intent, an export and a recovery action."""
    ids, events = graph(sandbox=f"sbx-{uid()[:8]}-{n}")
    for e in events:
        e["occurred_at"] = at
    sandbox = events[-1]["data"]["provider_lease_id"]
    return [
        *events,
        event("lease.released", {"lease_id": ids["lease"], "disposition": "destroy"}, at=at),
        event(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "state": "destroyed",
                "run_id": ids["run"],
                "provider_lease_id": sandbox,
                "confirmed_at": at,
            },
            at=at,
        ),
        event(
            "intent.upserted",
            {"intent_id": uid(), "lease_id": ids["lease"], "kind": "restore", "state": "pending"},
            at=at,
        ),
        event("export.upserted", {"export_id": uid(), "lease_id": ids["lease"], "state": "done"}),
        event(
            "recovery_action.upserted",
            {
                "action_id": uid(),
                "issue_id": ids["issue"],
                "kind": "workspace_restore",
                "status": "resolved",
                "lease_id": ids["lease"],
            },
            at=at,
        ),
    ]


def batch_of(size: int) -> list[dict]:
    events: list[dict] = []
    n = 0
    while len(events) < size:
        events.extend(sandbox_events(n))
        n += 1
    return events[:size]


def queries_for(events) -> int:
    with CaptureQueriesContext(connection) as captured:
        ingest(events)
    return len(captured)


def test_a_10_event_and_a_1000_event_batch_take_the_same_number_of_queries():
    small, large = batch_of(10), batch_of(1000)
    assert queries_for(small) == queries_for(large)
    assert m.EnvironmentLease.objects.count() == 1 + 100
    assert m.IngestedEvent.objects.count() == 1010


def test_the_same_holds_for_updates_of_rows_that_exist():
    small, large = batch_of(10), batch_of(1000)
    ingest(small)
    ingest(large)
    for e in small + large:
        e["id"] = f"again-{e['id']}"
        e["occurred_at"] = T1
    assert queries_for(small) == queries_for(large)
    assert set(m.EnvironmentLease.objects.values_list("status", flat=True)) == {"expired"}


def test_every_type_in_one_batch_lands():
    events = sandbox_events(0)
    assert ingest(events).accepted == 10
    lease = m.EnvironmentLease.objects.get()
    assert (lease.status, lease.disposition, lease.placeholder) == ("expired", "destroy", False)
    assert lease.released_at.isoformat() == "2026-11-01T00:00:00+00:00"
    receipt = m.Receipt.objects.get()
    assert (receipt.kind, receipt.state, receipt.lease_id) == ("termination", "destroyed", lease.pk)
    assert m.LeaseIntent.objects.get().request_id == events[7]["id"]
    assert m.PendingExport.objects.get().state == "done"
    action = m.RecoveryAction.objects.get()
    assert action.evidence == {"leaseId": str(lease.pk)}
    assert not m.Issue.objects.filter(placeholder=True).exists()


def test_out_of_order_inside_a_batch_the_newest_wins_field_by_field():
    ids, events = graph()
    run = {"run_id": ids["run"], "issue_id": ids["issue"]}
    lease = events[-1]["data"]
    events += [
        event("run.upserted", {**run, "status": "failed", "finished_at": T2}, at=T2),
        event("run.upserted", {**run, "status": "running", "started_at": T1}, at=T1),
        event("lease.released", {"lease_id": ids["lease"], "disposition": "keep_running"}, at=T3),
        event("lease.upserted", {**lease, "status": "active", "last_used_at": T1}, at=T1),
    ]
    ingest(events)
    row = m.HeartbeatRun.objects.get(pk=ids["run"])
    # The older event is skipped whole: its started_at never lands.
    assert (row.status, row.started_at, row.finished_at.isoformat()) == (
        "failed",
        None,
        "2026-11-01T02:00:00+00:00",
    )
    lease_row = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease_row.status, lease_row.disposition, lease_row.last_used_at) == (
        "retained",
        "keep_running",
        None,
    )
    assert lease_row.source_updated_at.isoformat() == "2026-11-01T03:00:00+00:00"


def test_a_batch_never_overwrites_newer_rows_and_fills_older_ones():
    old, newer = sandbox_events(0, at=T2), sandbox_events(1, at=T2)
    ingest(old + newer)
    stale = sandbox_events(2, at=T0)
    late = []
    for e in old[:5]:  # the same rows, dated before what is stored
        late.append({**e, "id": f"late-{e['id']}", "occurred_at": T1})
    late[3]["data"] = {**late[3]["data"], "status": "queued"}  # run.upserted
    fresh = []
    for e in newer[:5]:  # the same rows, dated after
        fresh.append({**e, "id": f"fresh-{e['id']}", "occurred_at": T3})
    fresh[3]["data"] = {**fresh[3]["data"], "status": "succeeded"}
    result = ingest(late + fresh + stale)
    assert result.accepted == 20
    assert m.HeartbeatRun.objects.get(pk=old[3]["data"]["run_id"]).status == "running"
    assert m.HeartbeatRun.objects.get(pk=newer[3]["data"]["run_id"]).status == "succeeded"
    # A late lease.upserted does not undo the stored release.
    assert m.EnvironmentLease.objects.get(pk=old[4]["data"]["lease_id"]).status == "expired"
    # The fresh one wins, without a release of its own in this batch.
    assert m.EnvironmentLease.objects.get(pk=newer[4]["data"]["lease_id"]).status == "active"
    assert m.EnvironmentLease.objects.count() == 3


def test_a_row_another_batch_inserted_after_the_read_is_updated_not_overwritten(monkeypatch):
    """The read saw no row (a concurrent batch inserted it since): the INSERT
    finds it, and the UPDATE writes only the columns this batch set, and only
    if this batch is not older."""
    ids, events = graph()
    ingest(events)
    m.Issue.objects.filter(pk=ids["issue"]).update(title="set elsewhere")
    real_load = UnitOfWork.load

    def blind_load(self, wanted):
        real_load(self, {k: v for k, v in wanted.items() if k is not m.Issue})

    monkeypatch.setattr(UnitOfWork, "load", blind_load)
    newer = event("issue.upserted", {"issue_id": ids["issue"], "status": "done"}, at=T1)
    older = event(
        "run.upserted", {"run_id": ids["run"], "issue_id": ids["issue"], "status": "failed"}
    )
    ingest([newer, older])
    issue = m.Issue.objects.get(pk=ids["issue"])
    assert (issue.status, issue.title, issue.placeholder) == ("done", "set elsewhere", False)

    stale = event(
        "issue.upserted", {"issue_id": ids["issue"], "status": "todo"}, at="2026-10-31T00:00:00Z"
    )
    ingest([stale])
    assert m.Issue.objects.get(pk=ids["issue"]).status == "done"


def test_the_superseded_flag_follows_bulk_writes():
    ids_a, first = graph(sandbox="sbx-shared")
    ids_b, second = graph(sandbox="sbx-shared")
    second[-1]["data"]["acquired_at"] = T1
    ingest(first + second)
    flags = dict(m.EnvironmentLease.objects.values_list("id", "superseded"))
    assert flags == {
        m.EnvironmentLease.objects.get(pk=ids_a["lease"]).pk: True,
        m.EnvironmentLease.objects.get(pk=ids_b["lease"]).pk: False,
    }
    again = {**first[-1], "id": "moved", "occurred_at": T2}
    again["data"] = {**again["data"], "acquired_at": T3}
    ingest([again])
    assert not m.EnvironmentLease.objects.get(pk=ids_a["lease"]).superseded
    assert m.EnvironmentLease.objects.get(pk=ids_b["lease"]).superseded


def receipt_for(ids: dict, sandbox: str, request_id: str, at: str = T0) -> dict:
    return event(
        "receipt.recorded",
        {
            "lease_id": ids["lease"],
            "kind": "stop_and_retain",
            "run_id": ids["run"],
            "provider_lease_id": sandbox,
            "confirmed_at": at,
            "request_id": request_id,
        },
    )


@pytest.mark.parametrize("receipts_first", ["in the same batch", "in an earlier batch"])
def test_early_receipts_naming_another_sandbox_are_named_once_each(receipts_first):
    # Checked from the batch when the lease row is new, from the database when
    # a placeholder row was there before: the same warnings, in confirmation order.
    ids, events = graph(sandbox="sbx-right")
    early = [
        receipt_for(ids, "sbx-wrong", "req-b", at=T2),
        receipt_for(ids, "sbx-right", "req-ok"),
        receipt_for(ids, "sbx-wrong", "req-a", at=T1),
        receipt_for(ids, "sbx-wrong", "req-a", at=T1),  # the same receipt again
    ]
    if receipts_first == "in the same batch":
        result = ingest(early + events)
    else:
        ingest(early)
        result = ingest(events)
    messages = [w.message for w in result.warnings if w.path == "data.provider_lease_id"]
    assert [m_.split()[2] for m_ in messages] == ["req-a", "req-b"], messages
    assert all("'sbx-wrong'" in m_ and "'sbx-right'" in m_ for m_ in messages)
    audited = m.AuditEvent.objects.filter(action="receipt.sandbox_mismatch")
    assert audited.count() == 2
    assert m.Receipt.objects.count() == 3


def test_the_superseded_refresh_is_planned_for_the_table_as_it_is_now():
    # Migration 0015. The test runs in one transaction, like a load_events file:
    # ANALYZE never sees these rows. The trigger first runs for a hundred
    # sandboxes on a nearly empty table (where a scan is the cheaper plan);
    # after thousands more rows, a batch's refresh must look up its sandboxes
    # by index, not scan the table (a plan kept from the first run would: every
    # batch then costs more than the one before).
    ingest(batch_of(1000))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sandboxes_environmentlease (id, placeholder, created_at, updated_at, "
            "provider, provider_lease_id, status, lease_policy, acquired_at, failure_reason, "
            "metadata, superseded) SELECT gen_random_uuid(), false, now(), now(), 'daytona', "
            "'bulk-' || i, 'expired', 'ephemeral', now(), '', '{}', false "
            "FROM generate_series(1, 5000) i"
        )
    plans: list[str] = []

    def note(diagnostic):
        plans.append(diagnostic.message_primary or "")

    connection.connection.add_notice_handler(note)
    try:
        with connection.cursor() as cursor:
            cursor.execute("LOAD 'auto_explain'")
            cursor.execute("SET LOCAL auto_explain.log_min_duration = 0")
            cursor.execute("SET LOCAL auto_explain.log_nested_statements = on")
            cursor.execute("SET LOCAL client_min_messages = log")
        ingest(batch_of(1000))
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL client_min_messages = notice")
    finally:
        connection.connection.remove_notice_handler(note)
    [refresh] = [p for p in plans if "UPDATE sandboxes_environmentlease l SET superseded" in p]
    assert "Seq Scan on sandboxes_environmentlease l" not in refresh, refresh
    assert "Index Scan using lease_sandbox_newest on sandboxes_environmentlease l" in refresh
