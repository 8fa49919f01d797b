"""One reconciler pass: preservation, listing, then advancing every due record."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from django.db.models import Count, Q
from django.utils import timezone

from sandboxes.models import Environment, ReconcilerPass, Retirement
from sandboxes.models.choices import STAGES_CLOSED

from . import machine
from .listing import evaluate_fleet, sync_retirements
from .preservation import record_preservation_sources

log = logging.getLogger(__name__)
CLAIM_BATCH = 25


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_pass(
    *,
    environment: Environment | None = None,
    dry_run: bool = False,
    worker: str = "",
    provider_for: Callable | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 5.0,
) -> ReconcilerPass:
    """Run one pass and return its ReconcilerPass record (counts, errors)."""
    started = timezone.now()
    env_id = environment.pk if environment is not None else None
    record = ReconcilerPass.objects.create(
        started_at=started,
        dry_run=dry_run,
        environment_name=environment.name if environment is not None else "",
        worker=worker or worker_name(),
    )
    if dry_run:
        evaluated = evaluate_fleet(env_id, now=started)
        by_kind, by_stage = {}, {}
        for e in evaluated:
            by_kind[e.candidate.kind] = by_kind.get(e.candidate.kind, 0) + 1
            stage = "held" if e.blocking else "listed"
            by_stage[stage] = by_stage.get(stage, 0) + 1
        record.candidates = len(evaluated)
        record.counts_by_kind = by_kind
        record.counts_by_stage = by_stage
        record.finished_at = timezone.now()
        record.save()
        return record

    w = machine.Worker(name=record.worker)
    if provider_for is not None:
        w.provider_for = provider_for
    errors: list = []
    try:
        record_preservation_sources(env_id)
        sync = sync_retirements(env_id, now=started)
        record.candidates = sync.candidates
    except Exception as exc:
        log.exception("listing failed")
        errors.append({"step": "listing", "error": f"{type(exc).__name__}: {exc}"[:500]})

    seen: set = set()
    last_progress = time.monotonic()
    while not errors or seen:
        batch = machine.claim_due(limit=CLAIM_BATCH, environment_id=env_id, exclude=seen)
        if not batch:
            break
        for retirement_id, attempt_id in batch:
            seen.add(retirement_id)
            try:
                machine.advance(retirement_id, attempt_id, w)
            except Exception as exc:
                log.exception("advancing %s failed", retirement_id)
                errors.append({"retirement": str(retirement_id), "error": str(exc)[:500]})
                machine.release_claim(retirement_id, attempt_id)
            if progress and time.monotonic() - last_progress >= progress_every:
                last_progress = time.monotonic()
                progress(f"… {len(seen)} records worked, {w.retired} retired, {w.failed} failed")

    scope = Q() if env_id is None else Q(environment_id=env_id)
    rows = (
        Retirement.objects.filter(scope)
        .filter(~Q(stage__in=STAGES_CLOSED) | Q(closed_at__gte=started))
        .values("kind", "stage")
        .annotate(n=Count("id"))
    )
    by_kind, by_stage = {}, {}
    for row in rows:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["n"]
        by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + row["n"]
    record.counts_by_kind = by_kind
    record.counts_by_stage = by_stage
    record.advanced = w.advanced
    record.retired = w.retired
    record.failed = w.failed
    record.errors = (errors + w.errors)[:200]
    record.finished_at = timezone.now()
    record.save()
    return record
