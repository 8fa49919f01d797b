"""The dashboard: what needs a person first (failing now, awaiting approval, an
overdue reconciler), then counts by stage and kind, what the kept sandboxes
cost, and the trend of kept sandboxes, retirements and cost - refreshed live."""

from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sandboxes.costs import daily_cost_expression, money
from sandboxes.models import ReconcilerPass, Retirement
from sandboxes.models.choices import STAGES_CLOSED, RetirementKind, Stage
from sandboxes.views.common import LIVE_TRIGGER, console_view, live_fingerprint, unchanged_poll
from sandboxes.views.common import with_etag as _with_etag

CHART_PASSES = 48
CHART_W, CHART_H, CHART_PAD, CHART_LEFT, CHART_RIGHT = 640, 200, 30, 46, 58
RECLAIM_DAYS = 30
DEFAULT_SCHEDULE_MINUTES = 1
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
    right = CHART_W - CHART_RIGHT
    inner_w = right - CHART_LEFT
    inner_h = CHART_H - 2 * CHART_PAD
    base = CHART_PAD + inner_h
    step = inner_w / len(passes)
    xs = [round(CHART_LEFT + i * step, 1) for i in range(len(passes))] + [right]
    stamps = [f"{p.started_at:%Y-%m-%d %H:%M}" for p in passes] + ["now"]

    if split:
        names = sorted(
            {name for p in passes for name in (p.counts_by_environment or {})}
            | set(now_by_env or {})
        )
        series = {
            name: [(p.counts_by_environment or {}).get(name) for p in passes]
            + [(now_by_env or {}).get(name, 0)]
            for name in names
        }
    else:
        series = {"all environments": [p.candidates for p in passes] + [now_open]}
    values = [v for vs in series.values() for v in vs if v is not None]
    top = _nice_top(max([*values, *(p.retired for p in passes), 1]))

    def y(value: float, scale: float) -> float:
        return round(CHART_PAD + inner_h - inner_h * float(value) / scale, 1)

    lines = []
    for i, (name, vs) in enumerate(series.items()):
        points, dots = [], []
        for x, v, stamp in zip(xs, vs, stamps, strict=True):
            if v is None:
                continue
            points.append(f"{x},{y(v, top)}")
            dots.append({"x": x, "y": y(v, top), "title": f"{stamp}: {v} kept ({name})"})
        lines.append(
            {
                "name": name,
                "color": PALETTE[i % len(PALETTE)],
                "points": " ".join(points),
                "dots": dots,
            }
        )
    bar_w = max(min(step * 0.6, 14), 2)
    bars = [
        {
            "x": round(x - bar_w / 2, 1),
            "y": y(p.retired, top),
            "h": round(base - y(p.retired, top), 1),
            "w": round(bar_w, 1),
            "title": f"{p.started_at:%Y-%m-%d %H:%M}: {p.retired} retired",
        }
        for x, p in zip(xs, passes, strict=False)
        if p.retired
    ]
    costs = [p.cost_per_day for p in passes] + [now_cost]
    cost_line = None
    if any(c is not None for c in costs):
        cost_top = _nice_top(float(max(c for c in costs if c is not None)))
        pts = [
            (x, y(c, cost_top), stamp, c)
            for x, c, stamp in zip(xs, costs, stamps, strict=True)
            if c is not None
        ]
        cost_line = {
            "points": " ".join(f"{x},{yy}" for x, yy, _, _ in pts),
            "dots": [
                {"x": x, "y": yy, "title": f"{s}: {money(c)}/day held"} for x, yy, s, c in pts
            ],
            "top": money(Decimal(str(cost_top))),
        }
    return {
        "w": CHART_W,
        "h": CHART_H,
        "left": CHART_LEFT,
        "right": right,
        "top_y": CHART_PAD,
        "base": base,
        "mid_y": round(CHART_PAD + inner_h / 2, 1),
        "mid_x": round((CHART_LEFT + right) / 2, 1),
        "top": top,
        "lines": lines,
        "bars": bars,
        "cost": cost_line,
        "first_at": passes[0].started_at,
        "now_open": now_open,
        "total_retired": sum(p.retired for p in passes),
        "count": len(passes),
        "split": split,
    }


def _schedule_minutes() -> int:
    from django_q.models import Schedule

    from sandboxes.management.commands.setup_schedules import RECONCILE

    minutes = Schedule.objects.filter(name=RECONCILE).values_list("minutes", flat=True).first()
    return minutes or DEFAULT_SCHEDULE_MINUTES


def reconciler_health(now) -> dict:
    """Like a missed ping: the reconciler is overdue when its last pass (of any
    scope) started longer ago than twice its schedule. Two small queries."""
    last = (
        ReconcilerPass.objects.filter(dry_run=False)
        .only("started_at", "finished_at")
        .order_by("-started_at")
        .first()
    )
    minutes = _schedule_minutes()
    limit = timedelta(minutes=2 * minutes)
    overdue = last is None or now - last.started_at > limit
    return {"last": last, "schedule_minutes": minutes, "overdue": overdue, "never": last is None}


