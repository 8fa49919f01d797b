"""The fold of a batch's events into the rows they name (`sandboxes.ingest.apply`):
the rows are read once, then each event is applied in batch order, in memory,
on plain values (no model instances)."""

from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast
from uuid import UUID, uuid4

from pydantic import TypeAdapter

from sandboxes.models import (
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    LeaseIntent,
    PendingExport,
    RecoveryAction,
)
from sandboxes.models.choices import RECEIPT_SCHEMAS, ReceiptKind, TerminationState

from . import schemas as s
from .moves import sandbox_move
from .schemas import Event, EventError
from .sql import Mirrored, _defaults, _field, _read_rows

# A row's id. At run time always the canonical string (`schemas.plain_ids`):
# rows are keyed by it, without a uuid.UUID per lookup. Typed as the event
# schemas declare their ids.
Id = str | UUID

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

# A workspace's manifest as stored: path -> {sha256, size}, in one call.
_MANIFEST: TypeAdapter[dict[str, s.ManifestEntry]] = TypeAdapter(dict[str, s.ManifestEntry])

_ENV_DEFAULTS = ("driver", "retirement_mode", "max_retirements_per_pass", "workspace_root")


class _Row:
    """One row as the batch sees it: the columns read, then what events set.
    Attribute access reads and writes `values` (by attname)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]):
        object.__setattr__(self, "values", values)

    @property
    def pk(self) -> Id:
        return cast(Id, self.values["id"])

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.values[name] = value


class _UnitOfWork:
    """The rows a batch names, keyed by id as a canonical string (`plain_ids`)."""

    def __init__(self) -> None:
        self.rows: dict[Mirrored, dict[Id, _Row]] = defaultdict(dict)
        # What each row held when read, for the rules that look at the before.
        self.baseline: dict[tuple[Mirrored, Id], dict[str, Any]] = {}
        # Rows the database did not have when read.
        self.new: dict[Mirrored, set[Id]] = defaultdict(set)
        # Rows an upsert applied to, and the columns the batch set on each.
        self.sent: dict[Mirrored, dict[Id, set[str]]] = defaultdict(dict)
        # Rows this batch inserted (not another batch meanwhile), once written.
        self.inserted: dict[Mirrored, set[Id]] = defaultdict(set)
        self.receipts: list[dict[str, Any]] = []
        self.errors: list[EventError] = []
        self.warnings: list[EventError] = []
        # Leases moved to another sandbox by a newer report: (event index, lease
        # id, (provider, sandbox) before, after, source time before, after).
        self.moves: list[tuple] = []
        # Environments whose policy the console already owns: known before the
        # batch, or created by an earlier event of it.
        self.policy_owned: set[Id] = set()

    def load(self, wanted: dict[Mirrored, set[Id]]) -> None:
        """Read (and lock, in id order) every row the batch names: one query."""
        reads = [(model, _LOADED.get(model, _ALWAYS), ids) for model, ids in wanted.items() if ids]
        if not reads:
            return
        for (model, _, _), rows in zip(reads, _read_rows(reads), strict=True):
            for values in rows:
                pk = values["id"]
                self.rows[model][pk] = _Row(values)
                self.baseline[(model, pk)] = dict(values)

    def get(self, model: Mirrored, pk: Id) -> _Row:
        """The row with this id; a placeholder if the batch or database has none."""
        row = self.rows[model].get(pk)
        if row is None:
            values: dict[str, Any] = {"id": pk, "placeholder": True, "source_updated_at": None}
            for key, value in model.placeholder_defaults.items():
                values[key] = value(pk) if callable(value) else value
            row = self.rows[model][pk] = _Row(values)
            self.new[model].add(pk)
        return row

    def upsert(self, model: Mirrored, pk: Id, event: Event) -> _Row | None:
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
        if "company_id" in event.data.model_fields_set:  # absent: the row keeps its own
            self.set(model, row, company_id=event.data.company_id)  # type: ignore[attr-defined]
        return row

    def set(self, model: Mirrored, row: _Row, **columns: Any) -> None:
        row.values.update(columns)
        self.sent[model][row.values["id"]].update(columns)

    def was_placeholder(self, model: Mirrored, pk: Id) -> bool:
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


def _reference(uow: _UnitOfWork, model: Mirrored, pk: Id | None) -> Id | None:
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
    if not uow.was_placeholder(EnvironmentLease, d.lease_id):
        # A row the console holds: moving it to another sandbox takes a newer report.
        error, move = sandbox_move(uow.rows[EnvironmentLease][d.lease_id].values, event, d)
        if error is not None:
            uow.errors.append(error)
            return
        if move is not None:
            uow.moves.append(move)
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
            "company_id": d.company_id,
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


def _apply_issue(uow: _UnitOfWork, event: Event, d: s.IssueUpserted) -> None:
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
        columns["bound_workspace_id"] = _reference(uow, ExecutionWorkspace, d.bound_workspace_id)
    uow.set(Issue, issue, **columns)


def _apply_workspace(uow: _UnitOfWork, event: Event, d: s.WorkspaceUpserted) -> None:
    ws = uow.upsert(ExecutionWorkspace, d.workspace_id, event)
    if ws is None:
        return
    columns: dict[str, Any] = {
        "issue_id": _reference(uow, Issue, d.issue_id),
        "save_state": d.save_state,
    }
    sent = d.model_fields_set
    for field in ("saved_at", "final_checkpoint_at"):
        if field in sent:
            columns[field] = getattr(d, field)
    if d.saved_manifest is not None:
        columns["saved_manifest"] = _MANIFEST.dump_python(d.saved_manifest)
    if "writer_run_id" in sent:
        columns["writer_run_id"] = _reference(uow, HeartbeatRun, d.writer_run_id)
    uow.set(ExecutionWorkspace, ws, **columns)


def _apply_run(uow: _UnitOfWork, event: Event, d: s.RunUpserted) -> None:
    run = uow.upsert(HeartbeatRun, d.run_id, event)
    if run is None:
        return
    columns: dict[str, Any] = {"issue_id": _reference(uow, Issue, d.issue_id), "status": d.status}
    _assign(uow, HeartbeatRun, run, d, {"started_at": "started_at"})
    _assign(uow, HeartbeatRun, run, d, {"finished_at": "finished_at"})
    uow.set(HeartbeatRun, run, **columns)


def _apply_intent(uow: _UnitOfWork, event: Event, d: s.IntentUpserted) -> None:
    intent = uow.upsert(LeaseIntent, d.intent_id, event)
    if intent is None:
        return
    columns: dict[str, Any] = {
        "lease_id": _reference(uow, EnvironmentLease, d.lease_id),
        "kind": d.kind,
        "state": d.state,
    }
    if not intent.values.get("request_id"):
        columns["request_id"] = event.id
    uow.set(LeaseIntent, intent, **columns)


def _apply_export(uow: _UnitOfWork, event: Event, d: s.ExportUpserted) -> None:
    export = uow.upsert(PendingExport, d.export_id, event)
    if export is None:
        return
    uow.set(
        PendingExport,
        export,
        lease_id=_reference(uow, EnvironmentLease, d.lease_id),
        state=d.state,
    )


_HANDLERS: dict[type, Callable[[_UnitOfWork, Event, Any], None]] = {
    s.EnvironmentUpserted: _apply_environment,
    s.IssueUpserted: _apply_issue,
    s.WorkspaceUpserted: _apply_workspace,
    s.RunUpserted: _apply_run,
    s.LeaseUpserted: _apply_lease,
    s.LeaseReleased: _apply_release,
    s.ReceiptRecorded: _apply_receipt,
    s.IntentUpserted: _apply_intent,
    s.ExportUpserted: _apply_export,
    s.RecoveryActionUpserted: _apply_recovery_action,
}
assert set(_HANDLERS) == set(s.EVENT_TYPES.values()), "one handler per event type"
# The same for the fast path's schemas (`SCHEMA_OF`): one dict lookup an event.
_HANDLER_OF = {fast: _HANDLERS[schema] for fast, schema in s.SCHEMA_OF.items()}


def _apply(uow: _UnitOfWork, event: Event) -> None:
    """Fold one event into the rows: one handler per event type."""
    _HANDLER_OF[type(event.data)](uow, event, event.data)


def _referenced_ids(events: list[Event]) -> dict[Mirrored, set[Id]]:
    wanted: dict[Mirrored, set[Id]] = defaultdict(set)
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
