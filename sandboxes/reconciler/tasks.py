"""The django-q2 task that runs one reconciler pass (scheduled by setup_schedules)."""

from __future__ import annotations

from sandboxes.models import Environment

from .passes import run_pass


def reconcile_pass(environment_name: str | None = None, dry_run: bool = False) -> dict:
    """Run one pass; overlapping passes are harmless (claims are fenced)."""
    environment = None
    if environment_name:
        environment = Environment.objects.get(name=environment_name)
    record = run_pass(environment=environment, dry_run=dry_run)
    return {
        "pass": None if record.dry_run else str(record.pk),  # a dry run saves no pass
        "candidates": record.candidates,
        "retired": record.retired,
        "failed": record.failed,
        "errors": len(record.errors),
    }
