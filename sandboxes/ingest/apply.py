"""Applies a validated batch in one transaction with a fixed number of queries.

Events are applied in order to in-memory rows: every row the batch names is
loaded once (locked on PostgreSQL), rows named before their own upsert are
created as placeholders, and each model is written back with one upsert.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from django.db import IntegrityError, connection, models, transaction

from sandboxes import audit
from sandboxes.models import (
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    IngestedEvent,
    Issue,
    LeaseIntent,
    PendingExport,
    Receipt,
    RecoveryAction,
)
from sandboxes.models.choices import (
    PROVIDER_RECEIPT_KINDS,
    RECEIPT_SCHEMAS,
    ReceiptKind,
    TerminationState,
)
from sandboxes.release import release_status

from . import schemas as s
from .schemas import Event, EventError

# Which model each id field of each event names.
_REFERENCES: dict[str, type[models.Model]] = {
    "environment_id": Environment,
    "issue_id": Issue,
    "bound_workspace_id": ExecutionWorkspace,
    "workspace_id": ExecutionWorkspace,
    "writer_run_id": HeartbeatRun,
    "run_id": HeartbeatRun,
    "lease_id": EnvironmentLease,
    "intent_id": LeaseIntent,
    "export_id": PendingExport,
    "action_id": RecoveryAction,
}


@dataclass(frozen=True)
class BatchResult:
    accepted: int
    duplicates: int
    # Fields applied as something else than sent, or not at all: (index, path, message).
    warnings: tuple[EventError, ...] = ()


class BatchRejected(Exception):
    def __init__(self, errors: list[EventError]):
        super().__init__(f"{len(errors)} error(s)")
        self.errors = errors


def _values(row: models.Model) -> dict[str, object]:
    return {f.attname: getattr(row, f.attname) for f in type(row)._meta.concrete_fields}


class _UnitOfWork:
    def __init__(self):
        self.rows: dict[type, dict[UUID, models.Model]] = defaultdict(dict)
        # What each row looked like when loaded (or as a fresh placeholder), so
        # only the columns the batch changed are written back.
        self.baseline: dict[tuple[type, UUID], dict[str, object]] = {}
        self.new: dict[type, set[UUID]] = defaultdict(set)
        self.dirty: dict[type, set[UUID]] = defaultdict(set)
        self.receipts: list[Receipt] = []
        self.errors: list[EventError] = []
        self.warnings: list[EventError] = []
        # Environments whose policy the console already owns: known before the
        # batch, or created by an earlier event of it.
        self.policy_owned: set[UUID] = set()

    def load(self, wanted: dict[type, set[UUID]]) -> None:
        lock = connection.features.has_select_for_update
        for model, ids in wanted.items():
            if not ids:
                continue
            qs = model.objects.filter(pk__in=ids)
            if lock:
                qs = qs.select_for_update()
            for row in qs:
                self.rows[model][row.pk] = row
                self.baseline[(model, row.pk)] = _values(row)

    def get(self, model, pk: UUID) -> models.Model:
        """The row with this id; a placeholder if the batch or database has none."""
        row = self.rows[model].get(pk)
        if row is None:
            row = model.placeholder_for(pk)
            self.rows[model][pk] = row
            self.baseline[(model, pk)] = _values(row)
            self.new[model].add(pk)
        return row

    def upsert(self, model, pk: UUID, event: Event) -> models.Model | None:
        """The row an upsert event changes, or None when the row already holds a
        newer state from the source (events may arrive out of order)."""
        row = self.get(model, pk)
        if row.source_updated_at is not None and row.source_updated_at > event.occurred_at:
            return None
        row.placeholder = False
        row.source_updated_at = event.occurred_at
        self.dirty[model].add(pk)
        return row

    def peek(self, model, pk: UUID):
        return self.rows[model].get(pk)

    def flush(self) -> None:
        for model, rows in self.rows.items():
            # Rows only named by this batch: insert if still missing, never
            # overwrite — a concurrent batch may be inserting the real row.
            named = [rows[pk] for pk in self.new[model] - self.dirty[model]]
            if named:
                model.objects.bulk_create(named, batch_size=500, ignore_conflicts=True)
            by_columns: dict[tuple[str, ...], list[models.Model]] = defaultdict(list)
            for pk in self.dirty[model]:
                row = rows[pk]
                before = self.baseline[(model, pk)]
                changed = tuple(
                    sorted(
                        f.name
                        for f in model._meta.concrete_fields
                        if not f.primary_key and before[f.attname] != getattr(row, f.attname)
                    )
                )
                if changed:
                    by_columns[changed].append(row)
            for columns, group in by_columns.items():
                # Upsert only the columns the events set: a concurrent batch may
                # have inserted this id meanwhile, and its other columns stay.
                model.objects.bulk_create(
                    group,
                    batch_size=500,
                    update_conflicts=True,
                    unique_fields=["id"],
                    update_fields=[*columns, "updated_at"],
                )
        if self.receipts:
            Receipt.objects.bulk_create(self.receipts, batch_size=500, ignore_conflicts=True)


def _assign(row, data: s.Data, mapping: dict[str, str]) -> None:
    """Copy the fields the event carries (absent optional fields keep their value)."""
    for source, target in mapping.items():
        if source in data.model_fields_set:
            setattr(row, target, getattr(data, source))


def _apply(uow: _UnitOfWork, event: Event) -> None:
    d = event.data
    match d:
        case s.EnvironmentUpserted():
            env = uow.upsert(Environment, d.environment_id, event)
            if env is None:
                return
            env.name, env.provider = d.name, d.provider
            _assign(env, d, {"driver": "driver"})
            if env.pk in uow.policy_owned or (
                env.pk not in uow.new[Environment]
                and not uow.baseline[(Environment, env.pk)]["placeholder"]
            ):
                _refuse_policy(uow, event, env)
            else:
                _assign(
                    env,
                    d,
                    {
                        "retirement_mode": "retirement_mode",
                        "max_retirements_per_pass": "max_retirements_per_pass",
                        "workspace_root": "workspace_root",
                    },
                )
                if d.warm_retention_hours is not None:
                    env.warm_retention = timedelta(hours=d.warm_retention_hours)
                uow.policy_owned.add(env.pk)
            for field in (
                "driver",
                "retirement_mode",
                "max_retirements_per_pass",
                "workspace_root",
            ):
                if getattr(env, field) is None:
                    setattr(env, field, Environment._meta.get_field(field).get_default())
        case s.IssueUpserted():
            issue = uow.upsert(Issue, d.issue_id, event)
            if issue is None:
                return
            issue.status = d.status
            _assign(issue, d, {"key": "key", "title": "title"})
            issue.key = issue.key or ""
            issue.title = issue.title or ""
            if "bound_workspace_id" in d.model_fields_set:
                issue.bound_workspace = (
                    uow.get(ExecutionWorkspace, d.bound_workspace_id)
                    if d.bound_workspace_id
                    else None
                )
        case s.WorkspaceUpserted():
            ws = uow.upsert(ExecutionWorkspace, d.workspace_id, event)
            if ws is None:
                return
            ws.issue = uow.get(Issue, d.issue_id)
            ws.save_state = d.save_state
            _assign(ws, d, {"saved_at": "saved_at", "final_checkpoint_at": "final_checkpoint_at"})
            if d.saved_manifest is not None:
                ws.saved_manifest = {p: e.model_dump() for p, e in d.saved_manifest.items()}
            if "writer_run_id" in d.model_fields_set:
                ws.writer_run = uow.get(HeartbeatRun, d.writer_run_id) if d.writer_run_id else None
        case s.RunUpserted():
            run = uow.upsert(HeartbeatRun, d.run_id, event)
            if run is None:
                return
            run.issue = uow.get(Issue, d.issue_id)
            run.status = d.status
            _assign(run, d, {"started_at": "started_at", "finished_at": "finished_at"})
        case s.LeaseUpserted():
            lease = uow.upsert(EnvironmentLease, d.lease_id, event)
            if lease is None:
                return
            lease.environment = uow.get(Environment, d.environment_id)
            for field in ("provider", "provider_lease_id", "status", "lease_policy", "acquired_at"):
                setattr(lease, field, getattr(d, field))
            for source, model, target in (
                ("issue_id", Issue, "issue"),
                ("workspace_id", ExecutionWorkspace, "execution_workspace"),
                ("run_id", HeartbeatRun, "heartbeat_run"),
            ):
                if source in d.model_fields_set:
                    pk = getattr(d, source)
                    setattr(lease, target, uow.get(model, pk) if pk else None)
            _assign(
                lease,
                d,
                {
                    "released_at": "released_at",
                    "expires_at": "expires_at",
                    "last_used_at": "last_used_at",
                    "cleanup_status": "cleanup_status",
                    "disposition": "disposition",
                },
            )
            if "failure_reason" in d.model_fields_set:
                lease.failure_reason = d.failure_reason or ""
            if "metadata" in d.model_fields_set:
                lease.metadata = d.metadata.as_json() if d.metadata else {}
        case s.LeaseReleased():
            # A release is an upsert of the lease's status: a late one that is
            # older than what the source said since is ignored.
            lease = uow.upsert(EnvironmentLease, d.lease_id, event)
            if lease is None:
                return
            # The console is a witness (DOMAIN §2.5): the release is recorded as
            # sent, whatever the run's outcome. A keep_running release after an
            # unsuccessful run stays `retained`, and the correction stops it.
            lease.disposition = d.disposition
            lease.status = release_status(d.disposition, d.status)
            lease.released_at = d.released_at or event.occurred_at
        case s.ReceiptRecorded():
            lease = uow.get(EnvironmentLease, d.lease_id)
            if not lease.placeholder and lease.provider_lease_id != d.provider_lease_id:
                # A receipt is proof for exactly this lease's sandbox (DOMAIN §1).
                uow.errors.append(
                    EventError(
                        event.index,
                        "data.provider_lease_id",
                        f"the lease's sandbox is {lease.provider_lease_id!r}, "
                        f"not {d.provider_lease_id!r}",
                    )
                )
                return
            run = uow.get(HeartbeatRun, d.run_id)
            kind = ReceiptKind(d.kind)
            state = d.state or TerminationState.STOPPED
            uow.receipts.append(
                Receipt(
                    kind=kind,
                    lease_id=lease.pk,
                    run_id=run.pk,
                    provider_lease_id=d.provider_lease_id,
                    state=state,
                    schema=RECEIPT_SCHEMAS[kind],
                    confirmed_at=d.confirmed_at,
                    request_id=d.request_id or event.id,
                    payload=d.model_dump(mode="json") | {"event_id": event.id},
                    actor="paperclip",
                )
            )
        case s.IntentUpserted():
            intent = uow.upsert(LeaseIntent, d.intent_id, event)
            if intent is None:
                return
            intent.lease = uow.get(EnvironmentLease, d.lease_id)
            intent.kind, intent.state = d.kind, d.state
            intent.request_id = intent.request_id or event.id
        case s.ExportUpserted():
            export = uow.upsert(PendingExport, d.export_id, event)
            if export is None:
                return
            export.lease = uow.get(EnvironmentLease, d.lease_id)
            export.state = d.state
        case s.RecoveryActionUpserted():
            action = uow.upsert(RecoveryAction, d.action_id, event)
            if action is None:
                return
            action.source_issue = uow.get(Issue, d.issue_id)
            action.kind, action.status = d.kind, d.status
            if "outcome" in d.model_fields_set:
                action.outcome = d.outcome or ""
            if "lease_id" in d.model_fields_set:
                action.lease = uow.get(EnvironmentLease, d.lease_id) if d.lease_id else None
            if d.evidence is not None:
                action.evidence = d.evidence
            if action.lease_id and "leaseId" not in (action.evidence or {}):
                action.evidence = {**(action.evidence or {}), "leaseId": str(action.lease_id)}
        case _:  # pragma: no cover - validate_batch admits only known types
            raise TypeError(f"unhandled event {event.type}")


def _referenced_ids(events: list[Event]) -> dict[type, set[UUID]]:
    wanted: dict[type, set[UUID]] = defaultdict(set)
    for event in events:
        for field, model in _REFERENCES.items():
            value = getattr(event.data, field, None)
            if value is not None:
                wanted[model].add(value)
    return wanted


def _check_references(uow: _UnitOfWork, events: list[Event]) -> list[EventError]:
    """A release must name a lease the console knows (in the database or earlier
    in the batch): applying a release rule to a placeholder would be a guess."""
    errors = []
    known = {pk for pk, lease in uow.rows[EnvironmentLease].items() if not lease.placeholder}
    for event in events:
        if isinstance(event.data, s.LeaseUpserted):
            known.add(event.data.lease_id)
        elif isinstance(event.data, s.LeaseReleased) and event.data.lease_id not in known:
            errors.append(
                EventError(
                    event.index, "data.lease_id", "unknown lease: upsert it before releasing"
                )
            )
    return errors


POLICY_FIELDS = (
    "retirement_mode",
    "warm_retention_hours",
    "max_retirements_per_pass",
    "workspace_root",
)


def _refuse_policy(uow: _UnitOfWork, event: Event, env: Environment) -> None:
    """Policy is the console's (DOMAIN §4.1): an existing environment keeps its
    mode, retention, cap and root whatever a runtime sends; each field that
    would have changed it is named in the answer's warnings."""
    current = env.policy()
    for field in POLICY_FIELDS:
        sent = getattr(event.data, field)
        if field not in event.data.model_fields_set or sent is None:
            continue
        if field == "warm_retention_hours":
            differs = abs(float(sent) - current[field]) > 1e-9
        else:
            differs = sent != current[field]
        if differs:
            uow.warnings.append(
                EventError(
                    event.index,
                    f"data.{field}",
                    f"ignored: the console owns the policy of environment {env.name!r} "
                    f"(it stays {current[field]!r}); change it on the Environments page",
                )
            )


