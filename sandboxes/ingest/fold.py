"""The fold of a batch's events into the rows they name (`sandboxes.ingest.apply`):
each event is applied in batch order, in memory, on plain values (no model
instances), to the rows the batch's unit of work (`batch.py`) read once."""

from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

from pydantic import TypeAdapter

from sandboxes.models import (
    Agent,
    Company,
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    LeaseIntent,
    PaperclipUser,
    PendingExport,
    RecoveryAction,
)
from sandboxes.models.choices import RECEIPT_SCHEMAS, ReceiptKind, TerminationState

from . import schemas as s
from .batch import Id, Row, UnitOfWork
from .moves import sandbox_move
from .schemas import Event, EventError
from .sql import Mirrored, column_defaults, model_field

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
    "agent_id": Agent,
    "assignee_agent_id": Agent,
    "user_id": PaperclipUser,
    "assignee_user_id": PaperclipUser,
    "created_by_user_id": PaperclipUser,
}
# Every event's company_id is a plain column (no row of its own is named or
# locked for it); only a company's own upsert reads its row.
_OWN_KEYS: dict[type, dict[str, Mirrored]] = {s.CompanyUpserted: {"company_id": Company}}
# The same, per event schema: only the fields it has.
_REFERENCES_OF: dict[type, tuple[tuple[str, Mirrored], ...]] = {
    fast: tuple(
        (f, m)
        for f, m in {**_REFERENCES, **_OWN_KEYS.get(schema, {})}.items()
        if f in schema.model_fields
    )
    for fast, schema in s.SCHEMA_OF.items()
}

# A workspace's manifest as stored: path -> {sha256, size}, in one call.
_MANIFEST: TypeAdapter[dict[str, s.ManifestEntry]] = TypeAdapter(dict[str, s.ManifestEntry])

_ENV_DEFAULTS = ("driver", "retirement_mode", "max_retirements_per_pass", "workspace_root")


def _assign(
    uow: UnitOfWork, model: Mirrored, row: Row, data: s.Data, mapping: dict[str, str]
) -> None:
    """Copy the fields the event carries (absent optional fields keep their value)."""
    sent = data.model_fields_set
    columns = {target: getattr(data, src) for src, target in mapping.items() if src in sent}
    if columns:
        uow.set(model, row, **columns)


def _reference(uow: UnitOfWork, model: Mirrored, pk: Id | None) -> Id | None:
    """An id a row points to; the row it names becomes a placeholder if unknown."""
    if pk is None:
        return None
    uow.get(model, pk)
    return pk


def _apply_environment(uow: UnitOfWork, event: Event, d: s.EnvironmentUpserted) -> None:
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
            uow.set(Environment, env, **{field: model_field(Environment, field).get_default()})


def _apply_lease(uow: UnitOfWork, event: Event, d: s.LeaseUpserted) -> None:
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


def _apply_release(uow: UnitOfWork, event: Event, d: s.LeaseReleased) -> None:
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


def _apply_receipt(uow: UnitOfWork, event: Event, d: s.ReceiptRecorded) -> None:
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


def _apply_recovery_action(uow: UnitOfWork, event: Event, d: s.RecoveryActionUpserted) -> None:
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


def _apply_issue(uow: UnitOfWork, event: Event, d: s.IssueUpserted) -> None:
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
    for field, model in _ISSUE_PEOPLE:
        if field in sent:
            columns[field] = _reference(uow, model, getattr(d, field))
    uow.set(Issue, issue, **columns)


# The people an issue names (docs/rules.md, the people around a sandbox).
_ISSUE_PEOPLE: tuple[tuple[str, Mirrored], ...] = (
    ("assignee_user_id", PaperclipUser),
    ("assignee_agent_id", Agent),
    ("created_by_user_id", PaperclipUser),
)


def _apply_company(uow: UnitOfWork, event: Event, d: s.CompanyUpserted) -> None:
    company = uow.upsert(Company, d.company_id, event)
    if company is not None:
        uow.set(Company, company, name=d.name)


def _apply_user(uow: UnitOfWork, event: Event, d: s.UserUpserted) -> None:
    user = uow.upsert(PaperclipUser, d.user_id, event)
    if user is not None:
        uow.set(PaperclipUser, user, name=d.name, email=d.email)


def _apply_agent(uow: UnitOfWork, event: Event, d: s.AgentUpserted) -> None:
    agent = uow.upsert(Agent, d.agent_id, event)
    if agent is not None:
        uow.set(Agent, agent, name=d.name)


def _apply_workspace(uow: UnitOfWork, event: Event, d: s.WorkspaceUpserted) -> None:
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


def _apply_run(uow: UnitOfWork, event: Event, d: s.RunUpserted) -> None:
    run = uow.upsert(HeartbeatRun, d.run_id, event)
    if run is None:
        return
    columns: dict[str, Any] = {"issue_id": _reference(uow, Issue, d.issue_id), "status": d.status}
    _assign(uow, HeartbeatRun, run, d, {"started_at": "started_at"})
    _assign(uow, HeartbeatRun, run, d, {"finished_at": "finished_at"})
    uow.set(HeartbeatRun, run, **columns)


def _apply_intent(uow: UnitOfWork, event: Event, d: s.IntentUpserted) -> None:
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


def _apply_export(uow: UnitOfWork, event: Event, d: s.ExportUpserted) -> None:
    export = uow.upsert(PendingExport, d.export_id, event)
    if export is None:
        return
    uow.set(
        PendingExport,
        export,
        lease_id=_reference(uow, EnvironmentLease, d.lease_id),
        state=d.state,
    )


_HANDLERS: dict[type, Callable[[UnitOfWork, Event, Any], None]] = {
    s.CompanyUpserted: _apply_company,
    s.UserUpserted: _apply_user,
    s.AgentUpserted: _apply_agent,
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


def _apply(uow: UnitOfWork, event: Event) -> None:
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


def _check_references(uow: UnitOfWork, events: list[Event]) -> list[EventError]:
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


def _policy_of(row: Row) -> dict[str, Any]:
    """`Environment.policy()` of a row the batch holds as plain values."""
    values = {**column_defaults(Environment), **row.values}
    return {
        "retirement_mode": values["retirement_mode"],
        "warm_retention_hours": values["warm_retention"].total_seconds() / 3600,
        "max_retirements_per_pass": values["max_retirements_per_pass"],
        "workspace_root": values["workspace_root"],
    }


def _refuse_policy(uow: UnitOfWork, event: Event, d: s.EnvironmentUpserted, env: Row) -> None:
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
