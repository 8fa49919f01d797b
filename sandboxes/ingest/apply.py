"""Applies a validated batch in one transaction, set-based, with a fixed number
of queries whatever the batch's size (docs/architecture.md, "Recorded").

1. The event ids are recorded (one INSERT; those seen before are duplicates).
   The rows the batch names are read once, only the columns the fold needs
   (locked on PostgreSQL, in id order; every table in one statement).
2. The events are folded per row in memory, in batch order, on plain values
   keyed by id strings (no model instances): an event older than what its row
   already holds is skipped; rows named before their own upsert become
   placeholders.
3. New rows of every table and the receipts in one INSERT … ON CONFLICT DO
   NOTHING statement (a WITH query per table); rows that already existed in
   one UPDATE … FROM the batch per table, setting only the columns each row's
   events sent, and only where the batch's source time is not older than the
   row's (the ordering check, in SQL). The release rule (a missing status
   comes from the disposition) is a SQL expression of the same table as
   `sandboxes.rules.release.release_status`.

On PostgreSQL the rows travel as one JSON document per table
(`json_to_recordset`); elsewhere (the embedded SQLite) through the ORM, a
statement per table.

The rows the batch names, read and written back, are its unit of work
(`sandboxes/ingest/batch.py`); the fold (step 2) is `sandboxes/ingest/fold.py`;
the statements (steps 1 and 3) are `sandboxes/ingest/sql.py`.
"""

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from sandboxes import audit
from sandboxes.models import EnvironmentLease, Receipt
from sandboxes.models.choices import PROVIDER_RECEIPT_KINDS

from . import schemas as s
from .batch import Id, UnitOfWork
from .fold import _apply, _check_references, _referenced_ids
from .schemas import Event, EventError
from .sql import record_event_ids


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


def apply_events(source: str, events: list[Event], *, actor: Any = None) -> BatchResult:
    """Apply a validated batch all-or-nothing; a repeated event id is a no-op.

    Raises BatchRejected (and changes nothing) if an event names something
    the batch cannot apply.
    """
    events = s.plain_ids(events)
    try:
        return _apply_batch(source, events, actor)
    except IntegrityError:
        # Another request recorded one of these event ids at the same moment;
        # once more, and those ids count as duplicates.
        return _apply_batch(source, events, actor)


def _check_early_receipts(uow: UnitOfWork, events: list[Event], actor: Any) -> None:
    """A receipt can arrive before its lease row (it is then stored against a
    placeholder and cannot be checked). When the lease arrives, every receipt
    recorded for it is validated against its sandbox (docs/rules.md, proof): one
    naming another sandbox is named in the answer's warnings and
    audited. It stays (receipts are append-only) but proves nothing: every
    check matches a receipt on run, lease AND provider_lease_id. At most 1 query."""
    upserted: dict[Id, int] = {}
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
    for receipt_id, lease_id, named, request_id, kind in _recorded_receipts(uow, sandbox):
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


def _audit_moves(uow: UnitOfWork, actor: Any) -> None:
    """Each lease a newer report moved to another sandbox, in the audit trail
    (a record on the old sandbox closes on the next pass: docs/rules.md, holds).
    One INSERT per move; moves are rare."""
    for index, lease_id, before, after, held, at in uow.moves:
        audit.record(
            actor=actor,
            action="lease.sandbox_moved",
            obj=EnvironmentLease(pk=lease_id, provider_lease_id=after[1]),
            reason=f"a newer report (event {index}) moved the lease from sandbox "
            f"{before[1]!r} to {after[1]!r}",
            before={
                "provider": before[0],
                "provider_lease_id": before[1],
                "source_updated_at": held.isoformat() if held else None,
            },
            after={
                "provider": after[0],
                "provider_lease_id": after[1],
                "source_updated_at": at.isoformat(),
            },
        )


def _recorded_receipts(uow: UnitOfWork, leases: dict[Id, str]) -> list[tuple]:
    """(id, lease id, sandbox, request id, kind) of every provider receipt
    recorded for these leases, by confirmation time.

    A lease row this batch inserted itself had no row before it, so the only
    receipts that can name it are this batch's own: they are read from the
    batch. The others (a placeholder row before the batch, or a row another
    batch inserted meanwhile) are read from the database, in one query."""
    ours = uow.inserted[EnvironmentLease]
    stored = [pk for pk in leases if pk not in ours]
    found: list[tuple] = []
    seen: set[tuple] = set()
    for r in uow.receipts:
        lease, kind, request_id = key = (r["lease_id"], r["kind"], r["request_id"])
        if lease not in leases or lease not in ours or kind not in PROVIDER_RECEIPT_KINDS:
            continue
        if key not in seen:  # a repeat (same lease, kind and request) is not inserted
            seen.add(key)
            found.append(
                (r["confirmed_at"], r["id"], lease, r["provider_lease_id"], request_id, kind)
            )
    if stored:
        rows = Receipt.objects.filter(lease_id__in=stored, kind__in=PROVIDER_RECEIPT_KINDS)
        found += [
            (confirmed_at, pk, str(lease), named, request_id, kind)
            for confirmed_at, pk, lease, named, request_id, kind in rows.values_list(
                "confirmed_at", "id", "lease_id", "provider_lease_id", "request_id", "kind"
            )
        ]
    found.sort(key=lambda receipt: receipt[0])
    return [receipt[1:] for receipt in found]


def _apply_batch(source: str, events: list[Event], actor: Any) -> BatchResult:
    with transaction.atomic():
        recorded = record_event_ids(source, events)
        fresh: list[Event] = []
        for event in events:
            if event.id in recorded:
                recorded.discard(event.id)  # a repeat inside the batch counts once
                fresh.append(event)

        uow = UnitOfWork()
        uow.load(_referenced_ids(fresh))
        errors = _check_references(uow, fresh)
        if errors:
            raise BatchRejected(errors)

        for event in fresh:
            _apply(uow, event)
        if uow.errors:
            raise BatchRejected(uow.errors)
        uow.write()
        _check_early_receipts(uow, fresh, actor)
        _audit_moves(uow, actor)
    return BatchResult(
        accepted=len(fresh), duplicates=len(events) - len(fresh), warnings=tuple(uow.warnings)
    )
