"""Environment policy (admins edit) and API tokens (admins manage); the passes:
passes.py; users and roles: users.py."""

import json
from datetime import timedelta

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.views.decorators.http import require_GET, require_POST

from sandboxes import actions, policy, token_actions
from sandboxes.forms import PolicyForm, PriceForm, TokenForm
from sandboxes.models import ApiToken, Environment
from sandboxes.reconciler.preview import CATEGORIES, Policy, preview
from sandboxes.views.common import console_view, permission


def _policy_initial(env: Environment) -> dict:
    return {
        "retirement_mode": env.retirement_mode,
        "warm_retention_hours": round(env.warm_retention.total_seconds() / 3600, 2),
        "max_retirements_per_pass": env.max_retirements_per_pass,
        "notice_hours": round(env.notice_period.total_seconds() / 3600, 2),
        "workspace_root": env.workspace_root,
        "time_zone": env.time_zone,
        "window_days": [d for d in env.window_days.split(",") if d],
        "window_start": env.window_start,
        "window_end": env.window_end,
    }


# The policy fields a preview lists as old → new, with their words and unit.
POLICY_CHANGES = (
    ("retirement_mode", "Retirement mode", ""),
    ("warm_retention_hours", "Warm retention", " h"),
    ("max_retirements_per_pass", "Max retirements per pass", ""),
    ("notice_hours", "Notice period", " h"),
    ("workspace_root", "Workspace root", ""),
    ("window", "Retirement window", ""),
)


def _policy_value(name: str, value, unit: str) -> str:
    if isinstance(value, float):
        value = f"{value:g}"
    if name == "notice_hours" and str(value or 0) == "0":
        return "off"
    return f"{value}{unit}"


def _window_words(window) -> str:
    return window.describe() if window is not None else "any time"


def policy_changes(env: Environment, data: dict) -> list[dict]:
    """Each policy value the form changes, as the preview shows it: old → new."""
    old = _policy_initial(env) | {"window": _window_words(env.window)}
    data = data | {"window": _window_words(data.get("window"))}
    rows = []
    for name, label, unit in POLICY_CHANGES:
        before = _policy_value(name, old.get(name), unit)
        after = _policy_value(name, data.get(name), unit)
        if before != after:
            rows.append(
                {
                    "field": name,
                    "label": label,
                    "old": before,
                    "new": after,
                }
            )
    return rows


MODES = {
    "observe": "lists and explains every kept sandbox, calls no provider except reads,"
    " and never stops or destroys anything",
    "manual": "compares and exports, then waits at awaiting approval: an operator"
    " approves every destroy",
    "auto": "compares, exports and destroys on its own once the proof exists and no hold"
    " applies, at most the cap per pass",
}


def _price_initial(env: Environment) -> dict:
    from sandboxes.models.mirror import PRICE_FIELDS

    return {"price_currency": env.price_currency} | {n: getattr(env, n) for n in PRICE_FIELDS}


def _prices(env: Environment) -> list[dict]:
    rows = []
    for label, stem in (
        ("vCPU-hour", "price_vcpu_hour"),
        ("GiB-hour of memory", "price_memory_gib_hour"),
        ("GiB-month of disk", "price_disk_gib_month"),
    ):
        rows.append(
            {
                "label": label,
                "running": getattr(env, f"{stem}_running"),
                "stopped": getattr(env, f"{stem}_stopped"),
            }
        )
    return rows


def _opens(env: Environment) -> str:
    """When a closed retirement window opens, in its own time zone; "" if open or none."""
    window, now = env.window, timezone.now()
    if window is None or window.is_open(now):
        return ""
    return window.opens_words(now)


def _environments_context(
    request,
    *,
    bound: dict | None = None,
    bound_prices: dict | None = None,
    preview_of: dict | None = None,
) -> dict:
    rows = []
    for env in Environment.objects.visible_to(request.user).order_by("name"):
        form = (bound or {}).get(env.pk) or PolicyForm(
            initial=_policy_initial(env), prefix=str(env.pk)
        )
        price_form = (bound_prices or {}).get(env.pk) or PriceForm(
            initial=_price_initial(env), prefix=f"price-{env.pk}"
        )
        rows.append(
            {
                "env": env,
                "form": form,
                "price_form": price_form,
                "mode_words": MODES.get(env.retirement_mode, ""),
                "retention_hours": env.warm_retention.total_seconds() / 3600,
                "prices": _prices(env),
                "open_edit": env.pk in (bound or {}) or env.pk in (bound_prices or {}),
                "preview": (preview_of or {}).get(env.pk),
                "window_opens": _opens(env),
            }
        )
    return {
        "rows": rows,
        "modes": MODES,
        "can_edit": request.user.has_perm("sandboxes.edit_policy"),
    }


def proposed_policy(data: dict) -> Policy:
    return Policy(
        data["retirement_mode"],
        timedelta(hours=data["warm_retention_hours"]),
        data["max_retirements_per_pass"],
        timedelta(hours=data.get("notice_hours") or 0),
        data.get("window"),
    )


def confirmation_token(env: Environment, data: dict, shown: dict) -> str:
    """Binds a confirmation to the environment's current policy, the proposed
    one and the counts the preview showed: if any of them moved, the admin
    sees the preview again."""
    value = json.dumps(
        {
            "env": str(env.pk),
            "current": env.policy(),
            "proposed": {k: data[k] for k in sorted(data) if k not in ("reason", "window")},
            "shown": shown,
        },
        sort_keys=True,
        default=str,
    )
    return salted_hmac("policy-preview", value).hexdigest()


