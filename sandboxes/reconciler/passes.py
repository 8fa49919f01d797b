"""One reconciler pass: preservation, listing, then advancing every due record.

Records are claimed one at a time (claim, work, claim the next), so several
workers interleave over the due records and a worker that dies strands at
most one record until its claim expires. A dropped database connection ends
neither the pass nor the worker: it reconnects and goes on; the record whose
step was cut is released (or left for its claim to expire) and retried from
its receipts. A pass beats as it works, and first marks passes whose worker
is gone as interrupted (liveness.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db.models import Count, Q
from django.utils import timezone

from sandboxes.costs import fleet_costs
from sandboxes.logging import log_context
from sandboxes.models import Environment, ReconcilerPass, Retirement
from sandboxes.models.passes import RECORDS_KEPT

from . import changes, claims, machine, paperclip_uploads, sizes
from .hold_ends import end_operator_holds
from .listing import evaluate_fleet, sync_retirements
from .liveness import Heartbeat, interrupt_gone, worker_name
from .preservation import record_preservation_sources, resolve_preservation_actions
from .worker import Worker

log = logging.getLogger(__name__)
# Consecutive dropped-connection errors after which a pass stops claiming and
# leaves the rest to the next pass (the database is down, not just blinking).
MAX_DB_ERRORS = 3


def _db_retry(fn, what: str, attempts: int = 3):
    """Run `fn`, reconnecting after a dropped connection; the last error propagates."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except claims.DB_LOST as exc:
            log.warning(
                "database connection lost during %s (%s/%s): %s", what, attempt, attempts, exc
            )
            claims.reset_connection()
            if attempt == attempts:
                raise
            time.sleep(0.2 * attempt)
    return None  # pragma: no cover


def run_pass(
    *,
    environment: Environment | None = None,
    dry_run: bool = False,
    worker: str = "",
    provider_for: Callable | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 5.0,
) -> ReconcilerPass:
    """Run one pass and return its ReconcilerPass record (counts, errors).

    A dry run writes nothing - not even its pass row - and calls no provider: it
    returns an unsaved ReconcilerPass whose `would` lists what a pass would list."""
    started = timezone.now()
    env_id = environment.pk if environment is not None else None
    if dry_run:
        return _dry_run(
            ReconcilerPass(
                started_at=started,
                dry_run=True,
                environment_name=environment.name if environment is not None else "",
                worker=worker or worker_name(),
            ),
            env_id,
            started,
        )
    record = _db_retry(
        lambda: ReconcilerPass.objects.create(
            started_at=started,
            last_seen_at=started,
            dry_run=dry_run,
            environment_name=environment.name if environment is not None else "",
            worker=worker or worker_name(),
        ),
        "starting the pass",
    )
    with log_context(pass_id=record.pk):
        log.info("pass started")
        return _run(record, env_id, started, provider_for, progress, progress_every)


def _dry_run(record: ReconcilerPass, env_id, started) -> ReconcilerPass:
    """Read-only: list and explain (evaluate_fleet only reads); the record is not saved."""
    evaluated = evaluate_fleet(env_id, now=started)
    by_kind: dict[str | None, int] = {}
    by_stage: dict[str, int] = {}
    record.would = []
    for e in evaluated:
        c = e.candidate
        by_kind[c.kind] = by_kind.get(c.kind, 0) + 1
        stage = "held" if e.blocking else "listed"
        by_stage[stage] = by_stage.get(stage, 0) + 1
        why = f" ({', '.join(e.blocking)})" if e.blocking else ""
        record.would.append(f"{c.provider}:{c.provider_lease_id} {c.kind}: {stage}{why}")
    record.candidates = len(evaluated)
    record.counts_by_kind = by_kind
    record.counts_by_stage = by_stage
    record.finished_at = timezone.now()
    log.info("dry run: %s candidates (nothing written)", record.candidates)
    return record


