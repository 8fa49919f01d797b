"""Applies a validated batch in one transaction, set-based, with a fixed number
of queries whatever the batch's size (docs/architecture.md, "Recorded").

1. The rows the batch names are read once, only the columns the fold needs
   (locked on PostgreSQL, in id order).
2. The events are folded per row in memory, in batch order, on plain values
   (no model instances): an event older than what its row already holds is
   skipped; rows named before their own upsert become placeholders.
3. Each table is written with one statement per kind of write: new rows in
   one INSERT … ON CONFLICT DO NOTHING; rows that already existed in one
   UPDATE … FROM the batch that sets only the columns each row's events sent,
   and only where the batch's source time is not older than the row's (the
   ordering check, in SQL); receipts and the event ids in one INSERT each.
   The release rule (a missing status comes from the disposition) is a SQL
   expression of the same table as `sandboxes.release.release_status`.

On PostgreSQL the rows travel as one JSON document per statement
(`json_to_recordset`); elsewhere (the embedded SQLite) through the ORM.
"""

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast
from uuid import UUID, uuid4

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

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
from sandboxes.models.mirror import MirroredModel
from sandboxes.release import release_status, release_status_sql

from . import schemas as s
from .schemas import Event, EventError

_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - a venv installed before it was a dependency
    _orjson = None

Mirrored = type[MirroredModel]