def _label(category: str, pv) -> str:
    """A category's words; the window's with when it opens ("wait for the
    retirement window (opens Mon 09:00)")."""
    opens = pv.proposed.window_opens or pv.current.window_opens
    if category == "window" and opens:
        return f"{CATEGORIES[category]} (opens {opens})"
    return CATEGORIES[category]


def _preview_rows(pv) -> list[dict]:
    cats = [c for c in CATEGORIES if pv.current.counts.get(c) or pv.proposed.counts.get(c)]
    return [
        {
            "category": c,
            "label": _label(c, pv),
            "current": pv.current.counts.get(c, 0),
            "proposed": pv.proposed.counts.get(c, 0),
            "changed": pv.current.counts.get(c, 0) != pv.proposed.counts.get(c, 0),
            "list": pv.proposed.rows.get(c, []),
        }
        for c in cats
    ]


@console_view
@require_GET
def environments(request):
    return render(request, "sandboxes/environments.html", _environments_context(request))


@require_POST
@console_view
@permission("edit_policy")
def edit_policy(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    form = PolicyForm(request.POST, prefix=str(env.pk))
    if form.is_valid():
        data = form.cleaned_data
        proposed = proposed_policy(data)
        summary = None
        if proposed != Policy.of(env):
            # A change to mode, retention, cap, notice or window is saved only once the
            # admin has seen what the next pass would do, and confirmed it.
            pv = preview(env, proposed)
            summary = {"current": pv.current.summary(), "proposed": pv.proposed.summary()}
            token = confirmation_token(env, data, summary)
            confirm = request.POST.get("confirm", "")
            if confirm != token:
                if confirm:
                    form.add_error(
                        None,
                        "The fleet or the policy changed since that preview: check it again.",
                    )
                codes = sorted(set(pv.current.held_by_code) | set(pv.proposed.held_by_code))
                held = [
                    {
                        "code": code,
                        "current": pv.current.held_by_code.get(code, 0),
                        "proposed": pv.proposed.held_by_code.get(code, 0),
                    }
                    for code in codes
                ]
                shown = {
                    "pv": pv,
                    "rows": _preview_rows(pv),
                    "held": held,
                    "token": token,
                    "changes": policy_changes(env, data),
                }
                context = _environments_context(
                    request, bound={env.pk: form}, preview_of={env.pk: shown}
                )
                return render(request, "sandboxes/environments.html", context)
        try:
            fields = {k: v for k, v in data.items() if k != "window"}
            policy.edit_policy(env.pk, actor=request.user, preview=summary, **fields)
        except actions.ActionRefused as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Policy of {env.name} saved.")
            return redirect("environments")
    context = _environments_context(request, bound={env.pk: form})
    return render(request, "sandboxes/environments.html", context, status=400)


@require_POST
@console_view
@permission("edit_policy")
def edit_prices(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    form = PriceForm(request.POST, prefix=f"price-{env.pk}")
    if form.is_valid():
        try:
            policy.edit_prices(env.pk, actor=request.user, **form.cleaned_data)
        except actions.ActionRefused as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Price table of {env.name} saved.")
            return redirect("environments")
    context = _environments_context(request, bound_prices={env.pk: form})
    return render(request, "sandboxes/environments.html", context, status=400)


@console_view
@permission("manage_tokens")
@require_GET
def tokens(request):
    return render(request, "sandboxes/tokens.html", _tokens_context(request, TokenForm()))


def _tokens_context(request, form, raw: str = "", created=None) -> dict:
    return {
        "tokens": ApiToken.objects.manageable_by(request.user)
        .select_related("created_by")
        .order_by("-created_at"),
        "form": form,
        "raw": raw,
        "created": created,
    }


@require_POST
@console_view
@permission("manage_tokens")
def create_token(request):
    form = TokenForm(request.POST)
    if form.is_valid():
        try:
            token, raw = token_actions.create_token(actor=request.user, **form.cleaned_data)
        except actions.ActionRefused as exc:
            form.add_error(None, str(exc))
        else:
            # Shown once, in this response only; the page is not cached.
            response = render(
                request, "sandboxes/tokens.html", _tokens_context(request, TokenForm(), raw, token)
            )
            response["Cache-Control"] = "no-store"
            return response
    return render(request, "sandboxes/tokens.html", _tokens_context(request, form), status=400)


@require_POST
@console_view
@permission("manage_tokens")
def revoke_token(request, pk):
    token = get_object_or_404(ApiToken.objects.manageable_by(request.user), pk=pk)
    try:
        token_actions.revoke_token(
            token.pk, actor=request.user, reason=request.POST.get("reason", "")
        )
    except actions.ActionRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Token {token.name} revoked.")
    return redirect("tokens")


def confirmation_for(env: Environment, post: dict) -> str:
    """The confirm token a preview of this (prefixed) policy form shows now:
    for clients and tests that post a confirmed change in one request."""
    form = PolicyForm(post, prefix=str(env.pk))
    if not form.is_valid():
        raise ValueError(form.errors.as_json())
    pv = preview(env, proposed_policy(form.cleaned_data))
    summary = {"current": pv.current.summary(), "proposed": pv.proposed.summary()}
    return confirmation_token(env, form.cleaned_data, summary)
