"""Prometheus metrics at /metrics: fleet gauges read from the database at scrape
time, and provider call latency and errors observed in-process.

Fleet gauges (kept sandboxes by stage and kind, holds by code, retirements,
the latest pass) are computed by a collector in a fresh registry on every
scrape with a constant number of queries, so one scrape is one consistent
reading whichever process serves it. Provider calls happen in the reconciler's
workers, not in the web server: with PROMETHEUS_MULTIPROC_DIR set (shared by
gunicorn and the q cluster on one machine) the scrape aggregates every
process's calls; without it, only this process's.
"""

from __future__ import annotations

import hmac
import os
from collections import Counter

from django.conf import settings
from django.db.models import Count
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    generate_latest,
)
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sandboxes.api.auth import bearer_token
from sandboxes.models import ApiToken, ReconcilerPass, Retirement, companies_of
from sandboxes.models.choices import HoldCode, Stage, TokenScope
from sandboxes.providers import base as provider_base

PREFIX = "paperclip_console"

# --- provider calls (in-process, or shared through PROMETHEUS_MULTIPROC_DIR) ----

PROCESS_REGISTRY = CollectorRegistry(auto_describe=True)
PROVIDER_CALL_SECONDS = Histogram(
    f"{PREFIX}_provider_call_seconds",
    "Duration of provider operations (a step's retries inside its budget included).",
    ["provider", "operation"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90, 120),
    registry=PROCESS_REGISTRY,
)
PROVIDER_CALL_ERRORS = PromCounter(
    f"{PREFIX}_provider_call_errors",
    "Provider operations that raised, by error class.",
    ["provider", "operation", "error"],
    registry=PROCESS_REGISTRY,
)


def record_provider_call(
    provider: str, operation: str, seconds: float, error: type[BaseException] | None
) -> None:
    """A providers.base.CALL_HOOKS callback."""
    PROVIDER_CALL_SECONDS.labels(provider, operation).observe(seconds)
    if error is not None:
        PROVIDER_CALL_ERRORS.labels(provider, operation, error.__name__).inc()


def install_provider_hooks() -> None:
    """Register the provider call hook once per process (idempotent)."""
    if record_provider_call not in provider_base.CALL_HOOKS:
        provider_base.CALL_HOOKS.append(record_provider_call)


def _process_registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return PROCESS_REGISTRY


# --- fleet gauges from the database ---------------------------------------------


# The closed stages, each counted in its own counter family: (name, help).
CLOSED_FAMILIES = {
    Stage.RETIRED: ("retirements", "Sandboxes retired (destroyed with proof), by kind."),
    Stage.DISMISSED: (
        "dismissals",
        "Records closed without a retirement (the candidate stopped matching), by kind.",
    ),
    Stage.CORRECTED: (
        "corrections",
        "Corrections closed once their stop was confirmed (a sandbox kept running "
        "after an unsuccessful run, stopped and retained), by kind.",
    ),
}


class FleetCollector(Collector):
    """Reads the fleet in three queries, whatever its size: every record, or a
    company-limited token's records only, without the latest pass's
    fleet-wide counts (README, company scope)."""

    def __init__(self, actor=None):
        self.records = Retirement.objects.visible_to(actor)
        self.limited = companies_of(actor) is not None

    def collect(self):
        yield from _record_families(self.records)
        yield _holds_family(self.records)
        if not self.limited:
            yield from _latest_pass_families()


