"""The salvage-then-retire state machine: advance one claimed record, a step at
a time (docs/architecture.md, steps 5-10).

    plan (claims.fenced, row lock: re-check predicate and holds, pick the step) — plan.py
    → provider I/O (no transaction open)                                         — steps.py
    → record (fenced on the claim: receipt + stage)                              — steps.py

The next step is derived from the record's receipts, never from memory, so a
worker that dies anywhere is continued by the next one from the last receipt.
Every destroy goes through `steps.retire_sandbox`, which asks
`gate.authorize_destroy`. A failed step goes to `failures.record_failure`.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.utils import timezone

from . import claims, signals
from .claims import DB_LOST, ClaimLost
from .failures import record_failure
from .gate import DestroyRefused
from .plan import plan_step
from .steps import (
    Action,
    Plan,
    do_compare,
    do_export,
    do_stop_before_wait,
    do_stop_only,
    retire_sandbox,
)
from .worker import Worker

log = logging.getLogger(__name__)

STEPS = {
    Action.STOP_ONLY: do_stop_only,
    Action.STOP_BEFORE_WAIT: do_stop_before_wait,
    Action.COMPARE: do_compare,
    Action.EXPORT: do_export,
    Action.RETIRE: retire_sandbox,
}


def advance(retirement_id, attempt_id, worker: Worker, *, max_steps: int = 8) -> None:
    """Advance one claimed record as far as it can go without waiting.

    A dropped database connection (DB_LOST) propagates with the claim still
    set: the caller reconnects and releases it (or leaves it to expire)."""
    try:
        _advance(retirement_id, attempt_id, worker, max_steps)
    except ClaimLost as exc:
        log.info("claim lost, result dropped: %s", exc)
    # A worker that dies (BaseException) leaves its claim to expire: that is the
    # crash the fencing is for, and what the crash-safety tests simulate.
    claims.release_claim(retirement_id, attempt_id)


def _run_step(plan: Plan, attempt_id, worker: Worker) -> None:
    """Run the plan's step, announced before and after (signals.step_started,
    step_finished: the chaos harness traces steps with them)."""
    signals.step_started.send(sender=__name__, plan=plan, attempt_id=attempt_id)
    try:
        STEPS[plan.action](plan, attempt_id, worker)
    finally:
        signals.step_finished.send(sender=__name__, plan=plan, attempt_id=attempt_id)


def _again_next_pass(plan: Plan, attempt_id) -> Plan | None:
    """A second compare planned in one pass: what the first one saw moved on while
    the record was worked. A pass compares a record at most once (docs/rules.md,
    claims and failures), so it is due again on the next pass, and the sandbox the
    console started is stopped before it waits: the stop's plan, or None."""
    with claims.fenced(plan.retirement_id, attempt_id) as r:
        r.next_attempt_at = timezone.now()
        r.save(update_fields=["next_attempt_at", "updated_at"])
        started = r.started_for_salvage
    log.info("sandbox %s: compared once this pass; again on the next", plan.sandbox_id)
    return replace(plan, action=Action.STOP_BEFORE_WAIT) if started else None


def _advance(retirement_id, attempt_id, worker: Worker, max_steps: int) -> None:
    compared = last = False
    for _ in range(max_steps):
        plan = plan_step(retirement_id, attempt_id, worker)
        if plan is None:
            log.info("record %s waits or is closed", retirement_id)
            break
        if plan.action == Action.COMPARE and compared:
            plan, last = _again_next_pass(plan, attempt_id), True
            if plan is None:
                break
        compared = compared or plan.action == Action.COMPARE
        try:
            _run_step(plan, attempt_id, worker)
        except (ClaimLost, *DB_LOST):
            # Not the step's failure: the claim or the connection is gone. No
            # attempt is counted; the record is worked again from its receipts.
            log.warning(
                "step %s on sandbox %s interrupted (claim or database lost)",
                plan.action,
                plan.sandbox_id,
            )
            raise
        except DestroyRefused as exc:
            log.warning("destroy refused for sandbox %s: %s", plan.sandbox_id, exc)
            record_failure(retirement_id, attempt_id, exc, worker)
            break
        except Exception as exc:
            log.warning(
                "step %s on sandbox %s failed, will retry: %s: %s",
                plan.action,
                plan.sandbox_id,
                type(exc).__name__,
                exc,
            )
            record_failure(retirement_id, attempt_id, exc, worker)
            worker.errors.append(
                {"retirement": str(retirement_id), "step": plan.action, "error": str(exc)[:500]}
            )
            break
        log.info("step %s on sandbox %s done", plan.action, plan.sandbox_id)
        worker.advanced += 1
        if last or plan.action == Action.STOP_ONLY:
            break
