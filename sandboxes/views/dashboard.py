"""The dashboard: what needs a person first (failing now, awaiting approval; an
overdue reconciler is the heartbeat's banner, on every page), then counts by
stage and kind, what the kept sandboxes cost, and the trend of kept sandboxes,
retirements and cost - refreshed live."""

from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sandboxes.costs import daily_cost_expression, money, storage_bytes_expression
from sandboxes.models import ReconcilerPass, Retirement, companies_of
from sandboxes.models.choices import STAGES_CLOSED, RetirementKind, Stage
from sandboxes.views.common import (
    LIVE_TRIGGER,
    console_view,
    live_fingerprint,
    unchanged_poll,
    visible_records,
)
from sandboxes.views.common import with_etag as _with_etag

CHART_PASSES = 48
CHART_W, CHART_H, CHART_PAD, CHART_LEFT, CHART_RIGHT = 640, 200, 30, 46, 58
CHART_RIGHT_X = CHART_W - CHART_RIGHT  # where "now" is drawn
CHART_INNER_H = CHART_H - 2 * CHART_PAD
CHART_BASE = CHART_PAD + CHART_INNER_H  # the y of zero
RECLAIM_DAYS = 30
# Line colours for the per-environment split (enough contrast on white).
PALETTE = ["#2457c5", "#b25e00", "#7b3fb5", "#1e7b34", "#b3261e", "#0f6f7a", "#6b5a00"]


def _nice_top(value: float) -> float:
    """A round axis maximum ≥ value: 1, 2, 5 × 10^n."""
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 1
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def trend_chart(
    passes: list[ReconcilerPass],
    now_open: int,
    now,
    *,
    split: bool = False,
    now_by_env: dict | None = None,
    now_cost: Decimal | None = None,
) -> dict | None:
    """Geometry for a server-rendered SVG, oldest pass on the left, ending on "now":
    kept sandboxes (a line, or one line per environment when `split`), retirements
    per pass (bars) and the daily cost held (a dashed line on the right axis).
    The count line ends on `now_open`, the dashboard's tile."""
    passes = sorted(passes, key=lambda p: p.started_at)
    if not passes:
        return None
    step = (CHART_RIGHT_X - CHART_LEFT) / len(passes)
    xs = [round(CHART_LEFT + i * step, 1) for i in range(len(passes))] + [CHART_RIGHT_X]
    stamps = [f"{p.started_at:%Y-%m-%d %H:%M}" for p in passes] + ["now"]
    series = _kept_series(passes, now_open, split=split, now_by_env=now_by_env)
    values = [v for vs in series.values() for v in vs if v is not None]
    top = _nice_top(max([*values, *(p.retired for p in passes), 1]))
    return {
        "w": CHART_W,
        "h": CHART_H,
        "left": CHART_LEFT,
        "right": CHART_RIGHT_X,
        "top_y": CHART_PAD,
        "base": CHART_BASE,
        "mid_y": round(CHART_PAD + CHART_INNER_H / 2, 1),
        "mid_x": round((CHART_LEFT + CHART_RIGHT_X) / 2, 1),
        "top": top,
        "lines": _kept_lines(series, xs, stamps, top),
        "bars": _retired_bars(passes, xs, step, top),
        "cost": _cost_line([p.cost_per_day for p in passes] + [now_cost], xs, stamps),
        "first_at": passes[0].started_at,
        "now_open": now_open,
        "total_retired": sum(p.retired for p in passes),
        "count": len(passes),
        "split": split,
    }


def _y(value: float, scale: float) -> float:
    """The SVG y of `value` on an axis running from 0 (the base) to `scale` (the top)."""
    return round(CHART_PAD + CHART_INNER_H - CHART_INNER_H * float(value) / scale, 1)


def _kept_series(
    passes: list[ReconcilerPass], now_open: int, *, split: bool, now_by_env: dict | None
) -> dict[str, list]:
    """Kept sandboxes per pass, then now: one series, or one per environment
    (None where a pass did not count that environment)."""
    if not split:
        return {"all environments": [p.candidates for p in passes] + [now_open]}
    now_by_env = now_by_env or {}
    names = sorted(
        {name for p in passes for name in (p.counts_by_environment or {})} | set(now_by_env)
    )
    return {
        name: [(p.counts_by_environment or {}).get(name) for p in passes]
        + [now_by_env.get(name, 0)]
        for name in names
    }


def _kept_lines(series: dict[str, list], xs: list, stamps: list, top: float) -> list[dict]:
    """One polyline with a titled dot per point for each series, in palette order."""
    lines = []
    for i, (name, vs) in enumerate(series.items()):
        points, dots = [], []
        for x, v, stamp in zip(xs, vs, stamps, strict=True):
            if v is None:
                continue
            points.append(f"{x},{_y(v, top)}")
            dots.append({"x": x, "y": _y(v, top), "title": f"{stamp}: {v} kept ({name})"})
        lines.append(
            {
                "name": name,
                "color": PALETTE[i % len(PALETTE)],
                "points": " ".join(points),
                "dots": dots,
            }
        )
    return lines