# Which model each id field of each event names.
_REFERENCES: dict[str, Mirrored] = {
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
# The same, per event schema: only the fields it has.
_REFERENCES_OF: dict[type, tuple[tuple[str, Mirrored], ...]] = {
    fast: tuple((f, m) for f, m in _REFERENCES.items() if f in schema.model_fields)
    for fast, schema in s.SCHEMA_OF.items()
}

# Columns read for each row a batch names: what the fold needs to decide, and
# nothing it will overwrite blindly.
_ALWAYS = ("id", "placeholder", "source_updated_at")
_LOADED: dict[Mirrored, tuple[str, ...]] = {
    Environment: (
        *_ALWAYS,
        "name",
        "retirement_mode",
        "warm_retention",
        "max_retirements_per_pass",
        "workspace_root",
        "notice_period",
    ),
    EnvironmentLease: (*_ALWAYS, "provider", "provider_lease_id"),
    LeaseIntent: (*_ALWAYS, "request_id"),
    RecoveryAction: (*_ALWAYS, "lease_id", "evidence"),
}

# SQL for a column whose value is computed from the staged row `r`.
_COLUMN_SQL: dict[Mirrored, dict[str, str]] = {
    EnvironmentLease: {"status": release_status_sql('r."status"', 'r."disposition"')},
}

_ENV_DEFAULTS = ("driver", "retirement_mode", "max_retirements_per_pass", "workspace_root")


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


class _Row:
    """One row as the batch sees it: the columns read, then what events set.
    Attribute access reads and writes `values` (by attname)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]):
        object.__setattr__(self, "values", values)

    @property
    def pk(self) -> UUID:
        return cast(UUID, self.values["id"])

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.values[name] = value


class _UnitOfWork:
    def __init__(self) -> None:
        self.rows: dict[Mirrored, dict[UUID, _Row]] = defaultdict(dict)
        # What each row held when read, for the rules that look at the before.
        self.baseline: dict[tuple[Mirrored, UUID], dict[str, Any]] = {}
        # Rows the database did not have when read.
        self.new: dict[Mirrored, set[UUID]] = defaultdict(set)
        # Rows an upsert applied to, and the columns the batch set on each.
        self.sent: dict[Mirrored, dict[UUID, set[str]]] = defaultdict(dict)
        self.receipts: list[dict[str, Any]] = []
        self.errors: list[EventError] = []
        self.warnings: list[EventError] = []
        # Environments whose policy the console already owns: known before the
        # batch, or created by an earlier event of it.
        self.policy_owned: set[UUID] = set()

    def load(self, wanted: dict[Mirrored, set[UUID]]) -> None:
        """Read (and lock, in id order) every row the batch names: one query a table."""
        for model, ids in wanted.items():
            if not ids:
                continue
            columns = _LOADED.get(model, _ALWAYS)
            for values in _read_rows(model, columns, ids):
                pk = values["id"]
                self.rows[model][pk] = _Row(values)
                self.baseline[(model, pk)] = dict(values)

    def get(self, model: Mirrored, pk: UUID) -> _Row:
        """The row with this id; a placeholder if the batch or database has none."""
        row = self.rows[model].get(pk)
        if row is None:
            values: dict[str, Any] = {"id": pk, "placeholder": True, "source_updated_at": None}
            for key, value in model.placeholder_defaults.items():
                values[key] = value(pk) if callable(value) else value
            row = self.rows[model][pk] = _Row(values)
            self.new[model].add(pk)
        return row

    def upsert(self, model: Mirrored, pk: UUID, event: Event) -> _Row | None:
        """The row an upsert event changes, or None when the row already holds a
        newer state from the source (events may arrive out of order)."""
        row = self.get(model, pk)
        values = row.values
        held = values["source_updated_at"]
        if held is not None and held > event.occurred_at:
            return None
        values["placeholder"] = False
        values["source_updated_at"] = event.occurred_at
        self.sent[model].setdefault(pk, set())
        return row

    def set(self, model: Mirrored, row: _Row, **columns: Any) -> None:
        row.values.update(columns)
        self.sent[model][row.values["id"]].update(columns)

    def was_placeholder(self, model: Mirrored, pk: UUID) -> bool:
        """Missing or a placeholder before this batch."""
        before = self.baseline.get((model, pk))
        return before is None or bool(before["placeholder"])


def _assign(
    uow: _UnitOfWork, model: Mirrored, row: _Row, data: s.Data, mapping: dict[str, str]
) -> None:
    """Copy the fields the event carries (absent optional fields keep their value)."""
    sent = data.model_fields_set
    columns = {target: getattr(data, src) for src, target in mapping.items() if src in sent}
    if columns:
        uow.set(model, row, **columns)


def _reference(uow: _UnitOfWork, model: Mirrored, pk: UUID | None) -> UUID | None:
    """An id a row points to; the row it names becomes a placeholder if unknown."""
    if pk is None:
        return None
    uow.get(model, pk)
    return pk


def _apply_environment(uow: _UnitOfWork, event: Event, d: s.EnvironmentUpserted) -> None:
    env = uow.upsert(Environment, d.environment_id, event)
    if env is None:
        return
    pk = d.environment_id
    uow.set(Environment, env, name=d.name, provider=d.provider)
    _assign(uow, Environment, env, d, {"driver": "driver"})
    if pk in uow.policy_owned or not uow.was_placeholder(Environment, pk):
        _refuse_policy(uow, event, d, env)
    else:
        _assign(
            uow,
            Environment,
            env,
            d,
            {
                "retirement_mode": "retirement_mode",
                "max_retirements_per_pass": "max_retirements_per_pass",
                "workspace_root": "workspace_root",
            },
        )
        if d.warm_retention_hours is not None:
            uow.set(Environment, env, warm_retention=timedelta(hours=d.warm_retention_hours))
        uow.policy_owned.add(pk)
    for field in _ENV_DEFAULTS:
        if field in env.values and env.values[field] is None:
            uow.set(Environment, env, **{field: _field(Environment, field).get_default()})


def _apply_lease(uow: _UnitOfWork, event: Event, d: s.LeaseUpserted) -> None:
    lease = uow.upsert(EnvironmentLease, d.lease_id, event)
    if lease is None:
        return
    sent = d.model_fields_set
    columns: dict[str, Any] = {
        "environment_id": _reference(uow, Environment, d.environment_id),
        "provider": d.provider,
        "provider_lease_id": d.provider_lease_id,
        "status": d.status,
        "lease_policy": d.lease_policy,
        "acquired_at": d.acquired_at,
    }
    for source, model, target in (
        ("issue_id", Issue, "issue_id"),
        ("workspace_id", ExecutionWorkspace, "execution_workspace_id"),
        ("run_id", HeartbeatRun, "heartbeat_run_id"),
    ):
        if source in sent:
            columns[target] = _reference(uow, model, getattr(d, source))
    for field in ("released_at", "expires_at", "last_used_at", "cleanup_status", "disposition"):
        if field in sent:
            columns[field] = getattr(d, field)
    if "failure_reason" in sent:
        columns["failure_reason"] = d.failure_reason or ""
    if "metadata" in sent:
        columns["metadata"] = d.metadata.as_json() if d.metadata else {}
    uow.set(EnvironmentLease, lease, **columns)


def _apply_release(uow: _UnitOfWork, event: Event, d: s.LeaseReleased) -> None:
    # A release is an upsert of the lease's status: a late one that is older
    # than what the source said since is ignored.
    lease = uow.upsert(EnvironmentLease, d.lease_id, event)
    if lease is None:
        return
    # The console is a witness (docs/rules.md, "recorded as sent"): the release
    # is recorded as sent, whatever the run's outcome. A missing status stays
    # missing here and is derived from the disposition as the row is written.
    uow.set(
        EnvironmentLease,
        lease,
        disposition=d.disposition,
        status=d.status,
        released_at=d.released_at or event.occurred_at,
    )


def _apply_receipt(uow: _UnitOfWork, event: Event, d: s.ReceiptRecorded) -> None:
    lease = uow.get(EnvironmentLease, d.lease_id)
    if not lease.values["placeholder"] and lease.values["provider_lease_id"] != d.provider_lease_id:
        # A receipt is proof for exactly this lease's sandbox (docs/rules.md, proof).
        uow.errors.append(
            EventError(
                event.index,
                "data.provider_lease_id",
                f"the lease's sandbox is {lease.values['provider_lease_id']!r}, "
                f"not {d.provider_lease_id!r}",
            )
        )
        return
    _reference(uow, HeartbeatRun, d.run_id)
    kind = ReceiptKind(d.kind)
    uow.receipts.append(
        {
            "id": uuid4(),
            "kind": kind.value,
            "lease_id": d.lease_id,
            "run_id": d.run_id,
            "provider_lease_id": d.provider_lease_id,
            "state": d.state or TerminationState.STOPPED.value,
            "schema": RECEIPT_SCHEMAS[kind],
            "confirmed_at": d.confirmed_at,
            "request_id": d.request_id or event.id,
            "payload": d.model_dump(mode="json") | {"event_id": event.id},
            "actor": "paperclip",
        }
    )


def _apply_recovery_action(uow: _UnitOfWork, event: Event, d: s.RecoveryActionUpserted) -> None:
    action = uow.upsert(RecoveryAction, d.action_id, event)
    if action is None:
        return
    sent = d.model_fields_set
    columns: dict[str, Any] = {
        "source_issue_id": _reference(uow, Issue, d.issue_id),
        "kind": d.kind,
        "status": d.status,
    }
    if "outcome" in sent:
        columns["outcome"] = d.outcome or ""
    if "lease_id" in sent:
        columns["lease_id"] = _reference(uow, EnvironmentLease, d.lease_id)
    if d.evidence is not None:
        columns["evidence"] = d.evidence
    uow.set(RecoveryAction, action, **columns)
    lease_id = action.values.get("lease_id")
    evidence = action.values.get("evidence") or {}
    if lease_id and "leaseId" not in evidence:
        uow.set(RecoveryAction, action, evidence={**evidence, "leaseId": str(lease_id)})


def _apply(uow: _UnitOfWork, event: Event) -> None:
    d = event.data
    match d:
        case s.EnvironmentUpserted():
            _apply_environment(uow, event, d)
        case s.IssueUpserted():
            issue = uow.upsert(Issue, d.issue_id, event)
            if issue is None:
                return
            sent = d.model_fields_set
            columns: dict[str, Any] = {"status": d.status}
            if "key" in sent:
                columns["key"] = d.key or ""
            if "title" in sent:
                columns["title"] = d.title or ""
            if "bound_workspace_id" in sent:
                columns["bound_workspace_id"] = _reference(
                    uow, ExecutionWorkspace, d.bound_workspace_id
                )
            uow.set(Issue, issue, **columns)
        case s.WorkspaceUpserted():
            ws = uow.upsert(ExecutionWorkspace, d.workspace_id, event)
            if ws is None:
                return
            columns = {"issue_id": _reference(uow, Issue, d.issue_id), "save_state": d.save_state}
            sent = d.model_fields_set
            for field in ("saved_at", "final_checkpoint_at"):
                if field in sent:
                    columns[field] = getattr(d, field)
            if d.saved_manifest is not None:
                columns["saved_manifest"] = {p: e.model_dump() for p, e in d.saved_manifest.items()}
            if "writer_run_id" in sent:
                columns["writer_run_id"] = _reference(uow, HeartbeatRun, d.writer_run_id)
            uow.set(ExecutionWorkspace, ws, **columns)
        case s.RunUpserted():
            run = uow.upsert(HeartbeatRun, d.run_id, event)
            if run is None:
                return
            columns = {"issue_id": _reference(uow, Issue, d.issue_id), "status": d.status}
            _assign(uow, HeartbeatRun, run, d, {"started_at": "started_at"})
            _assign(uow, HeartbeatRun, run, d, {"finished_at": "finished_at"})
            uow.set(HeartbeatRun, run, **columns)
        case s.LeaseUpserted():
            _apply_lease(uow, event, d)
        case s.LeaseReleased():
            _apply_release(uow, event, d)
        case s.ReceiptRecorded():
            _apply_receipt(uow, event, d)
        case s.IntentUpserted():
            intent = uow.upsert(LeaseIntent, d.intent_id, event)
            if intent is None:
                return
            columns = {
                "lease_id": _reference(uow, EnvironmentLease, d.lease_id),
                "kind": d.kind,
                "state": d.state,
            }
            if not intent.values.get("request_id"):
                columns["request_id"] = event.id
            uow.set(LeaseIntent, intent, **columns)
        case s.ExportUpserted():
            export = uow.upsert(PendingExport, d.export_id, event)
            if export is None:
                return
            uow.set(
                PendingExport,
                export,
                lease_id=_reference(uow, EnvironmentLease, d.lease_id),
                state=d.state,
            )
        case s.RecoveryActionUpserted():
            _apply_recovery_action(uow, event, d)
        case _:  # pragma: no cover - validate_batch admits only known types
            raise TypeError(f"unhandled event {event.type}")


def _referenced_ids(events: list[Event]) -> dict[Mirrored, set[UUID]]:
    wanted: dict[Mirrored, set[UUID]] = defaultdict(set)
    for event in events:
        data = event.data
        for field, model in _REFERENCES_OF[type(data)]:
            value = getattr(data, field)
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


def _policy_of(row: _Row) -> dict[str, Any]:
    """`Environment.policy()` of a row the batch holds as plain values."""
    values = {**_defaults(Environment), **row.values}
    return {
        "retirement_mode": values["retirement_mode"],
        "warm_retention_hours": values["warm_retention"].total_seconds() / 3600,
        "max_retirements_per_pass": values["max_retirements_per_pass"],
        "workspace_root": values["workspace_root"],
    }


def _refuse_policy(uow: _UnitOfWork, event: Event, d: s.EnvironmentUpserted, env: _Row) -> None:
    """Policy is the console's (docs/architecture.md, how a lease travels): an
    existing environment keeps its mode, retention, cap and root whatever a
    runtime sends; each field that would have changed it is named in the
    answer's warnings."""
    current = _policy_of(env)
    for field in POLICY_FIELDS:
        sent = getattr(d, field)
        if field not in d.model_fields_set or sent is None:
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


def apply_events(source: str, events: list[Event], *, actor: Any = None) -> BatchResult:
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


def _check_early_receipts(uow: _UnitOfWork, events: list[Event], actor: Any) -> None:
    """A receipt can arrive before its lease row (it is then stored against a
    placeholder and cannot be checked). When the lease arrives, every receipt
    recorded for it is validated against its sandbox (docs/rules.md, proof; issue 10 item
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
    leases = uow.rows[EnvironmentLease]
    sandbox = {
        pk: leases[pk].provider_lease_id
        for pk in upserted
        if pk in leases and uow.was_placeholder(EnvironmentLease, pk) and not leases[pk].placeholder
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


def _apply_batch(source: str, events: list[Event], actor: Any) -> BatchResult:
    with transaction.atomic():
        recorded = _record_event_ids(source, events)
        fresh: list[Event] = []
        for event in events:
            if event.id in recorded:
                recorded.discard(event.id)  # a repeat inside the batch counts once
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
        for model in list(uow.rows):
            _write_rows(uow, model)
        if uow.receipts:
            _insert(Receipt, uow.receipts, ignore_conflicts=True)
        _check_early_receipts(uow, fresh, actor)
    return BatchResult(
        accepted=len(fresh), duplicates=len(events) - len(fresh), warnings=tuple(uow.warnings)
    )


# --- The database edge: one statement per table and kind of write. -------------


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def _fields(model: type[models.Model]) -> list[models.Field]:
    return [f for f in model._meta.concrete_fields if not isinstance(f, models.AutoField)]


def _is_timestamp(field: models.Field) -> bool:
    return bool(getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))


_DEFAULTS: dict[type[models.Model], dict[str, Any]] = {}


def _defaults(model: type[models.Model]) -> dict[str, Any]:
    """Every column's default, by attname (what a new row holds unless set)."""
    if model not in _DEFAULTS:
        _DEFAULTS[model] = {
            f.attname: f.get_default() for f in _fields(model) if not _is_timestamp(f)
        }
    return _DEFAULTS[model]


def _json(value: Any) -> Any:
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()} seconds"
    raise TypeError(f"cannot send {type(value).__name__} to the database")


