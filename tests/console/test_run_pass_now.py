"""An operator's "Run a pass now": POST, CSRF, the run_pass permission,
audited, one pass enqueued through django-q2; refused, in words, while a
pass runs or one asked for has not started."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ

from sandboxes.models import AuditEvent
from sandboxes.run_now import TASK
from tests.factories import ReconcilerPassFactory

URL = "/passes/run/"


def _queued() -> list[str]:
    return [q.func() for q in OrmQ.objects.all()]


def test_the_url_is_the_passes_run_action():
    assert reverse("passes-run") == URL


def test_an_operator_enqueues_one_pass_and_it_is_audited(as_operator, db):
    ReconcilerPassFactory()  # the last one finished
    response = as_operator.post(URL, {"reason": "checking a fix"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("passes")
    assert _queued() == [TASK]
    event = AuditEvent.objects.get(action="reconciler.run_pass")
    assert event.actor_label == "oscar-operator" and event.reason == "checking a fix"
    assert event.after["task_id"] == OrmQ.objects.get().task_id()
    assert "A pass is queued" in response.content.decode()


def test_the_queued_pass_runs_the_reconciler(as_operator, db, settings):
    """What is enqueued is the scheduled pass itself, with no arguments."""
    as_operator.post(URL)
    task = OrmQ.objects.get().task
    assert task["func"] == TASK and task["args"] == () and task["kwargs"] == {}


def test_it_is_refused_while_a_pass_runs(as_operator, db):
    ReconcilerPassFactory(
        started_at=timezone.now() - timedelta(seconds=30),
        finished_at=None,
        last_seen_at=timezone.now(),
    )
    page = as_operator.get(reverse("passes")).content.decode()
    assert "data-refusal" in page
    assert re.search(r"a pass is running \(started 3\d s ago\): wait for it to finish", page)
    assert 'disabled aria-describedby="run-refusal"' in page
    body = as_operator.post(URL, follow=True).content.decode()
    assert "No pass was asked for: a pass is running (started" in body
    assert _queued() == []
    assert not AuditEvent.objects.filter(action="reconciler.run_pass").exists()


def test_it_is_refused_while_the_pass_asked_for_has_not_started(as_operator, as_admin, db):
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=1))
    as_operator.post(URL)
    body = as_admin.post(URL, follow=True).content.decode()
    assert "oscar-operator asked for a pass" in body and "has not started yet" in body
    assert len(_queued()) == 1
    # Once a pass has started since, another may be asked for.
    ReconcilerPassFactory(started_at=timezone.now())
    as_admin.post(URL)
    assert len(_queued()) == 2


def test_a_reviewer_may_not_and_sees_no_button(as_reviewer, db):
    assert as_reviewer.post(URL).status_code == 403
    assert _queued() == []
    assert "Run a pass now" not in as_reviewer.get(reverse("passes")).content.decode()


def test_it_rejects_get(as_operator, db):
    assert as_operator.get(URL).status_code == 405
    assert _queued() == []


def test_it_needs_the_csrf_token(operator, db):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(URL).status_code == 403
    assert _queued() == []


def test_anonymous_goes_to_the_login_page(client, db):
    response = client.post(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert _queued() == []


@pytest.mark.parametrize("reason", ["x" * 2001, "bad\x00"])
def test_a_bad_reason_is_refused_in_words_and_nothing_is_queued(as_operator, db, reason):
    body = as_operator.post(URL, {"reason": reason}, follow=True).content.decode()
    assert "No pass was asked for:" in body
    assert _queued() == []


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_outside_a_transaction(operator, monkeypatch):
    """django-q2's ORM broker closes old connections before it enqueues when its
    own database is in autocommit (django_q/brokers/orm.py, get_connection): with
    the queue in another database (the embedded SQLite setup) it closed the
    console's connection inside the action's transaction, and the audit row
    failed with "Cannot operate on a closed database" (seen on SQLite before
    the fix)."""
    from django.db import connection
    from django_q import tasks

    from sandboxes import run_now

    real = tasks.async_task
    seen = []

    def observed(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return real(*args, **kwargs)

    monkeypatch.setattr(tasks, "async_task", observed)
    run_now.run_pass_now(actor=operator)
    assert seen == [False]
    assert AuditEvent.objects.filter(action="reconciler.run_pass").count() == 1
