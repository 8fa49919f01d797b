"""Whether a pass may reuse the last listing: nothing it reads changed, no
time-based rule came due, the rules are the same code (docs/architecture.md,
"A pass over an unchanged fleet").

A full listing records where it started (`mark`: the database snapshot and the
highest change bump it saw, migration 0014), when the first time-based rule it
evaluated comes due (a warm retention ending, a claim expiring), and a hash of
the rule modules. The next pass in the same scope reuses it only if no write to
a table the listing reads was committed after that snapshot (or made by its own
transaction since), the due time has not come, the rules are unchanged and the
listing is younger than RELIST_AFTER (a full listing every ten minutes whatever
happens). Anything else lists in full. Reusing is exact: the listing is a
function of those tables, the clock (through the due times) and the rules; and
a listing's own writes come after its snapshot, so the pass after a listing
that changed anything lists again.

Everything the claim loop decides with the clock (backoff, notice periods,
retire_after) is not part of the listing: every pass still claims due records.
PostgreSQL only: elsewhere `mark` returns None and every pass lists.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from sandboxes import rules as ground_floor
from sandboxes.models import ReconcilerPass, choices

from . import candidates, listing, predicates, preservation, proof_facts

RELIST_AFTER = timedelta(minutes=10)
# Change-log rows older than every snapshot a pass may still compare with are
# dropped; a listing older than RELIST_AFTER is never compared with.
PRUNE_AFTER = 2 * RELIST_AFTER


def _rules_version() -> str:
    digest = hashlib.sha256()
    # The status sets the predicates use live in choices; the pure rules, every
    # module of them, in sandboxes/rules.
    rules = (candidates, proof_facts, predicates, listing, preservation, choices)
    files = [Path(str(module.__file__)) for module in rules]
    files += sorted(Path(str(ground_floor.__file__)).parent.glob("*.py"))
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


RULES_VERSION = _rules_version()


def mark() -> dict[str, Any] | None:
    """Where a listing starts: the snapshot and highest bump. Call before its reads.

    The bump is also noted for the rest of the transaction (`console.listed_bump`):
    the change-log trigger gives this transaction's row a higher bump at its next
    write, so a write after the listing in the same transaction is seen too
    (migration 0016: a transaction that never lists keeps its first bump)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_current_snapshot()::text, seen.bump, "
            "set_config('console.listed_bump', seen.bump::text, true) "
            "FROM (SELECT COALESCE(max(bump), 0) AS bump FROM console_change) AS seen"
        )
        snapshot, bump, _ = cursor.fetchone()
    return {"snapshot": snapshot, "bump": bump}


def listing_state(
    start: dict[str, Any] | None, at: datetime, due: datetime | None, candidate_count: int
) -> dict[str, Any]:
    """What a pass stores about the listing it made (ReconcilerPass.listing)."""
    if start is None:
        return {}
    return {
        **start,
        "at": at.isoformat(),
        "due": due.isoformat() if due is not None else None,
        "rules": RULES_VERSION,
        "candidates": candidate_count,
        "reused": False,
    }


def previous_listing(record: ReconcilerPass) -> dict[str, Any]:
    """The listing state of the latest other pass in the same scope ({} if none)."""
    row = (
        ReconcilerPass.objects.filter(environment_name=record.environment_name, dry_run=False)
        .filter(started_at__lte=record.started_at)
        .exclude(pk=record.pk)
        .order_by("-started_at")
        .values_list("listing", flat=True)
        .first()
    )
    return row or {}


def _time(value) -> datetime | None:
    return parse_datetime(value) if value else None


def still_current(state: dict[str, Any], now: datetime) -> bool:
    """True if a listing now would find exactly what `state`'s listing found.
    One query when the state is usable, none otherwise."""
    if connection.vendor != "postgresql" or not state.get("snapshot"):
        return False
    if state.get("rules") != RULES_VERSION:
        return False
    at, due = _time(state.get("at")), _time(state.get("due"))
    if at is None or not (at <= now < at + RELIST_AFTER):
        return False
    if due is not None and now >= due:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT NOT EXISTS (SELECT 1 FROM console_change WHERE bump > %(bump)s)
               AND NOT EXISTS (
                   SELECT 1 FROM console_change
                   WHERE xid >= pg_snapshot_xmin(%(snapshot)s::pg_snapshot)
                     AND NOT pg_visible_in_snapshot(xid, %(snapshot)s::pg_snapshot)
                     AND xid IS DISTINCT FROM pg_current_xact_id_if_assigned())
            """,
            {"bump": state["bump"], "snapshot": state["snapshot"]},
        )
        return bool(cursor.fetchone()[0])


def reused(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "reused": True}


def prune(now: datetime) -> int:
    """Drop change-log rows every snapshot still compared with already sees: those
    older than a listing that started PRUNE_AFTER ago (2 queries, a listing pass only)."""
    if connection.vendor != "postgresql":
        return 0
    old = (
        ReconcilerPass.objects.filter(started_at__lte=now - PRUNE_AFTER, dry_run=False)
        .order_by("-started_at")
        .values_list("listing", flat=True)
        .first()
    )
    if not old or not old.get("snapshot"):
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM console_change WHERE xid < pg_snapshot_xmin(%s::pg_snapshot)",
            [old["snapshot"]],
        )
        return cursor.rowcount