def _fleet(now) -> dict:
    """Every count and cost the dashboard shows, in one grouped query."""
    since_24h = now - timedelta(hours=24)
    since_30d = now - timedelta(days=RECLAIM_DAYS)
    retired_recent = Q(stage=Stage.RETIRED) & (
        Q(closed_at__gte=since_24h) | Q(closed_at__isnull=True, updated_at__gte=since_24h)
    )
    reclaimed_q = Q(stage=Stage.RETIRED, closed_at__gte=since_30d)
    rows = (
        Retirement.objects.annotate(daily=daily_cost_expression())
        .values("stage", "kind", "environment__name")
        .annotate(
            n=Count("id"),
            attention=Count("id", filter=Q(needs_attention=True)),
            retired_24h=Count("id", filter=retired_recent),
            kept_bytes=Sum("size_bytes"),
            sized=Count("size_bytes"),
            cost=Sum("daily"),
            priced=Count("id", filter=Q(daily__isnull=False)),
            reclaimed=Sum("daily", filter=reclaimed_q),
            reclaimed_n=Count("id", filter=reclaimed_q),
            reclaimed_priced=Count("id", filter=reclaimed_q & Q(daily__isnull=False)),
        )
        .order_by()
    )
    by_stage = dict.fromkeys(Stage.values, 0)
    by_kind = dict.fromkeys(RetirementKind.values, 0)
    cost_env: dict[str, dict] = {}
    cost_kind: dict[str, dict] = {}
    t = {
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

    def add(bucket: dict, key: str, n: int, cost, priced: int) -> None:
        entry = bucket.setdefault(key, {"n": 0, "cost": None, "unpriced": 0})
        entry["n"] += n
        entry["unpriced"] += n - priced
        if priced:
            entry["cost"] = (entry["cost"] or 0) + cost

    for row in rows:
        stage, n = row["stage"], row["n"]
        by_stage[stage] = by_stage.get(stage, 0) + n
        t["retired_24h"] += row["retired_24h"]
        if row["reclaimed_n"]:
            t["reclaimed_n"] += row["reclaimed_n"]
            t["reclaimed_unpriced"] += row["reclaimed_n"] - row["reclaimed_priced"]
            if row["reclaimed_priced"]:
                t["reclaimed"] = (t["reclaimed"] or 0) + row["reclaimed"]
        if stage in STAGES_CLOSED:
            continue
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + n
        t["attention"] += row["attention"]
        t["sized"] += row["sized"]
        if row["kept_bytes"] is not None:
            t["kept_bytes"] = (t["kept_bytes"] or 0) + row["kept_bytes"]
        t["unpriced"] += n - row["priced"]
        if row["priced"]:
            t["cost"] = (t["cost"] or 0) + row["cost"]
        add(cost_env, row["environment__name"], n, row["cost"], row["priced"])
        add(cost_kind, row["kind"], n, row["cost"], row["priced"])
    return {
        "by_stage": by_stage,
        "by_kind": by_kind,
        "totals": t,
        "cost_by_env": dict(sorted(cost_env.items())),
        "cost_by_kind": {k: cost_kind[k] for k in RetirementKind.values if k in cost_kind},
    }


def dashboard_context(fingerprint: str, *, split: bool = False) -> dict:
    now = timezone.now()
    fleet = _fleet(now)
    by_stage, totals = fleet["by_stage"], fleet["totals"]
    open_total = sum(n for s, n in by_stage.items() if s not in STAGES_CLOSED)
    open_q = ~Q(stage__in=list(STAGES_CLOSED))
    rows = (
        Retirement.objects.filter(
            Q(stage=Stage.AWAITING_APPROVAL)
            | (open_q & (Q(stage=Stage.FAILED) | Q(needs_attention=True)))
        )
        .select_related("environment", "lease__issue")
        .order_by("-updated_at")[:40]
    )
    awaiting_rows, failing_rows = [], []
    for r in rows:
        (awaiting_rows if r.stage == Stage.AWAITING_APPROVAL else failing_rows).append(r)
    # The longest-failing first (like a missed check's "failing since"), attention on top.
    failing_rows.sort(key=lambda r: (not r.needs_attention, r.failing_since or r.updated_at))
    # Fleet-wide passes only: a pass scoped to one environment counts only its part.
    passes = list(
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
    now_by_env = {name: c["n"] for name, c in fleet["cost_by_env"].items()}
    return {
        "fp": fingerprint,
        "live_trigger": LIVE_TRIGGER,
        "by_stage": by_stage,
        "by_kind": fleet["by_kind"],
        "open_total": open_total,
        "awaiting": by_stage.get(Stage.AWAITING_APPROVAL, 0),
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
        "now": now,
    }


@console_view
@require_GET
def dashboard(request):
    if request.htmx and request.GET.get("part") == "health":
        # The overdue banner ages with the clock, not with the data: its own poll.
        return render(
            request,
            "sandboxes/dashboard.html#health",
            {"health": reconciler_health(timezone.now())},
        )
    split = request.GET.get("split") == "environment"
    fingerprint = live_fingerprint() + ("-env" if split else "")
    unchanged = unchanged_poll(request, fingerprint)
    if unchanged is not None:
        return unchanged
    context = dashboard_context(fingerprint, split=split)
    if request.htmx:
        response = render(request, "sandboxes/dashboard.html#live", context)
        return _with_etag(response, request, fingerprint)
    context["health"] = reconciler_health(context["now"])
    return render(request, "sandboxes/dashboard.html", context)