def _document(rows: Iterable[dict[str, Any]]) -> str:
    listed = list(rows)
    if _orjson is None:  # pragma: no cover
        return json.dumps(listed, default=_json, ensure_ascii=False, separators=(",", ":"))
    try:
        # orjson writes uuids and datetimes itself (json.dumps calls back into
        # Python for each): a third of a batch's cost before it.
        return _orjson.dumps(listed, default=_json).decode()
    except TypeError:  # an integer beyond 64 bits in free-form JSON, say
        return json.dumps(listed, default=_json, ensure_ascii=False, separators=(",", ":"))


def _record_type(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{_qn(name)} {db_type}" for name, db_type in columns)


def _read_rows(
    model: Mirrored, columns: tuple[str, ...], ids: set[UUID]
) -> Iterable[dict[str, Any]]:
    if not _postgres():
        return model._default_manager.filter(pk__in=ids).values(*columns)
    table = _qn(model._meta.db_table)
    select = ", ".join(_qn(_field(model, c).column) for c in columns)
    literal = "{" + ",".join(str(pk) for pk in ids) + "}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {select} FROM {table} WHERE {_qn('id')} = ANY(%s::uuid[]) "
            f"ORDER BY {_qn('id')} FOR UPDATE",
            [literal],
        )
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _record_event_ids(source: str, events: list[Event]) -> set[str]:
    """Record the batch's event ids for `source`; returns those not seen before
    (one INSERT … ON CONFLICT DO NOTHING RETURNING: a concurrent batch carrying
    the same id waits for the other to commit, then finds it a duplicate).
    Rolled back with the batch if it is refused."""
    rows = [{"source": source, "event_id": e.id, "type": e.type} for e in events]
    if not rows:
        return set()
    if _postgres():
        return _insert(IngestedEvent, rows, ignore_conflicts=True, returning=("event_id",))
    ids = [e.id for e in events]
    seen = set(
        IngestedEvent.objects.filter(source=source, event_id__in=ids).values_list(
            "event_id", flat=True
        )
    )
    unique = {row["event_id"]: row for row in rows if row["event_id"] not in seen}
    _insert(IngestedEvent, list(unique.values()), ignore_conflicts=False)
    return set(unique)