def _listing(record: ReconcilerPass, env_id, started) -> None:
    """Preservation and listing, or, if nothing they read changed and no
    time-based rule came due since the last listing in this scope, that
    listing's result as it stands (sandboxes/reconciler/changes.py)."""
    previous = changes.previous_listing(record)
    if changes.still_current(previous, started):
        record.candidates = previous.get("candidates", 0)
        record.listing = changes.reused(previous)
        log.info("listing: nothing changed; %s candidates as listed", record.candidates)
        return
    start = changes.mark()  # before every read the listing makes
    record_preservation_sources(env_id)
    resolve_preservation_actions(env_id)
    sync = sync_retirements(env_id, now=started)
    record.candidates = sync.candidates
    _touched(record.records, "listed", sync.listed_ids)
    _touched(record.records, "dismissed", sync.dismissed_ids)
    record.listing = changes.listing_state(start, started, sync.due_at, sync.candidates)
    changes.prune(started)
    log.info(
        "listing: %s candidates, %s listed, %s dismissed",
        sync.candidates,
        sync.created,
        sync.dismissed,
    )


def _run(record, env_id, started, provider_for, progress, progress_every) -> ReconcilerPass:
    w = Worker(name=record.worker)
    if provider_for is not None:
        w.provider_for = provider_for
    errors: list = []
    beat = Heartbeat(record.pk)
    _interrupt_gone(started)
    _end_holds(env_id, started, errors)
    _list_step(record, env_id, started, errors)
    # A full listing is a pass's slow part; a reused one takes no time to report.
    beat.beat(force=not record.listing.get("reused"))
    _refresh_sizes(w, env_id, started)
    worked = _work_due(env_id, w, errors, beat, progress, progress_every, record.records)
    _attach_to_paperclip(errors)
    record = _db_retry(lambda: _finish(record, env_id, started, w, errors), "finishing the pass")
    log.info(
        "pass finished: %s worked, %s advanced, %s retired, %s failed, %s errors",
        worked,
        w.advanced,
        w.retired,
        w.failed,
        len(record.errors),
    )
    return record


def _list_step(record: ReconcilerPass, env_id, started, errors: list) -> None:
    """The listing (or its reuse); a failure is recorded and the pass goes on."""
    try:
        _listing(record, env_id, started)
    except claims.DB_LOST as exc:
        # Due records do not need this pass's listing: each is re-judged under
        # its row lock before any step. Reconnect and work them.
        log.warning("listing: database connection lost: %s", exc)
        errors.append({"step": "listing", "error": f"{type(exc).__name__}: {exc}"[:500]})
        claims.reset_connection()
    except Exception as exc:
        log.exception("listing failed")
        errors.append({"step": "listing", "error": f"{type(exc).__name__}: {exc}"[:500]})


def _end_holds(env_id, started, errors: list) -> None:
    """Operator holds whose end has come are released before the listing, which
    then judges those records again (hold_ends.py)."""
    try:
        ended = end_operator_holds(env_id, now=started)
    except claims.DB_LOST as exc:
        log.warning("ending holds: database connection lost: %s", exc)
        errors.append({"step": "hold_ends", "error": f"{type(exc).__name__}: {exc}"[:500]})
        claims.reset_connection()
    else:
        if ended:
            log.info("%s operator holds ended", ended)


def _interrupt_gone(started) -> None:
    try:
        interrupt_gone(started)
    except claims.DB_LOST as exc:
        log.warning("marking interrupted passes: database connection lost: %s", exc)
        claims.reset_connection()


def _refresh_sizes(w: Worker, env_id, started) -> None:
    try:
        # Reads only (every mode): the sizes what each kept sandbox costs is priced by.
        sizes.refresh_sizes(w, env_id, now=started)
    except claims.DB_LOST as exc:
        log.warning("sizes: database connection lost: %s", exc)
        claims.reset_connection()


