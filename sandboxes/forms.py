"""Forms of the operator console: list filters, action reasons, policy and tokens."""

from django import forms

from sandboxes.actions import MAX_BULK_APPROVE
from sandboxes.models.choices import HoldCode, RetirementKind, RetirementMode, Stage, TokenScope
from sandboxes.providers.base import SandboxState
from sandboxes.rules.window import DAYS, WindowError, window_from


def _blank(label: str, choices) -> list[tuple[str, str]]:
    return [("", label), *[(v, v.replace("_", " ")) for v in choices]]


SORTS = {
    "-updated_at": "Recently changed",
    "kept_since": "Kept longest",
    "-kept_since": "Kept most recently",
    "-cost_sort": "Costliest first",
    "cost_sort": "Cheapest first",
    "updated_at": "Least recently changed",
    "-listed_at": "Newest listed",
    "listed_at": "Oldest listed",
    "provider_lease_id": "Sandbox id",
    "-attempts": "Most attempts",
}


class KeptFilterForm(forms.Form):
    """The kept-sandbox list's filters; they live in the URL."""

    q = forms.CharField(
        required=False,
        label="Search",
        widget=forms.TextInput(
            attrs={"placeholder": "sandbox id, task key, lease id or run id", "type": "search"}
        ),
    )
    stage = forms.ChoiceField(
        required=False,
        choices=[("", "open stages"), ("all", "all stages")]
        + [(v, v.replace("_", " ")) for v in Stage.values],
    )
    kind = forms.ChoiceField(required=False, choices=_blank("any kind", RetirementKind.values))
    hold = forms.ChoiceField(required=False, choices=_blank("any hold", HoldCode.values))
    environment = forms.ChoiceField(required=False, choices=[("", "any environment")])
    company = forms.ChoiceField(required=False, choices=[("", "any company")])
    provider_state = forms.ChoiceField(
        required=False,
        label="Provider state",
        choices=_blank("any provider state", [s.value for s in SandboxState]),
    )
    attention = forms.ChoiceField(
        required=False,
        label="Needs attention",
        choices=[("", "attention: any"), ("yes", "needs attention"), ("no", "no attention")],
    )
    sort = forms.ChoiceField(required=False, choices=list(SORTS.items()))

    def __init__(self, *args, environments=(), companies=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["environment"].choices = [("", "any environment")] + [
            (str(e.pk), e.name) for e in environments
        ]
        # Only the companies the user sees: any other id is "not one of the choices".
        self.fields["company"].choices = [("", "any company")] + [
            (str(c.pk), str(c)) for c in companies
        ]


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, widget=forms.TextInput())


class HoldForm(forms.Form):
    """A hold's reason and its end ("keep until"; the action judges the end:
    at most 90 days, and only an admin may leave it out)."""

    reason = forms.CharField(max_length=2000, widget=forms.TextInput())
    until = forms.DateTimeField(
        required=False,
        label="Keep until (UTC)",
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={"invalid": "until: give a date and time, like 2026-12-24 18:00."},
    )


BULK_CHOICES = [
    ("hold", "Hold"),
    ("release_hold", "Release hold"),
    ("retry", "Retry now"),
    ("approve", "Approve"),
]


class BulkForm(HoldForm):
    """The kept-sandbox list's bulk bar: an action on the selected rows, or on
    every record matching the list's filters (posted beside it)."""

    action = forms.ChoiceField(choices=BULK_CHOICES)
    ids = forms.MultipleChoiceField(choices=(), required=False)
    all_matching = forms.BooleanField(required=False, label="All matching these filters")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Ids are checked by each action under the row lock.
        self.fields["ids"].choices = [(v, v) for v in self.data.getlist("ids")] if self.data else []

    def first_error(self) -> str:
        """The first problem, naming its field."""
        for name, errors in self.errors.items():
            text = str(errors[0])
            return text if text.startswith(f"{name}:") else f"{name}: {text}"
        return ""


