"""Claims: one worker works a record at a time (docs/rules.md, claims and failures).

A worker claims one due record (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1, then a
fenced claim: attempt_id + claimed_until); every later write happens in
`fenced`, which holds the record's row lock only while the claim holds, so a
worker that lost its claim writes nothing. A dropped database connection
(`DB_LOST`) is not a step's failure: the worker reconnects and goes on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from sandboxes.models import Retirement
from sandboxes.models.console import CLAIM_SECONDS

from . import signals

log = logging.getLogger(__name__)

# A dropped or broken database connection (server restart, pg_terminate_backend,
# network cut). Nothing half-written survives it: each fenced write is one
# transaction. The record is retried; the worker reconnects and goes on.
DB_LOST = (OperationalError, InterfaceError)


def reset_connection() -> None:
    """Drop this thread's database connection so the next query reconnects."""
    try:
        connection.close()
    except Exception as exc:  # a dead socket may complain on close; it is gone either way
        log.debug("closing a broken database connection: %s", exc)


class ClaimLost(Exception):
    """Another worker owns the record now (our claim expired); drop our result."""


@dataclass(frozen=True)
class Claim:
    retirement_id: uuid.UUID
    attempt_id: uuid.UUID
    lease_id: uuid.UUID | None


def claim_next(*, environment_id=None, exclude=(), now=None) -> Claim | None:
    """Claim ONE due, unclaimed record in a short transaction
    (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1, then the fenced claim write).

    One at a time, so concurrent workers interleave over the due records and a
    worker that dies strands at most the one record it was working on."""
    now = now or timezone.now()
    with transaction.atomic():
        qs = Retirement.objects.due(now).exclude(claimed_until__gt=now)
        if environment_id is not None:
            qs = qs.filter(environment_id=environment_id)
        if exclude:
            qs = qs.exclude(pk__in=list(exclude))
        row = (
            qs.select_for_update(skip_locked=True)
            .order_by(F("next_attempt_at").asc(nulls_first=True), "pk")
            .values_list("pk", "lease_id")
            .first()
        )
        if row is None:
            return None
        attempt = uuid.uuid4()
        Retirement.objects.filter(pk=row[0]).update(
            attempt_id=attempt, claimed_until=now + timedelta(seconds=CLAIM_SECONDS)
        )
    claim = Claim(retirement_id=row[0], attempt_id=attempt, lease_id=row[1])
    signals.claimed.send(sender=__name__, claim=claim)
    return claim


@contextmanager
def fenced(retirement_id, attempt_id) -> Iterator[Retirement]:
    """A transaction holding the record's row lock, only while our claim holds."""
    with transaction.atomic():
        r = (
            Retirement.objects.select_for_update()
            .filter(pk=retirement_id, attempt_id=attempt_id, claimed_until__gt=timezone.now())
            .select_related("environment", "lease")
            .first()
        )
        if r is None:
            raise ClaimLost(f"claim {attempt_id} on {retirement_id} no longer holds")
        yield r


def release_claim(retirement_id, attempt_id) -> None:
    Retirement.objects.filter(pk=retirement_id, attempt_id=attempt_id).update(
        attempt_id=None, claimed_until=None
    )
