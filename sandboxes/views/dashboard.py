"""The dashboard: counts by stage and kind, what needs a person, storage kept,
and the trend of kept sandboxes and retirements, refreshed live."""

from datetime import timedelta

from django.db.models import Count, Q, Sum
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sandboxes.models import ReconcilerPass, Retirement
from sandboxes.models.choices import STAGES_CLOSED, RetirementKind, Stage
from sandboxes.views.common import LIVE_TRIGGER, console_view, live_fingerprint, unchanged_poll
from sandboxes.views.common import with_etag as _with_etag

CHART_PASSES = 48
CHART_W, CHART_H, CHART_PAD = 640, 180, 28


def trend_chart(passes: list[ReconcilerPass], now_open: int, now) -> dict | None:
    """Geometry for a server-rendered SVG: kept sandboxes (line) and retirements
    per pass (bars), oldest pass on the left. The line ends on `now_open`, the
    open records now (the dashboard's tile), not on the last pass's count."""
    passes = sorted(passes, key=lambda p: p.started_at)
    if not passes:
        return None
    top = max(max(p.candidates for p in passes), max(p.retired for p in passes), now_open, 1)
    inner_w = CHART_W - 2 * CHART_PAD
    inner_h = CHART_H - 2 * CHART_PAD
    step = inner_w / len(passes)
    bar_w = max(min(step * 0.6, 14), 2)

    def y(value: int) -> float:
        return round(CHART_PAD + inner_h - inner_h * value / top, 1)

    points, dots, bars = [], [], []
    for i, p in enumerate(passes):
        # A lone pass sits in the middle rather than on the axis labels.
        x = round(CHART_PAD + i * step, 1)
        points.append(f"{x},{y(p.candidates)}")
        dots.append(
            {
                "x": x,
                "y": y(p.candidates),
                "title": f"{p.started_at:%Y-%m-%d %H:%M}: {p.candidates} kept",
            }
        )
        if p.retired:
            bars.append(
                {
                    "x": round(x - bar_w / 2, 1),
                    "y": y(p.retired),
                    "h": round(CHART_PAD + inner_h - y(p.retired), 1),
                    "w": round(bar_w, 1),
                    "title": f"{p.started_at:%Y-%m-%d %H:%M}: {p.retired} retired",
                }
            )
    right = CHART_W - CHART_PAD
    points.append(f"{right},{y(now_open)}")
    dots.append({"x": right, "y": y(now_open), "title": f"now: {now_open} kept"})
    return {
        "w": CHART_W,
        "h": CHART_H,
        "pad": CHART_PAD,
        "base": CHART_H - CHART_PAD,
        "right": CHART_W - CHART_PAD,
        "top": top,
        "top_y": CHART_PAD,
        "points": " ".join(points),
        "dots": dots,
        "bars": bars,
        "first_at": passes[0].started_at,
        "last_at": now,
        "now_open": now_open,
        "total_retired": sum(p.retired for p in passes),
        "count": len(passes),
    }


def dashboard_context(fingerprint: str) -> dict:
    now = timezone.now()
    by_stage: dict[str, int] = dict.fromkeys(Stage.values, 0)
    by_kind: dict[str, int] = dict.fromkeys(RetirementKind.values, 0)
    for stage, kind, n in (
        Retirement.objects.values_list("stage", "kind").annotate(n=Count("id")).order_by()
    ):
        by_stage[stage] = by_stage.get(stage, 0) + n
        if stage not in STAGES_CLOSED:
            by_kind[kind] = by_kind.get(kind, 0) + n
    open_q = ~Q(stage__in=list(STAGES_CLOSED))
    since = now - timedelta(hours=24)
    totals = Retirement.objects.aggregate(
        attention=Count("id", filter=open_q & Q(needs_attention=True)),
        retired_24h=Count(
            "id",
            filter=Q(stage=Stage.RETIRED)
            & (Q(closed_at__gte=since) | Q(closed_at__isnull=True, updated_at__gte=since)),
        ),
        kept_bytes=Sum("size_bytes", filter=open_q),
        sized=Count("id", filter=open_q & Q(size_bytes__isnull=False)),
    )
    open_total = sum(n for s, n in by_stage.items() if s not in STAGES_CLOSED)
    rows = (
        Retirement.objects.filter(
            Q(stage=Stage.AWAITING_APPROVAL) | (open_q & Q(needs_attention=True))
        )
        .select_related("environment", "lease__issue")
        .order_by("-updated_at")[:20]
    )
    awaiting_rows, attention_rows = [], []
    for r in rows:
        (awaiting_rows if r.stage == Stage.AWAITING_APPROVAL else attention_rows).append(r)
    # Fleet-wide passes only: a pass scoped to one environment counts only its part.
    passes = list(
        ReconcilerPass.objects.filter(environment_name="")
        .only("started_at", "finished_at", "candidates", "retired")
        .order_by("-started_at")[:CHART_PASSES]
    )
    return {
        "fp": fingerprint,
        "live_trigger": LIVE_TRIGGER,
        "by_stage": by_stage,
        "by_kind": {k: n for k, n in by_kind.items()},
        "open_total": open_total,
        "awaiting": by_stage.get(Stage.AWAITING_APPROVAL, 0),
        "totals": totals,
        "unsized": open_total - totals["sized"],
        "awaiting_rows": awaiting_rows,
        "attention_rows": attention_rows,
        "chart": trend_chart(passes, open_total, now),
        "last_pass": passes[0] if passes else None,
        "now": now,
    }


@console_view
@require_GET
def dashboard(request):
    fingerprint = live_fingerprint()
    unchanged = unchanged_poll(request, fingerprint)
    if unchanged is not None:
        return unchanged
    context = dashboard_context(fingerprint)
    if request.htmx:
        response = render(request, "sandboxes/dashboard.html#live", context)
        return _with_etag(response, request, fingerprint)
    return render(request, "sandboxes/dashboard.html", context)
