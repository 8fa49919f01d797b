"""The django-q2 task that runs one reconciler pass (scheduled by setup_schedules)."""

from __future__ import annotations

import logging

from sandboxes.models import Environment
from sandboxes.notifications import owner_digest

from .passes import run_pass

log = logging.getLogger(__name__)


def reconcile_pass(environment_name: str | None = None, dry_run: bool = False) -> dict:
    """Run one pass; overlapping passes are harmless (claims are fenced). Then
    file and queue the owners' digests of the notices it gave, so an owner hears
    without waiting for the next sweep (README: Owner e-mail)."""
    environment = None
    if environment_name:
        environment = Environment.objects.get(name=environment_name)
    record = run_pass(environment=environment, dry_run=dry_run)
    if not record.dry_run:
        try:
            owner_digest.run()
        except Exception:
            log.exception("could not file the owners' digests (the sweep will)")
    return {
        "pass": None if record.dry_run else str(record.pk),  # a dry run saves no pass
        "candidates": record.candidates,
        "retired": record.retired,
        "failed": record.failed,
        "errors": len(record.errors),
    }