def apply_events(source: str, events: list[Event], *, actor=None) -> BatchResult:
    """Apply a validated batch all-or-nothing; a repeated event id is a no-op.

    Raises BatchRejected (and changes nothing) if an event names something
    the batch cannot apply.
    """
    try:
        return _apply_batch(source, events, actor)
    except IntegrityError:
        # Another request recorded one of these event ids at the same moment;
        # once more, and those ids count as duplicates.
        return _apply_batch(source, events, actor)


def _check_early_receipts(uow: _UnitOfWork, events: list[Event], actor) -> None:
    """A receipt can arrive before its lease row (it is then stored against a
    placeholder and cannot be checked). When the lease arrives, every receipt
    recorded for it is validated against its sandbox (DOMAIN §1, issue 10 item
    8): one naming another sandbox is named in the answer's warnings and
    audited. It stays (receipts are append-only) but proves nothing: every
    check matches a receipt on run, lease AND provider_lease_id. 1 query."""
    upserted: dict[UUID, int] = {}
    for event in events:
        if isinstance(event.data, s.LeaseUpserted):
            upserted[event.data.lease_id] = event.index
    if not upserted:
        return
    # Only leases that arrive now: before this batch the row was missing or a
    # placeholder, so receipts naming it could not be checked when they came.
    sandbox = {
        pk: uow.rows[EnvironmentLease][pk].provider_lease_id
        for pk in upserted
        if pk in uow.rows[EnvironmentLease]
        and uow.baseline[(EnvironmentLease, pk)]["placeholder"]
        and not uow.rows[EnvironmentLease][pk].placeholder
    }
    if not sandbox:
        return
    mismatched = (
        Receipt.objects.filter(lease_id__in=list(sandbox), kind__in=PROVIDER_RECEIPT_KINDS)
        .values_list("id", "lease_id", "provider_lease_id", "request_id", "kind")
        .order_by("confirmed_at")
    )
    for receipt_id, lease_id, named, request_id, kind in mismatched:
        if named == sandbox[lease_id]:
            continue
        message = (
            f"{kind} receipt {request_id} recorded earlier names sandbox {named!r}, but this "
            f"lease's sandbox is {sandbox[lease_id]!r}: it proves nothing for this lease"
        )
        uow.warnings.append(EventError(upserted[lease_id], "data.provider_lease_id", message))
        audit.record(
            actor=actor,
            action="receipt.sandbox_mismatch",
            obj=Receipt(pk=receipt_id, provider_lease_id=sandbox[lease_id]),
            reason=message,
            before={"provider_lease_id": named},
            after={"lease_provider_lease_id": sandbox[lease_id], "lease": str(lease_id)},
        )


def _apply_batch(source: str, events: list[Event], actor) -> BatchResult:
    with transaction.atomic():
        ids = [e.id for e in events]
        seen = set(
            IngestedEvent.objects.filter(source=source, event_id__in=ids).values_list(
                "event_id", flat=True
            )
        )
        fresh: list[Event] = []
        for event in events:
            if event.id in seen:
                continue
            seen.add(event.id)
            fresh.append(event)

        uow = _UnitOfWork()
        uow.load(_referenced_ids(fresh))
        errors = _check_references(uow, fresh)
        if errors:
            raise BatchRejected(errors)

        for event in fresh:
            _apply(uow, event)
        if uow.errors:
            raise BatchRejected(uow.errors)
        uow.flush()
        _check_early_receipts(uow, fresh, actor)
        IngestedEvent.objects.bulk_create(
            [IngestedEvent(source=source, event_id=e.id, type=e.type) for e in fresh],
            batch_size=1000,
        )
    return BatchResult(
        accepted=len(fresh), duplicates=len(events) - len(fresh), warnings=tuple(uow.warnings)
    )
