"""The sizes a provider reports for each kept sandbox, for what it costs (docs/rules.md,
what a kept sandbox costs). A read only: allowed in every mode, observe included.

Each pass reads a bounded number of open records whose sizes are unknown or
older than a day, in environments that have a price table (without prices a
size buys nothing, and the read is not made); the provider-state button
records them too. The write is a plain UPDATE of the `reported_*` columns and
`reported_at` (it owns nothing else on the row), made even when the provider
reports no size, so a sandbox is read at most once a day.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from sandboxes.models import Retirement
from sandboxes.models.mirror import PRICE_FIELDS
from sandboxes.providers.registry import CLIENTS

log = logging.getLogger(__name__)

READS_PER_PASS = 100
STALE_AFTER = timedelta(days=1)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value >= 0 else None


def reported_sizes(info) -> dict | None:
    """{cpu, memory_gib, disk_gib} from a provider read, None for each size the
    provider did not report. `info.resources` (the provider protocol's typed
    sizes) when present, else Daytona's raw `cpu` / `memory` / `disk` (GiB)."""
    resources = getattr(info, "resources", None)
    if resources is not None:
        sizes = {
            "cpu": _number(getattr(resources, "cpu", None)),
            "memory_gib": _number(getattr(resources, "memory_gib", None)),
            "disk_gib": _number(getattr(resources, "disk_gib", None)),
        }
    else:
        raw = getattr(info, "raw", None) or {}
        sizes = {
            "cpu": _number(raw.get("cpu")),
            "memory_gib": _number(raw.get("memory")),
            "disk_gib": _number(raw.get("disk")),
        }
    if all(v is None for v in sizes.values()):
        return None
    return sizes


def record_sizes(retirement_id, info, *, now=None) -> bool:
    """Store what the read reported (unknown sizes as NULL); True if any size."""
    sizes = reported_sizes(info) or {}
    Retirement.objects.filter(pk=retirement_id).update(
        reported_cpu=sizes.get("cpu"),
        reported_memory_gib=sizes.get("memory_gib"),
        reported_disk_gib=sizes.get("disk_gib"),
        reported_at=now or timezone.now(),
    )
    return bool(sizes)


def refresh_sizes(worker, environment_id=None, *, now=None, limit: int = READS_PER_PASS) -> int:
    """Read the sizes of up to `limit` open records that have none or stale ones.
    A failed read is logged and skipped: it never fails the pass."""
    now = now or timezone.now()
    priced = Q()
    for name in PRICE_FIELDS:
        priced |= Q(**{f"environment__{name}__isnull": False})
    qs = (
        Retirement.objects.open()
        .filter(priced)
        # A provider without a client has no sizes to read (costs say "unknown").
        .filter(provider__in=CLIENTS)
        .filter(Q(reported_at__isnull=True) | Q(reported_at__lt=now - STALE_AFTER))
        .select_related("environment")
        .order_by("reported_at", "pk")
    )
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    done = 0
    for r in qs[:limit]:
        try:
            provider = worker.provider(r.environment, r.provider)
            info = provider.get(r.provider_lease_id)
        except Exception as exc:  # a read that fails costs us only this size
            log.info("sizes of %s not read: %s: %s", r.provider_lease_id, type(exc).__name__, exc)
            continue
        record_sizes(r.pk, info, now=now)
        done += 1
    return done
