"""manage.py create_token, load_events and ensure_login."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from devtools.events import event, graph
from sandboxes import models as m

pytestmark = pytest.mark.django_db


def test_create_token_prints_the_token_alone_on_its_last_line():
    out, err = StringIO(), StringIO()
    call_command("create_token", "runtime-eu", scope="ingest", stdout=out, stderr=err)
    raw = out.getvalue().strip().splitlines()[-1]
    token = m.ApiToken.objects.get()
    assert (token.name, token.scope) == ("runtime-eu", "ingest")
    assert m.ApiToken.authenticate(raw) == token
    assert raw not in token.token_hash
    assert "not shown again" in err.getvalue()


def test_create_token_refuses_an_unknown_scope():
    with pytest.raises(CommandError, match="scope"):
        call_command("create_token", "x", scope="root")
    assert not m.ApiToken.objects.exists()


def write_lines(tmp_path, events, extra_lines=()):
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([*(json.dumps(e) for e in events), *extra_lines]) + "\n")
    return str(path)


def test_load_events_applies_a_file_and_is_idempotent(tmp_path):
    ids, events = graph()
    path = write_lines(tmp_path, events)
    out = StringIO()
    call_command("load_events", path, stdout=out)
    assert "accepted 5, duplicates 0" in out.getvalue()
    assert m.EnvironmentLease.objects.filter(pk=ids["lease"]).exists()
    call_command("load_events", path, stdout=out)
    assert "accepted 0, duplicates 5" in out.getvalue()


def test_load_events_with_a_bad_line_loads_nothing_and_names_it(tmp_path):
    _, events = graph()
    events[3]["data"]["status"] = "exploded"
    path = write_lines(tmp_path, events, extra_lines=["{not json"])
    with pytest.raises(CommandError) as raised:
        call_command("load_events", path)
    message = str(raised.value)
    assert "line 4: data.status" in message
    assert "line 6: not valid JSON" in message
    assert m.Environment.objects.count() == 0


def test_load_events_rejects_a_release_of_an_unknown_lease(tmp_path):
    _, events = graph()
    events.append(
        event(
            "lease.released",
            {"lease_id": "7d7f1c4e-4b7a-4a57-8e39-4b8a0a3e9d11", "disposition": "destroy"},
        )
    )
    with pytest.raises(CommandError, match="unknown lease"):
        call_command("load_events", write_lines(tmp_path, events))
    assert m.Environment.objects.count() == 0


def test_load_events_streams_batches_in_one_transaction(tmp_path):
    """Batches of 2 over a 7-event file: everything lands, a progress line goes to
    stderr, and a re-run counts every event as a duplicate."""
    ids, events = graph()
    events.append(event("lease.released", {"lease_id": ids["lease"], "disposition": "destroy"}))
    events.append(
        event(
            "run.upserted", {"run_id": ids["run"], "issue_id": ids["issue"], "status": "succeeded"}
        )
    )
    path = write_lines(tmp_path, events, extra_lines=["", "   "])
    out, err = StringIO(), StringIO()
    call_command("load_events", path, batch_size=2, stdout=out, stderr=err)
    assert "accepted 7, duplicates 0" in out.getvalue()
    assert "7 accepted" in err.getvalue() and "events/s" in err.getvalue()
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).released_at is not None
    assert m.HeartbeatRun.objects.get(pk=ids["run"]).status == "succeeded"
    call_command("load_events", path, batch_size=3, stdout=out, stderr=StringIO())
    assert "accepted 0, duplicates 7" in out.getvalue()


def test_load_events_error_in_a_later_batch_undoes_the_earlier_ones(tmp_path):
    """All-or-nothing across batches: batches 1-2 applied, batch 3 rejected by the
    apply step (an unknown lease), named by its file line, and nothing stays."""
    _, events = graph()
    unknown = "7d7f1c4e-4b7a-4a57-8e39-4b8a0a3e9d11"
    events.append(event("lease.released", {"lease_id": unknown, "disposition": "destroy"}))
    with pytest.raises(CommandError) as raised:
        call_command("load_events", write_lines(tmp_path, events), batch_size=2)
    assert "line 6: data.lease_id: unknown lease" in str(raised.value)
    assert m.Environment.objects.count() == 0
    assert m.IngestedEvent.objects.count() == 0


def test_load_events_names_bad_lines_after_the_first_bad_batch(tmp_path):
    """Once a line is bad nothing is applied, but later lines are still checked."""
    _, events = graph()
    events[0]["data"]["provider"] = "not a provider key"
    events[4]["data"]["status"] = "exploded"
    with pytest.raises(CommandError) as raised:
        call_command("load_events", write_lines(tmp_path, events), batch_size=2)
    message = str(raised.value)
    assert "line 1: data.provider" in message and "line 5: data.status" in message
    assert m.Environment.objects.count() == m.IngestedEvent.objects.count() == 0


def test_load_events_caps_the_errors_it_reports(tmp_path):
    path = tmp_path / "garbage.jsonl"
    path.write_text("{nope\n" * 250)
    with pytest.raises(CommandError) as raised:
        call_command("load_events", str(path), batch_size=50)
    message = str(raised.value)
    assert message.count("not valid JSON") == 100
    assert "and 150 more error(s)" in message


def test_load_events_refuses_a_file_that_is_not_utf8(tmp_path):
    _, events = graph()
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(("\n".join(json.dumps(e) for e in events) + "\n").encode() + b"\xff\n")
    with pytest.raises(CommandError, match="not UTF-8"):
        call_command("load_events", str(path), batch_size=2)
    assert m.Environment.objects.count() == 0


def test_load_events_names_a_missing_file():
    with pytest.raises(CommandError, match="cannot read"):
        call_command("load_events", "/nonexistent/events.jsonl")


def test_ensure_login_creates_an_admin_once(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = StringIO()
    call_command("ensure_login", stdout=out)
    username, password = out.getvalue().strip().split(" / ")
    from django.contrib.auth import authenticate

    user = authenticate(username=username, password=password)
    assert user is not None and user.groups.filter(name="admins").exists()
    again = StringIO()
    call_command("ensure_login", stdout=again)
    assert again.getvalue() == out.getvalue()
    assert oct((tmp_path / "login.txt").stat().st_mode & 0o777) == "0o600"


def test_demo_fleet_enters_through_ingest_and_is_repeatable():
    call_command("demo_fleet", quiet=True)
    first = m.EnvironmentLease.objects.count()
    assert first > 0
    assert m.IngestedEvent.objects.filter(source="demo").count() > 0
    call_command("demo_fleet", quiet=True)
    assert m.EnvironmentLease.objects.count() == first


def test_load_events_refuses_text_postgres_cannot_store(tmp_path):
    _, events = graph()
    events[1]["data"]["title"] = "nul\x00here"
    with pytest.raises(CommandError, match=r"line 2: data.title"):
        call_command("load_events", write_lines(tmp_path, events))
    assert m.Environment.objects.count() == 0


def test_load_events_refuses_nan(tmp_path):
    _, events = graph()
    path = tmp_path / "events.jsonl"
    path.write_text(
        json.dumps(events[0]) + "\n" + json.dumps(events[1]).replace('"A task"', "NaN") + "\n"
    )
    with pytest.raises(CommandError, match="line 2: not valid JSON"):
        call_command("load_events", str(path))
    assert m.Environment.objects.count() == 0
