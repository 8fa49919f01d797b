"""An admin's edits of an environment's policy (mode, retention, cap, workspace
root, notice period, retirement window) and of its price table: each checked
and audited like every operator action (sandboxes/actions.py, whose permission
check and refusals it shares)."""

from datetime import timedelta

from django.db import transaction

from sandboxes import audit
from sandboxes.actions import ActionRefused, _reason, _require
from sandboxes.models import Environment
from sandboxes.models.choices import RetirementMode
from sandboxes.rules.window import WindowError, window_from

POLICY_FIELDS = (
    "retirement_mode",
    "warm_retention",
    "max_retirements_per_pass",
    "workspace_root",
    "notice_period",
    "time_zone",
    "window_days",
    "window_start",
    "window_end",
)


@transaction.atomic
def edit_policy(
    environment_id,
    *,
    actor,
    reason: str,
    retirement_mode: str,
    warm_retention_hours: float,
    max_retirements_per_pass: int,
    workspace_root: str,
    notice_hours: float | None = None,
    time_zone: str | None = None,
    window_days=(),
    window_start=None,
    window_end=None,
    preview: dict | None = None,
) -> Environment:
    """`preview`: what the confirmed policy preview showed (recorded in the audit row).
    The retirement window is set whole from `time_zone` (an empty one with no days,
    start or end: any time); `time_zone=None` leaves it as it is."""
    _require(actor, "edit_policy")
    reason = _reason(reason)
    if retirement_mode not in RetirementMode.values:
        raise ActionRefused(f"Unknown retirement mode {retirement_mode!r}.")
    env = Environment.objects.select_for_update().get(pk=environment_id)
    before = env.policy()
    env.retirement_mode = retirement_mode
    env.warm_retention = timedelta(hours=warm_retention_hours)
    env.max_retirements_per_pass = max_retirements_per_pass
    env.workspace_root = workspace_root
    if notice_hours is not None:
        env.notice_period = timedelta(hours=notice_hours)
    try:
        if time_zone is not None:
            env.set_window(window_from(time_zone, window_days or (), window_start, window_end))
    except WindowError as exc:
        raise ActionRefused(str(exc)) from None
    after = env.policy()
    if after == before:
        raise ActionRefused("Nothing changed.")
    env.save(update_fields=[*POLICY_FIELDS, "updated_at"])
    audit.record(
        actor=actor,
        action="environment.edit_policy",
        obj=env,
        reason=reason,
        before=before,
        after={**after, "preview": preview} if preview is not None else after,
        sandbox_id="",
    )
    return env


def _price_table(env: Environment) -> dict:
    from sandboxes.models.mirror import PRICE_FIELDS

    table: dict[str, str | None] = {"price_currency": env.price_currency}
    for name in PRICE_FIELDS:
        value = getattr(env, name)
        table[name] = None if value is None else str(value.normalize())
    return table


@transaction.atomic
def edit_prices(environment_id, *, actor, reason: str, **prices) -> Environment:
    """Set an environment's price table (an admin's act, audited). A None price
    is "no price": costs that need it read unknown."""
    from decimal import Decimal

    from sandboxes.models.mirror import PRICE_FIELDS

    _require(actor, "edit_policy")
    reason = _reason(reason)
    env = Environment.objects.select_for_update().get(pk=environment_id)
    before = _price_table(env)
    currency = str(prices.get("price_currency") or env.price_currency).strip().upper()
    if len(currency) != 3 or not currency.isalpha():
        raise ActionRefused("price_currency: a currency is three letters (ISO 4217).")
    env.price_currency = currency
    for name in PRICE_FIELDS:
        value = prices.get(name)
        if value is not None and Decimal(value) < 0:
            raise ActionRefused(f"{name}: a price cannot be negative.")
        setattr(env, name, None if value is None else Decimal(value))
    after = _price_table(env)
    if after == before:
        raise ActionRefused("Nothing changed.")
    env.save(update_fields=["price_currency", *PRICE_FIELDS, "updated_at"])
    audit.record(
        actor=actor,
        action="environment.edit_prices",
        obj=env,
        reason=reason,
        before=before,
        after=after,
        sandbox_id="",
    )
    return env
