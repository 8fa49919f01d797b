import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sandboxes.models import AuditEvent
from tests.console.fleet import build_fleet
from tests.factories import AuditEventFactory


@pytest.fixture
def trail(db):
    AuditEventFactory(
        actor_label="oscar", action="retirement.hold", sandbox_id="sbx-1", reason="r1"
    )
    AuditEventFactory(
        actor_label="alice",
        action="retirement.approve",
        sandbox_id="sbx-2",
        reason="r2",
        before={"stage": "awaiting_approval"},
        after={"stage": "awaiting_approval", "next_attempt_at": "2026-01-01T00:00:00+00:00"},
    )
    AuditEventFactory(actor_label="token:ops-bot", action="retirement.retry", sandbox_id="sbx-1")


def _actions(response):
    return [
        line.split('"')[1]
        for line in response.content.decode().splitlines()
        if "data-audit-action" in line
    ]


def test_reviewers_read_the_whole_trail(as_reviewer, trail):
    response = as_reviewer.get(reverse("audit"))
    assert sorted(_actions(response)) == [
        "retirement.approve",
        "retirement.hold",
        "retirement.retry",
    ]
    body = response.content.decode()
    # A key only in `after` is context, shown without a made-up "—" before it.
    assert "next attempt at: 2026-01-01 00:00:00 UTC" in body


def test_it_filters_by_actor_action_sandbox_and_time(as_reviewer, trail):
    url = reverse("audit")
    assert _actions(as_reviewer.get(url, {"actor": "ALI"})) == ["retirement.approve"]
    assert _actions(as_reviewer.get(url, {"action": "retirement.hold"})) == ["retirement.hold"]
    assert sorted(_actions(as_reviewer.get(url, {"sandbox": "sbx-1"}))) == [
        "retirement.hold",
        "retirement.retry",
    ]
    future = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert _actions(as_reviewer.get(url, {"since": future})) == []
    assert len(_actions(as_reviewer.get(url, {"until": future}))) == 3


def test_reviewers_export_csv_streamed(as_reviewer, trail):
    response = as_reviewer.get(reverse("audit-export-csv"), {"sandbox": "sbx-1"})
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["action"] for r in rows] == ["retirement.hold", "retirement.retry"]
    assert rows[0]["actor_label"] == "oscar" and rows[0]["reason"] == "r1"
    assert json.loads(rows[0]["before"]) == {}


def test_reviewers_export_json_streamed(as_reviewer, trail):
    response = as_reviewer.get(reverse("audit-export-json"))
    assert response.streaming
    data = json.loads(b"".join(response.streaming_content))
    assert len(data) == 3
    approve = next(d for d in data if d["action"] == "retirement.approve")
    assert approve["before"] == {"stage": "awaiting_approval"}
    assert set(approve) >= {"at", "actor_label", "action", "object_id", "reason", "after"}


