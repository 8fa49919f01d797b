"""A lease row names one sandbox; only a newer report moves it to another
(docs/rules.md, proof: a record acts on the sandbox its lease names)."""

from __future__ import annotations

from typing import Any

from . import schemas as s
from .schemas import Event, EventError


def sandbox_move(
    held: dict[str, Any], event: Event, d: s.LeaseUpserted
) -> tuple[EventError | None, tuple | None]:
    """(error, move) for a report of a lease row the console holds (`held`, its
    values as the batch sees them). A report naming another sandbox at the same
    source time is refused, naming the field; a newer one is a move, kept for the
    audit trail: (event index, lease id, (provider, sandbox) before, after,
    source time before, after). An older report is left to the upsert, which
    ignores it."""
    before = (held["provider"], held["provider_lease_id"])
    if before == (d.provider, d.provider_lease_id):
        return None, None
    at = held["source_updated_at"]
    if at is not None and at > event.occurred_at:
        return None, None
    if at is not None and at == event.occurred_at:
        return (
            EventError(
                event.index,
                "data.provider_lease_id",
                f"lease {d.lease_id} names sandbox {before[1]!r} ({before[0]}); moving it to "
                f"{d.provider_lease_id!r} needs a report newer than {at.isoformat()}",
            ),
            None,
        )
    after = (d.provider, d.provider_lease_id)
    return None, (event.index, d.lease_id, before, after, at, event.occurred_at)