def _record_families(records):
    """Query 1: every record, grouped (a few dozen rows at most) - the open ones
    by stage and kind, and the closed ones by kind in their own counters."""
    rows = records.values("stage", "kind", "needs_attention").annotate(n=Count("id"))
    by_open: Counter = Counter()
    by_closed: dict[str, Counter] = {stage: Counter() for stage in CLOSED_FAMILIES}
    needs_attention = 0
    for row in rows:
        if row["stage"] in by_closed:
            by_closed[row["stage"]][row["kind"]] += row["n"]
        else:
            by_open[(row["stage"], row["kind"])] += row["n"]
            if row["needs_attention"]:
                needs_attention += row["n"]
    kept = GaugeMetricFamily(
        f"{PREFIX}_kept_sandboxes",
        "Kept sandboxes the reconciler tracks (open retirement records), by stage and kind.",
        labels=["stage", "kind"],
    )
    for (stage, kind), n in sorted(by_open.items()):
        kept.add_metric([stage, kind], n)
    yield kept
    attention = GaugeMetricFamily(
        f"{PREFIX}_needs_attention",
        "Open retirement records that failed 5 times or more and need an operator.",
    )
    attention.add_metric([], needs_attention)
    yield attention
    for stage, (name, documentation) in CLOSED_FAMILIES.items():
        closed = CounterMetricFamily(f"{PREFIX}_{name}", documentation, labels=["kind"])
        for kind, n in sorted(by_closed[stage].items()):
            closed.add_metric([kind], n)
        yield closed


def _holds_family(records) -> GaugeMetricFamily:
    """Query 2: hold codes of open records, counted in Python (portable; one
    short list per record)."""
    holds = GaugeMetricFamily(
        f"{PREFIX}_holds",
        "Open retirement records waiting on each hold code.",
        labels=["code"],
    )
    counts: Counter = Counter({code.value: 0 for code in HoldCode})
    for codes in records.open().values_list("holds", flat=True):
        for code in set(codes or ()):
            counts[code] += 1
    for code, n in sorted(counts.items()):
        holds.add_metric([code], n)
    return holds


def _latest_pass_families():
    """Query 3: the latest finished pass (families without samples before one)."""
    latest = (
        ReconcilerPass.objects.filter(finished_at__isnull=False, dry_run=False)
        .order_by("-finished_at")
        .values("started_at", "finished_at", "candidates", "retired", "failed", "errors")
        .first()
    )
    duration = GaugeMetricFamily(
        f"{PREFIX}_reconciler_pass_duration_seconds",
        "Duration of the latest finished reconciler pass.",
    )
    finished = GaugeMetricFamily(
        f"{PREFIX}_reconciler_pass_finished_timestamp_seconds",
        "When the latest reconciler pass finished (Unix time); alert when it gets old.",
    )
    pass_counts = GaugeMetricFamily(
        f"{PREFIX}_reconciler_pass_records",
        "Counts of the latest finished reconciler pass.",
        labels=["count"],
    )
    if latest is not None:
        duration.add_metric([], (latest["finished_at"] - latest["started_at"]).total_seconds())
        finished.add_metric([], latest["finished_at"].timestamp())
        pass_counts.add_metric(["candidates"], latest["candidates"])
        pass_counts.add_metric(["retired"], latest["retired"])
        pass_counts.add_metric(["failed"], latest["failed"])
        pass_counts.add_metric(["errors"], len(latest["errors"] or ()))
    return [duration, finished, pass_counts]


def render(actor=None) -> bytes:
    """The exposition for `actor` (None: METRICS_TOKEN, the whole fleet)."""
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(FleetCollector(actor))
    return generate_latest(fleet) + generate_latest(_process_registry())


# --- the view -----------------------------------------------------------------


def _authorized(raw: str) -> tuple[bool | None, ApiToken | None]:
    """(True, token): allowed, as the token (None: METRICS_TOKEN); (False, _): a
    valid token of the wrong scope; (None, None): unknown."""
    expected = settings.METRICS_TOKEN
    if expected and hmac.compare_digest(raw.encode(), expected.encode()):
        return True, None
    token = ApiToken.authenticate(raw)
    if token is None:
        return None, None
    return token.scope == TokenScope.OPERATOR, token


@never_cache
@require_GET
def metrics_view(request):
    """Prometheus exposition; `Authorization: Bearer` with METRICS_TOKEN or an
    operator-scope API token (401 without one, 403 for an ingest token)."""
    raw = bearer_token(request)
    allowed, token = _authorized(raw) if raw else (None, None)
    if allowed is None:
        response = JsonResponse({"error": "missing or invalid bearer token"}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="paperclip-console-metrics"'
        return response
    if not allowed:
        return JsonResponse({"error": "metrics need an operator-scope token"}, status=403)
    return HttpResponse(render(token), content_type=CONTENT_TYPE_LATEST)