def _retired_bars(passes: list[ReconcilerPass], xs: list, step: float, top: float) -> list[dict]:
    """A bar centred on each pass that retired something."""
    bar_w = max(min(step * 0.6, 14), 2)
    return [
        {
            "x": round(x - bar_w / 2, 1),
            "y": _y(p.retired, top),
            "h": round(CHART_BASE - _y(p.retired, top), 1),
            "w": round(bar_w, 1),
            "title": f"{p.started_at:%Y-%m-%d %H:%M}: {p.retired} retired",
        }
        for x, p in zip(xs, passes, strict=False)
        if p.retired
    ]


def _cost_line(costs: list[Decimal | None], xs: list, stamps: list) -> dict | None:
    """The daily cost held, on its own (right) axis; None when no point knows it."""
    if all(c is None for c in costs):
        return None
    cost_top = _nice_top(float(max(c for c in costs if c is not None)))
    pts = [
        (x, _y(c, cost_top), stamp, c)
        for x, c, stamp in zip(xs, costs, stamps, strict=True)
        if c is not None
    ]
    return {
        "points": " ".join(f"{x},{yy}" for x, yy, _, _ in pts),
        "dots": [{"x": x, "y": yy, "title": f"{s}: {money(c)}/day held"} for x, yy, s, c in pts],
        "top": money(Decimal(str(cost_top))),
    }


def _fleet(now, records) -> dict:
    """Every count and cost the dashboard shows, in one grouped query."""
    by_stage = dict.fromkeys(Stage.values, 0)
    by_kind = dict.fromkeys(RetirementKind.values, 0)
    cost_env: dict[str, dict] = {}
    cost_kind: dict[str, dict] = {}
    totals = dict(EMPTY_TOTALS)
    for row in _fleet_rows(now, records):
        by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + row["n"]
        _add_closed(totals, row)
        if row["stage"] in STAGES_CLOSED:
            continue
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["n"]
        _add_kept(totals, row)
        _add_cost(cost_env, row["environment__name"], row)
        _add_cost(cost_kind, row["kind"], row)
    return {
        "by_stage": by_stage,
        "by_kind": by_kind,
        "totals": totals,
        "cost_by_env": dict(sorted(cost_env.items())),
        "cost_by_kind": {k: cost_kind[k] for k in RetirementKind.values if k in cost_kind},
    }


# The dashboard's fleet-wide totals before the first row; None: unknown so far.
EMPTY_TOTALS: dict = {
    "attention": 0,
    "retired_24h": 0,
    "kept_bytes": None,
    "sized": 0,
    "cost": None,
    "unpriced": 0,
    "reclaimed": None,
    "reclaimed_n": 0,
    "reclaimed_unpriced": 0,
}


def _fleet_rows(now, records):
    """Records grouped by stage, kind and environment, with their counts, size
    and daily cost (held, and reclaimed over the last RECLAIM_DAYS)."""
    since_24h = now - timedelta(hours=24)
    since_30d = now - timedelta(days=RECLAIM_DAYS)
    retired_recent = Q(stage=Stage.RETIRED) & (
        Q(closed_at__gte=since_24h) | Q(closed_at__isnull=True, updated_at__gte=since_24h)
    )
    reclaimed_q = Q(stage=Stage.RETIRED, closed_at__gte=since_30d)
    return (
        records.annotate(daily=daily_cost_expression(), kept=storage_bytes_expression())
        .values("stage", "kind", "environment__name")
        .annotate(
            n=Count("id"),
            attention=Count("id", filter=Q(needs_attention=True)),
            retired_24h=Count("id", filter=retired_recent),
            kept_bytes=Sum("kept"),
            sized=Count("kept"),
            cost=Sum("daily"),
            priced=Count("id", filter=Q(daily__isnull=False)),
            reclaimed=Sum("daily", filter=reclaimed_q),
            reclaimed_n=Count("id", filter=reclaimed_q),
            reclaimed_priced=Count("id", filter=reclaimed_q & Q(daily__isnull=False)),
        )
        .order_by()
    )


def _add_closed(totals: dict, row: dict) -> None:
    """What a row retired: in the last 24 hours, and reclaimed (with its cost)."""
    totals["retired_24h"] += row["retired_24h"]
    if row["reclaimed_n"]:
        totals["reclaimed_n"] += row["reclaimed_n"]
        totals["reclaimed_unpriced"] += row["reclaimed_n"] - row["reclaimed_priced"]
        if row["reclaimed_priced"]:
            totals["reclaimed"] = (totals["reclaimed"] or 0) + row["reclaimed"]