def _attach_to_paperclip(errors: list) -> None:
    """After the records, apart from them: verified exports attached to their
    Paperclip task (paperclip_uploads.py). A failure here fails no record."""
    try:
        done = paperclip_uploads.sweep()
    except claims.DB_LOST as exc:
        log.warning("paperclip uploads: database connection lost: %s", exc)
        claims.reset_connection()
        return
    except Exception as exc:
        log.exception("paperclip uploads failed")
        errors.append({"step": "paperclip", "error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    if done is not None and (done.attached or done.failed):
        log.info("paperclip uploads: %s attached, %s not yet", done.attached, done.failed)


def _touched(records: dict, what: str, ids: list) -> None:
    """Note on the pass which records it `what` (listed, advanced, …), bounded."""
    if ids:
        kept = records.setdefault(what, [])
        kept.extend(str(pk) for pk in ids[: max(RECORDS_KEPT - len(kept), 0)])


def _work_due(
    env_id, w: Worker, errors: list, beat: Heartbeat, progress, progress_every, touched: dict
) -> int:
    """Claim and advance due records one at a time until none is left (or the
    database keeps dropping), beating between them; returns how many records
    were worked, and notes each in `touched` by what became of it."""
    seen: set = set()
    db_errors = 0  # consecutive
    last_progress = time.monotonic()
    while db_errors < MAX_DB_ERRORS:
        beat.beat()
        try:
            claim = claims.claim_next(environment_id=env_id, exclude=seen)
        except claims.DB_LOST as exc:
            db_errors += 1
            log.warning("claiming: database connection lost: %s", exc)
            errors.append({"step": "claim", "error": f"{type(exc).__name__}: {exc}"[:500]})
            claims.reset_connection()
            time.sleep(0.2 * db_errors)
            continue
        if claim is None:
            break
        seen.add(claim.retirement_id)
        before = (w.advanced, w.retired, w.failed, len(errors))
        db_errors = _advance(claim, w, errors, db_errors)
        for what, was, now in zip(
            ("advanced", "retired", "failed", "failed"),
            before,
            (w.advanced, w.retired, w.failed, len(errors)),
            strict=True,
        ):
            if now > was and str(claim.retirement_id) not in touched.get(what, ()):
                _touched(touched, what, [claim.retirement_id])
        if progress and time.monotonic() - last_progress >= progress_every:
            last_progress = time.monotonic()
            progress(f"… {len(seen)} records worked, {w.retired} retired, {w.failed} failed")
    if db_errors >= MAX_DB_ERRORS:
        log.warning("pass stops claiming after %s database errors in a row", db_errors)
    return len(seen)


def _advance(claim: claims.Claim, w: Worker, errors: list, db_errors: int) -> int:
    """Advance one claimed record; returns the new count of consecutive
    dropped-connection errors (0 after a success, unchanged after another error)."""
    with log_context(lease_id=claim.lease_id, attempt_id=claim.attempt_id):
        try:
            machine.advance(claim.retirement_id, claim.attempt_id, w)
            return 0
        except claims.DB_LOST as exc:
            log.warning("record %s: database connection lost: %s", claim.retirement_id, exc)
            errors.append(
                {"retirement": str(claim.retirement_id), "error": f"database lost: {exc}"[:500]}
            )
            claims.reset_connection()
            _release(claim)
            return db_errors + 1
        except Exception as exc:
            log.exception("advancing %s failed", claim.retirement_id)
            errors.append({"retirement": str(claim.retirement_id), "error": str(exc)[:500]})
            _release(claim)
            return db_errors


def _finish(record: ReconcilerPass, env_id, started, w: Worker, errors: list) -> ReconcilerPass:
    """Record the pass: counts by kind/stage, fleet costs, the worker's totals."""
    scope = Q() if env_id is None else Q(environment_id=env_id)
    rows = (
        (Retirement.objects.open() | Retirement.objects.filter(closed_at__gte=started))
        .filter(scope)
        .values("kind", "stage")
        .annotate(n=Count("id"))
    )
    by_kind: dict[str, int] = {}
    by_stage: dict[str, int] = {}
    for row in rows:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["n"]
        by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + row["n"]
    record.counts_by_kind = by_kind
    record.counts_by_stage = by_stage
    fleet = fleet_costs(scope)
    record.counts_by_environment = fleet["by_environment"]
    record.cost_per_day = fleet["cost_per_day"]
    record.cost_unknown = fleet["unknown"]
    record.advanced = w.advanced
    record.retired = w.retired
    record.failed = w.failed
    record.errors = (errors + w.errors)[:200]
    record.finished_at = record.last_seen_at = timezone.now()
    record.interrupted_at = None  # a pass that finishes was only ever stalled
    record.save()
    return record


def _release(claim: claims.Claim) -> None:
    """Give the record back now (fenced on our attempt id). If even that fails,
    the claim simply expires: fenced writes keep anyone else safe meanwhile."""
    try:
        claims.release_claim(claim.retirement_id, claim.attempt_id)
    except claims.DB_LOST as exc:
        log.warning("could not release claim %s; it will expire: %s", claim.attempt_id, exc)
        claims.reset_connection()