class AttestForm(forms.Form):
    typed_sandbox_id = forms.CharField(max_length=200, label="Type the sandbox id")
    reason = forms.CharField(max_length=2000)


class BulkApproveForm(forms.Form):
    reason = forms.CharField(max_length=2000)
    ids = forms.MultipleChoiceField(choices=(), required=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Ids are checked by the action itself under the row lock.
        self.fields["ids"].choices = [(v, v) for v in self.data.getlist("ids")] if self.data else []

    def clean_ids(self):
        ids = self.cleaned_data["ids"]
        if len(ids) > MAX_BULK_APPROVE:
            raise forms.ValidationError(
                f"Approve at most {MAX_BULK_APPROVE} retirements at a time ({len(ids)} selected)."
            )
        return ids


class PolicyForm(forms.Form):
    retirement_mode = forms.ChoiceField(choices=RetirementMode.choices)
    warm_retention_hours = forms.FloatField(
        min_value=0, max_value=24 * 365, label="Warm retention (hours)"
    )
    max_retirements_per_pass = forms.IntegerField(min_value=0, max_value=100000)
    notice_hours = forms.FloatField(
        min_value=0,
        max_value=24 * 90,
        required=False,
        label="Notice period (hours, auto mode; 0 = off)",
    )
    workspace_root = forms.CharField(max_length=500)
    # The retirement window (docs/rules.md, the retirement window): all empty is any time.
    time_zone = forms.CharField(
        max_length=64,
        required=False,
        label="Retirement window: time zone (IANA, e.g. Europe/Berlin; empty = any time)",
    )
    window_days = forms.MultipleChoiceField(
        required=False,
        choices=[(d, d.capitalize()) for d in DAYS],
        widget=forms.CheckboxSelectMultiple,
        label="Retirement window: days",
        error_messages={"invalid_choice": "window_days: %(value)s is not a day (mon … sun)."},
    )
    window_start = forms.TimeField(
        required=False,
        label="Retirement window: opens at (local time)",
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
        error_messages={"invalid": "window_start: give a time, like 09:00."},
    )
    window_end = forms.TimeField(
        required=False,
        label="Retirement window: closes at (at or before the start: the next day)",
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
        error_messages={"invalid": "window_end: give a time, like 17:00."},
    )
    reason = forms.CharField(max_length=2000, label="Reason for the policy change")

    def clean_notice_hours(self):
        return self.cleaned_data.get("notice_hours") or 0.0

    def clean(self):
        data = super().clean()
        window_fields = ("time_zone", "window_days", "window_start", "window_end")
        if any(name in self.errors for name in window_fields):
            return data
        try:
            data["window"] = window_from(
                data.get("time_zone", ""),
                data.get("window_days") or [],
                data.get("window_start"),
                data.get("window_end"),
            )
        except WindowError as exc:
            self.add_error(exc.field, str(exc))
        return data

    def clean_workspace_root(self):
        from sandboxes.ingest.schemas import sandbox_root

        root = self.cleaned_data["workspace_root"].strip()
        try:
            return sandbox_root(root)
        except ValueError as exc:
            raise forms.ValidationError(f"A workspace root {exc}.") from None


def _price(label: str) -> forms.DecimalField:
    return forms.DecimalField(
        required=False, min_value=0, max_digits=12, decimal_places=6, label=label
    )


class PriceForm(forms.Form):
    """An environment's price table; a blank price is "no price" (cost unknown)."""

    price_currency = forms.CharField(max_length=3, min_length=3, initial="USD", label="Currency")
    price_vcpu_hour_running = _price("Started: per vCPU-hour")
    price_memory_gib_hour_running = _price("Started: per GiB-hour of memory")
    price_disk_gib_month_running = _price("Started: per GiB-month of disk")
    price_vcpu_hour_stopped = _price("Stopped: per vCPU-hour")
    price_memory_gib_hour_stopped = _price("Stopped: per GiB-hour of memory")
    price_disk_gib_month_stopped = _price("Stopped: per GiB-month of disk")
    reason = forms.CharField(max_length=2000, label="Reason for the price change")

    def clean_price_currency(self):
        value = self.cleaned_data["price_currency"].strip().upper()
        if not value.isalpha():
            raise forms.ValidationError("A currency is three letters (ISO 4217), like USD.")
        return value


class TokenForm(forms.Form):
    name = forms.CharField(max_length=190)  # ApiToken.NAME_MAX: "token:<name>" fits the audit
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.OPERATOR)
    reason = forms.CharField(max_length=2000, required=False)