def _add_kept(totals: dict, row: dict) -> None:
    """What an open row keeps: attention, size (where known) and cost (where priced)."""
    totals["attention"] += row["attention"]
    totals["sized"] += row["sized"]
    if row["kept_bytes"] is not None:
        totals["kept_bytes"] = (totals["kept_bytes"] or 0) + row["kept_bytes"]
    totals["unpriced"] += row["n"] - row["priced"]
    if row["priced"]:
        totals["cost"] = (totals["cost"] or 0) + row["cost"]


def _add_cost(bucket: dict[str, dict], key: str, row: dict) -> None:
    """An open row's count and cost into its bucket (by environment or kind)."""
    entry = bucket.setdefault(key, {"n": 0, "cost": None, "unpriced": 0})
    entry["n"] += row["n"]
    entry["unpriced"] += row["n"] - row["priced"]
    if row["priced"]:
        entry["cost"] = (entry["cost"] or 0) + row["cost"]


def _rows_needing_a_person(records) -> tuple[list, list]:
    """Awaiting a decision, and failing (the longest-failing first, like a missed
    check's "failing since", attention on top)."""
    failing = records.open().filter(Q(stage=Stage.FAILED) | Q(needs_attention=True))
    rows = (
        (records.awaiting_decision() | failing)
        .select_related("environment", "lease__issue")
        .order_by("-updated_at")[:40]
    )
    awaiting_rows, failing_rows = [], []
    for r in rows:
        (awaiting_rows if r.stage == Stage.AWAITING_APPROVAL else failing_rows).append(r)
    failing_rows.sort(key=lambda r: (not r.needs_attention, r.failing_since or r.updated_at))
    return awaiting_rows, failing_rows


def _trend_passes() -> list:
    """Fleet-wide passes only: a pass scoped to one environment counts only its part."""
    return list(
        ReconcilerPass.objects.filter(environment_name="", dry_run=False)
        .only(
            "started_at",
            "finished_at",
            "candidates",
            "retired",
            "counts_by_environment",
            "cost_per_day",
        )
        .order_by("-started_at")[:CHART_PASSES]
    )


def dashboard_context(
    fingerprint: str, *, split: bool = False, records=None, limited: bool = False
) -> dict:
    """Counts, costs and rows over `records` (the user's visible records; every
    record when None). A `limited` user gets no trend: each pass's counts are
    over every company (README, company scope)."""
    records = Retirement.objects.all() if records is None else records
    now = timezone.now()
    fleet = _fleet(now, records)
    by_stage, totals = fleet["by_stage"], fleet["totals"]
    open_total = sum(n for s, n in by_stage.items() if s not in STAGES_CLOSED)
    awaiting_rows, failing_rows = _rows_needing_a_person(records)
    # Each pass's counts are over every company: none for a limited user.
    passes = [] if limited else _trend_passes()
    now_by_env = {name: c["n"] for name, c in fleet["cost_by_env"].items()}
    return {
        "fp": fingerprint,
        "live_trigger": LIVE_TRIGGER,
        "by_stage": by_stage,
        "by_kind": fleet["by_kind"],
        "open_total": open_total,
        # Approved records wait only for the next pass: not a person's work.
        "awaiting": records.awaiting_decision().count()
        if by_stage.get(Stage.AWAITING_APPROVAL)
        else 0,
        "failing": by_stage.get(Stage.FAILED, 0),
        "totals": totals,
        "cost_by_env": fleet["cost_by_env"],
        "cost_by_kind": fleet["cost_by_kind"],
        "reclaim_days": RECLAIM_DAYS,
        "unsized": open_total - totals["sized"],
        "awaiting_rows": awaiting_rows[:20],
        "failing_rows": failing_rows[:20],
        "chart": trend_chart(
            passes,
            open_total,
            now,
            split=split,
            now_by_env=now_by_env,
            now_cost=totals["cost"],
        ),
        "split": split,
        "limited": limited,
        "now": now,
    }


@console_view
@require_GET
def dashboard(request):
    split = request.GET.get("split") == "environment"
    records = visible_records(request)
    fingerprint = live_fingerprint(records) + ("-env" if split else "")
    unchanged = unchanged_poll(request, fingerprint)
    if unchanged is not None:
        return unchanged
    limited = companies_of(request.user) is not None
    context = dashboard_context(fingerprint, split=split, records=records, limited=limited)
    if request.htmx:
        response = render(request, "sandboxes/dashboard.html#live", context)
        return _with_etag(response, request, fingerprint)
    return render(request, "sandboxes/dashboard.html", context)