def _full_row(model: Mirrored, row: _Row) -> dict[str, Any]:
    return {**_defaults(model), **row.values}


def _write_rows(uow: _UnitOfWork, model: Mirrored) -> None:
    """New rows in one INSERT (a row only named stays a placeholder, and never
    overwrites a row a concurrent batch inserted meanwhile); rows that existed
    in one UPDATE of the columns the batch set, where the batch is not older."""
    rows = uow.rows[model]
    sent = uow.sent[model]
    # In id order, like the read: two batches inserting the same new ids wait
    # for each other in one order, never in a cycle.
    new = sorted(pk for pk in rows if pk in uow.new[model])
    # PostgreSQL's INSERT fills in the defaults itself (`_insert`).
    full = [rows[pk].values if _postgres() else _full_row(model, rows[pk]) for pk in new]
    inserted = _insert(model, full, ignore_conflicts=True, returning=("id",))
    # A new row another batch inserted first is updated like an existing one.
    changed = [pk for pk in sent if pk not in inserted]
    if changed:
        _update(model, [(rows[pk], sent[pk]) for pk in changed])


def _field(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):  # pragma: no cover - attnames only
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field


def _insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    ignore_conflicts: bool,
    returning: tuple[str] | tuple[()] = (),
) -> set[Any]:
    """Insert `rows` (values by attname) in one statement; with `returning`,
    the ids it inserted (a conflict inserts nothing)."""
    if not rows:
        return set()
    if not _postgres():
        if model is EnvironmentLease:
            for row in rows:
                if row["status"] is None:
                    row["status"] = release_status(row["disposition"])
        objs = [model(**row) for row in rows]
        model._default_manager.bulk_create(objs, ignore_conflicts=ignore_conflicts)
        return {row.get("id") for row in rows}
    fields = _fields(model)
    computed = _COLUMN_SQL.get(cast(Mirrored, model), {})
    staged = [f for f in fields if not _is_timestamp(f)]
    values = [
        "clock_timestamp()" if _is_timestamp(f) else computed.get(f.attname, f"r.{_qn(f.column)}")
        for f in fields
    ]
    record = _record_type((f.column, f.db_type(connection) or "text") for f in staged)
    sql = (
        f"INSERT INTO {_qn(model._meta.db_table)} ({', '.join(_qn(f.column) for f in fields)}) "
        f"SELECT {', '.join(values)} FROM json_to_recordset(%s::json) AS r({record})"
    )
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    if returning:
        sql += " RETURNING " + ", ".join(_qn(c) for c in returning)
    defaults = _defaults(model)
    columns = [(f.column, f.attname, defaults[f.attname]) for f in staged]
    document = _document(
        {column: row.get(name, default) for column, name, default in columns} for row in rows
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [document])
        if not returning:
            return set()
        return {r[0] for r in cursor.fetchall()}