def test_the_export_iterates_instead_of_loading_the_table(as_reviewer, trail, monkeypatch):
    from django.db.models.query import QuerySet

    calls = []
    original = QuerySet.iterator

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("chunk_size"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(QuerySet, "iterator", spy)
    b"".join(as_reviewer.get(reverse("audit-export-json")).streaming_content)
    assert calls == [2000]


def test_audit_rows_cannot_be_changed(trail):
    from sandboxes.models import AppendOnlyError

    event = AuditEvent.objects.first()
    event.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        event.save()


@pytest.mark.parametrize("size", [10, 100])
def test_it_runs_a_bounded_number_of_queries(as_reviewer, django_assert_max_num_queries, size):
    build_fleet(size)
    with django_assert_max_num_queries(12):
        assert as_reviewer.get(reverse("audit")).status_code == 200


def test_csv_export_defuses_spreadsheet_formulas(as_reviewer, db):
    AuditEventFactory(
        actor_label="mallory",
        action="retirement.hold",
        sandbox_id="sbx-9",
        reason='=HYPERLINK("http://evil","x")',
    )
    AuditEventFactory(
        actor_label="mallory",
        action="retirement.retry",
        sandbox_id="sbx-9",
        reason="- minus is fine as text",
    )
    response = as_reviewer.get(reverse("audit-export-csv"))
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    reasons = sorted(r["reason"] for r in rows)
    assert reasons == ["'- minus is fine as text", '\'=HYPERLINK("http://evil","x")']


def _change_cell(body: str, action: str) -> str:
    row = body.split(f'data-audit-action="{action}"', 1)[1].split("</tr>", 1)[0]
    return row.split('data-label="Change"', 1)[1]


def test_zero_is_shown_as_zero_not_as_a_dash(as_reviewer, db):
    # Issue 15, defect 1: the `default` filter turned 0 into "—".
    AuditEventFactory(
        action="environment.edit_policy",
        object_type="environment",
        before={"warm_retention_hours": 24.0, "max_retirements_per_pass": 50},
        after={"warm_retention_hours": 0.0, "max_retirements_per_pass": 0},
    )
    AuditEventFactory(
        action="retirement.failed",
        before={"stage": "comparing", "attempts": 0},
        after={"stage": "failed", "attempts": 1},
    )
    body = as_reviewer.get(reverse("audit")).content.decode()
    policy = _change_cell(body, "environment.edit_policy")
    assert "—" not in policy
    failed = _change_cell(body, "retirement.failed")
    assert "—" not in failed
    assert "0 → 1" in failed


def test_a_key_only_in_after_is_context_not_a_change(as_reviewer, db):
    # Issue 15, defect 2: every retired row read "kind: — → abandoned_warm".
    AuditEventFactory(
        action="retirement.retired",
        actor_label="system",
        before={"stage": "retiring"},
        after={"stage": "retired", "kind": "abandoned_warm"},
    )
    cell = _change_cell(as_reviewer.get(reverse("audit")).content.decode(), "retirement.retired")
    assert "→ abandoned" not in cell
    assert "retiring → retired" in cell
    assert "abandoned warm" in cell  # still shown, as what the row was about


@pytest.mark.parametrize(
    "action",
    [
        "retirement.retired",
        "retirement.failed",
        "retirement.needs_attention",
        "retirement.dismissed",
        "retirement.stopped",
        "retirement.corrected",
    ],
)
def test_the_action_filter_offers_the_reconcilers_own_actions(as_reviewer, db, action):
    # Issue 15, defect 4: the select listed only the people's actions.
    AuditEventFactory(action=action)
    AuditEventFactory(action="retirement.hold")
    response = as_reviewer.get(reverse("audit"), {"action": action})
    body = response.content.decode()
    assert f'<option value="{action}" selected>' in body
    assert _actions(response) == [action]


def test_an_unknown_action_is_an_error_naming_the_field(as_reviewer, db):
    # Issue 15, defect 4: an unknown ?action= showed an empty table under "any action".
    AuditEventFactory(action="retirement.hold")
    response = as_reviewer.get(reverse("audit"), {"action": "retirement.nonsense"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Action: " in body and "retirement.nonsense" in body
    assert 'value="" selected' not in body
    assert '<option value="retirement.nonsense" selected>retirement.nonsense (unknown)' in body
    assert _actions(response) == []
    # The export refuses the same filter instead of exporting everything.
    assert as_reviewer.get(reverse("audit-export-csv"), {"action": "x"}).status_code == 400


def test_the_trail_reads_like_prose_environment_names_and_sandbox_links(as_reviewer, db):
    # Issue 15 item 10: humanised before → after, environment names, sandbox links.
    from tests.factories import EnvironmentFactory, RetirementFactory

    env = EnvironmentFactory(name="prod-east")
    AuditEventFactory(
        action="environment.edit_policy",
        object_type="environment",
        object_id=str(env.pk),
        before={"warm_retention_hours": 24.0, "retirement_mode": "manual"},
        after={"warm_retention_hours": 0.5, "retirement_mode": "auto"},
    )
    r = RetirementFactory(provider_lease_id="sbx-linked")
    AuditEventFactory(
        action="retirement.hold",
        object_id=str(r.pk),
        sandbox_id="sbx-linked",
        before={"holds": [], "needs_attention": False, "next_attempt_at": None},
        after={
            "holds": ["retention", "operator_hold"],
            "needs_attention": True,
            "next_attempt_at": "2026-01-01T10:00:00.123456+00:00",
        },
    )
    body = as_reviewer.get(reverse("audit")).content.decode()
    policy = _change_cell(body, "environment.edit_policy")
    assert "warm retention</strong>: 1 d → 30 min" in policy and "manual → auto" in policy
    assert "environment <strong>prod-east</strong>" in body
    assert str(env.pk) not in body.split('data-audit-action="environment.edit_policy"')[1][:600]
    hold = _change_cell(body, "retirement.hold")
    assert "none → retention, operator hold" in hold
    assert "no → yes" in hold
    assert "— → 2026-01-01 10:00:00 UTC" in hold and ".123456" not in hold
    assert 'href="/sandboxes/sbx-linked/"' in body
    # The exports keep the raw values.
    data = json.loads(b"".join(as_reviewer.get(reverse("audit-export-json")).streaming_content))
    raw = next(d for d in data if d["action"] == "retirement.hold")
    assert raw["after"]["next_attempt_at"] == "2026-01-01T10:00:00.123456+00:00"
    assert raw["after"]["holds"] == ["retention", "operator_hold"]


def test_the_trail_shows_its_result_count(as_reviewer, trail):
    body = as_reviewer.get(reverse("audit"), {"sandbox": "sbx-1"}).content.decode()
    assert 'data-count="2"' in body and "2 audit rows match" in body
