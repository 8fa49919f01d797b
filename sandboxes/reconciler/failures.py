"""What a failed step leaves behind (docs/rules.md, claims and failures): the
sandbox as the console found it (stopped again if the console started it), an
audited attempt, and a retry after a backoff from 30 s doubling to 30 min;
needs attention after five failures, never given up."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from sandboxes import audit
from sandboxes.models import Retirement
from sandboxes.models.choices import Stage
from sandboxes.notifications import events as notify
from sandboxes.receipts import write_stop_receipts

from .claims import DB_LOST, ClaimLost, fenced
from .steps import stop

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger(__name__)

BACKOFF_FIRST = 30
BACKOFF_CAP = 30 * 60
NEEDS_ATTENTION_AFTER = 5


def backoff(attempts: int) -> timedelta:
    """30 s, doubling, capped at 30 min; once 5 attempts have failed, every 30 min
    (docs/rules.md, claims and failures), the same point at which needs_attention is set."""
    if attempts >= NEEDS_ATTENTION_AFTER:
        return timedelta(seconds=BACKOFF_CAP)
    return timedelta(seconds=min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** max(0, attempts - 1)))


def _stop_if_started(retirement_id, attempt_id, worker: Worker) -> None:
    """Put back the state the console found: a sandbox it started for salvage is
    stopped again. A failure here is left to the retry (it stops it then)."""
    try:
        r0 = Retirement.objects.select_related("environment").get(pk=retirement_id)
        if r0.started_for_salvage and r0.attempt_id == attempt_id:
            conf = stop(worker.provider(r0.environment, r0.provider), r0.provider_lease_id)
            with fenced(retirement_id, attempt_id) as r:
                if conf is not None:
                    write_stop_receipts(r, conf, retain=False)
                r.started_for_salvage = False
                r.save()
    except DB_LOST:
        raise
    except Exception as stop_exc:  # the retry will stop it; record the first error
        log.warning("could not stop %s after a failure: %s", retirement_id, stop_exc)


def record_failure(retirement_id, attempt_id, exc: BaseException, worker: Worker) -> None:
    """Keep the sandbox as it was (stopped again if we started it) and schedule a retry."""
    _stop_if_started(retirement_id, attempt_id, worker)
    now = timezone.now()
    try:
        with fenced(retirement_id, attempt_id) as r:
            was_attention = r.needs_attention
            was_stage = r.stage
            was_attempts = r.attempts
            r.attempts += 1
            r.failing_since = r.failing_since or now
            r.last_error = f"{type(exc).__name__}: {exc}"[:2000]
            r.needs_attention = r.attempts >= NEEDS_ATTENTION_AFTER
            r.next_attempt_at = now + backoff(r.attempts)
            r.stage = Stage.FAILED
            r.save()
            # Every failed attempt gets its own audit row with its error; the one
            # that turns the record to needs_attention is named so.
            audit.record(
                actor=None,
                action="retirement.needs_attention"
                if r.needs_attention and not was_attention
                else "retirement.failed",
                obj=r,
                reason=r.last_error,
                before={"stage": was_stage, "attempts": was_attempts},
                after={
                    "stage": r.stage,
                    "attempts": r.attempts,
                    "next_attempt_at": r.next_attempt_at.isoformat(),
                },
            )
            if r.needs_attention and not was_attention:
                notify.needs_attention(r)
    except ClaimLost:
        pass
    worker.failed += 1