def _update(model: Mirrored, rows: list[tuple[_Row, set[str]]]) -> None:
    """One UPDATE: each row gets the columns its events set, and only when the
    batch's source time is not older than the row's (docs/rules.md, "Which rows
    are judged": the newer source time wins)."""
    if not _postgres():
        _update_orm(model, rows)
        return
    sent: set[str] = set().union(*(cols for _, cols in rows))
    if model is EnvironmentLease and "status" in sent:
        sent.add("disposition")  # the release rule reads it (`_COLUMN_SQL`)
    names = sorted(sent)
    bit = {name: 1 << i for i, name in enumerate(names)}
    fields = {name: _field(model, name) for name in names}
    computed = _COLUMN_SQL.get(model, {})
    record = _record_type(
        [
            ("id", "uuid"),
            ("_sent", "bigint"),
            ("source_updated_at", "timestamp with time zone"),
            *((f.column, f.db_type(connection) or "text") for f in fields.values()),
        ]
    )
    assignments = [
        f"{_qn(f.column)} = CASE WHEN r._sent & {bit[n]} <> 0 "
        f"THEN {computed.get(n, f'r.{_qn(f.column)}')} ELSE t.{_qn(f.column)} END"
        for n, f in fields.items()
    ]
    assignments += [
        f"{_qn('placeholder')} = false",
        f"{_qn('source_updated_at')} = r.{_qn('source_updated_at')}",
        f"{_qn('updated_at')} = clock_timestamp()",
    ]
    document = _document(
        {
            "id": row.values["id"],
            "_sent": sum(bit[c] for c in cols),
            "source_updated_at": row.values["source_updated_at"],
            **{fields[c].column: row.values[c] for c in cols},
        }
        for row, cols in rows
    )
    sql = (
        f"UPDATE {_qn(model._meta.db_table)} AS t SET {', '.join(assignments)} "
        f"FROM json_to_recordset(%s::json) AS r({record}) "
        f"WHERE t.{_qn('id')} = r.{_qn('id')} AND (t.{_qn('source_updated_at')} IS NULL "
        f"OR r.{_qn('source_updated_at')} >= t.{_qn('source_updated_at')})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [document])


def _update_orm(model: Mirrored, rows: list[tuple[_Row, set[str]]]) -> None:
    """The same through the ORM (the embedded SQLite: one writer at a time, and
    the rows were read in this transaction), grouped by the columns set."""
    now = timezone.now()
    groups: dict[frozenset[str], list[_Row]] = defaultdict(list)
    for row, cols in rows:
        groups[frozenset(cols)].append(row)
    for columns, group in groups.items():
        objs = []
        for row in group:
            values: dict[str, Any] = {c: row.values[c] for c in columns}
            if model is EnvironmentLease and values.get("status", "") is None:
                values["status"] = release_status(row.values["disposition"])
            values.update(
                id=row.values["id"],
                placeholder=False,
                source_updated_at=row.values["source_updated_at"],
                updated_at=now,
            )
            objs.append(model(**values))
        model._default_manager.bulk_update(
            objs, [*sorted(columns), "placeholder", "source_updated_at", "updated_at"]
        )