def _audit_action_choices():
    from sandboxes.audit import ACTION_GROUPS

    return [("", "any action")] + [
        (group, [(code, code) for code in codes]) for group, codes in ACTION_GROUPS.items()
    ]


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False)
    action = forms.ChoiceField(
        required=False,
        choices=_audit_action_choices,
        error_messages={"invalid_choice": "%(value)s is not an action the console records."},
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # An unknown action stays visible as the selected option (marked unknown)
        # instead of the select falling back to "any action" while nothing matches.
        typed = self.data.get("action") if self.is_bound else ""
        known = {code for _group, codes in self.fields["action"].choices[1:] for code, _ in codes}
        if typed and typed not in known:
            self.fields["action"].widget.choices = [
                *self.fields["action"].choices,
                (typed, f"{typed} (unknown)"),
            ]

    sandbox = forms.CharField(required=False, label="Sandbox id")
    company = forms.UUIDField(
        required=False,
        label="Company id",
        error_messages={"invalid": "give a company id (a uuid)."},
    )
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )


def _event_choices():
    from sandboxes.notifications.channels import EVENT_TYPES

    return [(t, t) for t in EVENT_TYPES]


class ChannelForm(forms.Form):
    """A new notification channel. The URL field never renders a stored value."""

    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(
        choices=[("apprise", "Apprise URL (Slack, Teams, ntfy, email…)"), ("webhook", "Webhook")]
    )
    url = forms.CharField(
        max_length=2000,
        required=False,
        label="URL",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Stored encrypted, never shown again.",
    )
    url_env = forms.CharField(
        max_length=100, required=False, label="…or the environment variable holding the URL"
    )
    secret_env = forms.CharField(
        max_length=100,
        required=False,
        label="Webhook secret from environment variable (blank: the console makes one)",
    )
    events = forms.MultipleChoiceField(
        choices=_event_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event.",
    )
    reason = forms.CharField(max_length=2000, required=False)


class ChannelEditForm(forms.Form):
    name = forms.CharField(max_length=200)
    url = forms.CharField(
        max_length=2000,
        required=False,
        label="New URL (blank keeps the stored one)",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    url_env = forms.CharField(max_length=100, required=False, label="URL environment variable")
    secret_env = forms.CharField(
        max_length=100, required=False, label="Secret environment variable"
    )
    events = forms.MultipleChoiceField(
        choices=_event_choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    enabled = forms.BooleanField(required=False)
    reason = forms.CharField(max_length=2000, required=False)


class UserCreateForm(forms.Form):
    """A new user from the Users page: the set-password link does the rest."""

    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False, help_text="where the set-password link is mailed")
    role = forms.ChoiceField(
        choices=[("reviewer", "reviewer"), ("operator", "operator"), ("admin", "admin")],
        initial="reviewer",
    )
    reason = forms.CharField(max_length=2000, label="Reason for adding this user")


class OwnerMailForm(forms.Form):
    """An environment's owner e-mail. The URL field never renders a stored value."""

    url = forms.CharField(
        max_length=2000,
        required=False,
        label="SMTP URL (mailto:// or mailtos://; blank keeps the stored one)",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Stored encrypted, never shown again. No recipient: each mail goes to the "
        "task's owner.",
    )
    url_env = forms.CharField(
        max_length=100, required=False, label="…or the environment variable holding the URL"
    )
    enabled = forms.BooleanField(required=False, label="Mail owners their notices")
    reason = forms.CharField(max_length=2000, required=False)
