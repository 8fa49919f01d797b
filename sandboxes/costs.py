"""What a kept sandbox costs per day (docs/rules.md, what a kept sandbox costs).

Sizes come from the provider's own read of the sandbox (Daytona's `cpu` in
vCPUs, `memory` and `disk` in GiB: daytonaio/daytona
libs/api-client-python/daytona_api_client/models/sandbox.py), stored on the
record as `reported_cpu`, `reported_memory_gib`, `reported_disk_gib`. Prices
come from the environment's price table: per vCPU-hour, per GiB-hour of
memory and per GiB-month of disk, one set for a started sandbox and one for
a stopped one.

A cost is unknown - never 0 - when a size it needs is unknown or the price
table has no price for it. A component whose price is 0 needs no size (a
stopped Daytona sandbox is charged for its disk only).

The same rule is written twice: in Python for one record (detail page) and as
an SQL expression for aggregates (dashboard, list, passes), so pages never
load every record to add them up. tests/console/test_costs.py checks both
agree.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import (
    Case,
    DecimalField,
    ExpressionWrapper,
    F,
    Q,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce

from sandboxes.models.choices import RetirementKind

HOURS_PER_DAY = Decimal(24)
DAYS_PER_MONTH = Decimal(365) / Decimal(12)
RUNNING_STATES = ("started", "starting")
# With no provider state recorded, these kinds describe a sandbox still running.
RUNNING_KINDS = (
    RetirementKind.SUPERSEDED_RUNNING_WARM,
    RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN,
)
COMPONENTS = (
    # (size field, price field stem, per-day factor)
    ("reported_cpu", "price_vcpu_hour", HOURS_PER_DAY),
    ("reported_memory_gib", "price_memory_gib_hour", HOURS_PER_DAY),
    ("reported_disk_gib", "price_disk_gib_month", 1 / DAYS_PER_MONTH),
)
MONEY = DecimalField(max_digits=20, decimal_places=6)


def is_running(provider_state: str, kind: str) -> bool:
    if provider_state:
        return provider_state in RUNNING_STATES
    return kind in RUNNING_KINDS


def daily_cost(retirement, environment=None) -> Decimal | None:
    """The record's cost per day at its environment's prices; None when unknown."""
    env = environment or retirement.environment
    suffix = "running" if is_running(retirement.provider_state, retirement.kind) else "stopped"
    total = Decimal(0)
    for size_field, stem, factor in COMPONENTS:
        price = getattr(env, f"{stem}_{suffix}")
        if price is None:
            return None
        if price == 0:
            continue
        size = getattr(retirement, size_field)
        if size is None:
            return None
        total += Decimal(str(size)) * price * factor
    return total.quantize(Decimal("0.0001"))


def _component(size_field: str, price_field: str, factor: Decimal):
    price = F(f"environment__{price_field}")
    return Case(
        When(**{f"environment__{price_field}": 0}, then=Value(Decimal(0))),
        default=ExpressionWrapper(
            Cast(F(size_field), MONEY) * price * Value(factor), output_field=MONEY
        ),
        output_field=MONEY,
    )


def _total(suffix: str):
    parts = [_component(size, f"{stem}_{suffix}", factor) for size, stem, factor in COMPONENTS]
    return ExpressionWrapper(parts[0] + parts[1] + parts[2], output_field=MONEY)


def running_q(prefix: str = "") -> Q:
    return Q(**{f"{prefix}provider_state__in": RUNNING_STATES}) | Q(
        **{f"{prefix}provider_state": "", f"{prefix}kind__in": RUNNING_KINDS}
    )


def daily_cost_expression():
    """The same rule as `daily_cost`, as an expression over Retirement rows (NULL
    when unknown: SQL arithmetic with a NULL size or price is NULL)."""
    return Case(
        When(running_q(), then=_total("running")),
        default=_total("stopped"),
        output_field=MONEY,
    )


CENT = Decimal("0.01")


def cost_sort_expression():
    """The daily cost to sort by: unknown sorts as -1 (last when costliest comes
    first), cast to MONEY so a paging cursor holds the value exactly."""
    return Cast(
        Coalesce(daily_cost_expression(), Value(Decimal("-1"), output_field=MONEY)),
        output_field=MONEY,
    )


def money(value: Decimal | None, currency: str = "USD") -> str:
    """ "$1.32"; a cost above zero that rounds to nothing reads "< $0.01", never
    "$0.00" (a price and a size are known, the amount is just small)."""
    if value is None:
        return "unknown"
    symbol = {"USD": "$", "EUR": "€", "GBP": "£"}.get(currency)
    small = 0 < value < CENT / 2
    amount = f"{(CENT if small else value):,.2f}"
    text = f"{symbol}{amount}" if symbol else f"{amount} {currency}"
    return f"< {text}" if small else text


def storage_bytes(retirement) -> int | None:
    """What one record keeps on disk (the rule of `storage_bytes_expression`)."""
    if retirement.reported_disk_gib is not None:
        return int(retirement.reported_disk_gib * 2**30)
    return retirement.size_bytes


def storage_bytes_expression():
    """What a record keeps on disk, in bytes: the provider's reported disk when
    read, else the workspace's size from the last compare; NULL when neither."""
    from django.db.models import BigIntegerField
    from django.db.models.functions import Coalesce

    return Coalesce(
        Cast(F("reported_disk_gib") * Value(2**30), BigIntegerField()),
        F("size_bytes"),
        output_field=BigIntegerField(),
    )


def fleet_costs(scope: Q | None = None) -> dict:
    """Open records now, per environment name, and the daily cost they hold: one
    grouped query. `cost_per_day` is None when no record could be priced."""
    from django.db.models import Count, Sum

    from sandboxes.models import Retirement

    rows = (
        Retirement.objects.filter(scope or Q())
        .open()
        .annotate(daily=daily_cost_expression())
        .values("environment__name")
        .annotate(
            n=Count("id"),
            cost=Sum("daily"),
            priced=Count("id", filter=Q(daily__isnull=False)),
        )
        .order_by()
    )
    by_env, total, unknown, any_priced = {}, Decimal(0), 0, False
    for row in rows:
        by_env[row["environment__name"]] = row["n"]
        unknown += row["n"] - row["priced"]
        if row["priced"]:
            any_priced = True
            total += row["cost"]
    return {
        "by_environment": by_env,
        "cost_per_day": total.quantize(Decimal("0.0001")) if any_priced else None,
        "unknown": unknown,
    }
