import re

import pytest
from django.urls import reverse

from sandboxes.models.choices import Stage
from tests.console.fleet import build_fleet
from tests.factories import EnvironmentFactory, RetirementFactory

HX = {"HTTP_HX_REQUEST": "true"}


def _ids(response) -> list[str]:
    return re.findall(r'<tr [^>]*data-sandbox="([^"]+)"', response.content.decode())


def _get(client, **params):
    return client.get(reverse("sandbox-list"), params)


def test_it_lists_open_retirements_by_default(as_reviewer, db):
    RetirementFactory(provider_lease_id="sbx-open")
    RetirementFactory(provider_lease_id="sbx-gone", stage=Stage.RETIRED)
    assert _ids(_get(as_reviewer)) == ["sbx-open"]
    assert set(_ids(_get(as_reviewer, stage="all"))) == {"sbx-open", "sbx-gone"}
    assert _ids(_get(as_reviewer, stage="retired")) == ["sbx-gone"]


def test_it_filters_by_kind_hold_environment_state_and_attention(as_reviewer, db):
    env = EnvironmentFactory(name="east")
    RetirementFactory(
        provider_lease_id="sbx-a",
        kind="resume_failed",
        holds=["retention", "unknown_age"],
        lease__environment=env,
        provider_state="stopped",
        needs_attention=True,
    )
    RetirementFactory(provider_lease_id="sbx-b", holds=["unknown_age_extra"])
    assert _ids(_get(as_reviewer, kind="resume_failed")) == ["sbx-a"]
    assert _ids(_get(as_reviewer, hold="unknown_age")) == ["sbx-a"]
    assert _ids(_get(as_reviewer, hold="retention")) == ["sbx-a"]
    assert _ids(_get(as_reviewer, environment=str(env.pk))) == ["sbx-a"]
    assert _ids(_get(as_reviewer, provider_state="stopped")) == ["sbx-a"]
    assert _ids(_get(as_reviewer, attention="yes")) == ["sbx-a"]
    assert _ids(_get(as_reviewer, attention="no")) == ["sbx-b"]


def test_it_searches_by_sandbox_task_lease_and_run(as_reviewer, db):
    r = RetirementFactory(provider_lease_id="sbx-needle", lease__issue__key="PAP-4242")
    RetirementFactory(provider_lease_id="sbx-hay")
    for q in ("needle", "PAP-4242", "pap-4242", str(r.lease_id), str(r.lease.heartbeat_run_id)):
        assert _ids(_get(as_reviewer, q=q)) == ["sbx-needle"], q


def test_it_sorts(as_reviewer, db):
    for name in ("sbx-b", "sbx-c", "sbx-a"):
        RetirementFactory(provider_lease_id=name)
    assert _ids(_get(as_reviewer, sort="provider_lease_id")) == ["sbx-a", "sbx-b", "sbx-c"]
    assert _ids(_get(as_reviewer)) == ["sbx-a", "sbx-c", "sbx-b"]


def test_it_pages_by_keyset(as_reviewer, db, monkeypatch):
    monkeypatch.setattr("sandboxes.views.sandboxes.PAGE_SIZE", 2)
    for i in range(5):
        RetirementFactory(provider_lease_id=f"sbx-{i}")
    seen = []
    response = _get(as_reviewer, sort="provider_lease_id")
    while True:
        seen += _ids(response)
        match = re.search(r'after=([\w-]+)" rel="next"', response.content.decode())
        if not match:
            break
        response = _get(as_reviewer, sort="provider_lease_id", after=match.group(1))
    assert seen == [f"sbx-{i}" for i in range(5)]


def test_filters_live_in_the_url_and_the_form_keeps_them(as_reviewer, db):
    body = _get(as_reviewer, kind="resume_failed", q="abc").content.decode()
    assert 'value="resume_failed" selected' in body
    assert 'value="abc"' in body
    # The live rows poll the same filtered URL.
    assert re.search(r'hx-get="/sandboxes/\?[^"]*kind=resume_failed[^"]*fp=', body)


def test_live_rows_answer_204_when_unchanged_and_rows_otherwise(as_reviewer, db):
    r = RetirementFactory()
    body = _get(as_reviewer).content.decode()
    fp = re.search(r"fp=([0-9a-f]+)", body).group(1)
    assert as_reviewer.get(reverse("sandbox-list"), {"fp": fp}, **HX).status_code == 204
    r.stage = Stage.HELD
    r.save()
    response = as_reviewer.get(reverse("sandbox-list"), {"fp": fp}, **HX)
    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<tbody id="rows"')


@pytest.mark.parametrize("size", [6, 60])
def test_it_runs_a_bounded_number_of_queries(as_operator, django_assert_max_num_queries, size):
    build_fleet(size)
    with django_assert_max_num_queries(12):
        assert _get(as_operator, stage="all").status_code == 200
    with django_assert_max_num_queries(12):
        assert _get(as_operator, hold="retention", q="sbx").status_code == 200
