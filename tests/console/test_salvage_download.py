"""Download everything salvaged from a sandbox: the detail page's link
(/sandboxes/<id>/salvage.zip) and the API's …/salvage.zip, read back as a zip."""

import hashlib
import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sandboxes.models import ApiToken, AuditEvent
from sandboxes.salvage_archive import SalvageCorrupt
from tests.console.conftest import login
from tests.factories import RetirementFactory, UserFactory, salvage_export

pytestmark = pytest.mark.django_db

FIRST = {"src/app.py": b"print('edited')\n", "notes/new.txt": b"fresh work\n"}
SECOND = {"src/app.py": b"print('edited again')\n"}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def salvaged(db):
    r = RetirementFactory()
    salvage_export(r, FIRST, deleted=["old.txt"], confirmed_at=timezone.now() - timedelta(hours=1))
    salvage_export(r, SECOND)
    return r


def _url(r):
    return reverse("sandbox-salvage", kwargs={"pk": r.pk})


def _api(r_or_id):
    sid = getattr(r_or_id, "provider_lease_id", r_or_id)
    return f"/api/v1/kept-sandboxes/{sid}/salvage.zip"


def _zip(response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/zip"
    assert response.streaming
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def _sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _corrupt(body: bytes) -> None:
    """Overwrite the stored object of `body` with other bytes, as a bad disk would."""
    name = f"attachments/{_sha(body)[:2]}/{_sha(body)[2:4]}/{_sha(body)}"
    with open(default_storage.path(name), "wb") as fh:
        fh.write(b"not what was exported")


@pytest.mark.parametrize("role", ["admin", "operator", "reviewer"])
def test_every_role_downloads_the_zip_with_its_manifest(salvaged, role, request):
    user = request.getfixturevalue(role)
    archive = _zip(login(user).get(_url(salvaged)))
    names = archive.namelist()
    assert names[0] == "MANIFEST.json"
    manifest = json.loads(archive.read("MANIFEST.json"))
    exports = [x["id"] for x in manifest["receipts"]]
    assert len(exports) == 2
    assert manifest["sandbox"] == {"provider": salvaged.provider, "id": salvaged.provider_lease_id}
    assert manifest["record"]["id"] == str(salvaged.pk)
    assert manifest["lease"]["id"] == str(salvaged.lease_id)
    assert manifest["run"]["id"] == str(salvaged.lease.heartbeat_run_id)
    assert manifest["task"]["key"] == salvaged.lease.issue.key
    assert manifest["deleted"] == ["old.txt"]
    assert manifest["receipts"][0]["deleted"] == ["old.txt"]
    # Every file, in its export's folder, with the bytes and hash the export recorded.
    listed = {(f["export"], f["path"]): f for f in manifest["files"]}
    assert set(listed) == {
        (exports[0], "src/app.py"),
        (exports[0], "notes/new.txt"),
        (exports[1], "src/app.py"),
    }
    for (export, path), f in listed.items():
        body = (FIRST if export == exports[0] else SECOND)[path]
        assert archive.read(f["zip_path"]) == body
        assert f["sha256"] == _sha(body) and f["size"] == len(body)
        assert f["zip_path"].startswith("exports/") and f["zip_path"].endswith("/" + path)
    assert len(names) == 1 + len(listed)
    assert archive.testzip() is None


def test_each_download_is_audited_with_who_and_what(salvaged, reviewer):
    b"".join(login(reviewer).get(_url(salvaged)).streaming_content)
    event = AuditEvent.objects.get(action="salvage.download")
    assert event.actor == reviewer and event.sandbox_id == salvaged.provider_lease_id
    assert event.after["files"] == 3 and event.after["via"] == "console"
    assert len(event.after["exports"]) == 2
    assert event.after["bytes"] == sum(len(b) for b in [*FIRST.values(), *SECOND.values()])


def test_a_person_without_a_role_is_refused_and_anonymous_goes_to_login(salvaged, client):
    assert login(UserFactory()).get(_url(salvaged)).status_code == 403
    response = client.get(_url(salvaged))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert not AuditEvent.objects.filter(action__startswith="salvage.").exists()


def test_a_role_without_download_salvage_is_refused(salvaged):
    from django.contrib.auth.models import Permission

    user = UserFactory()
    user.user_permissions.add(Permission.objects.get(codename="view_console"))
    assert login(user).get(_url(salvaged)).status_code == 403


def test_unknown_record_is_404_and_nothing_salvaged_says_so(reviewer):
    client = login(reviewer)
    assert (
        client.get(
            reverse("sandbox-salvage", kwargs={"pk": RetirementFactory.build().pk})
        ).status_code
        == 404
    )
    bare = RetirementFactory()
    response = client.get(_url(bare))
    assert response.status_code == 404
    assert b"Nothing was salvaged from this sandbox" in response.content


def test_an_unverified_export_is_not_salvage(reviewer):
    r = RetirementFactory()
    salvage_export(r, FIRST, verified=False, stale=True)
    assert login(reviewer).get(_url(r)).status_code == 404


def test_a_corrupt_stored_object_refuses_the_download_before_it_starts(salvaged, reviewer):
    _corrupt(SECOND["src/app.py"])
    response = login(reviewer).get(_url(salvaged))
    assert response.status_code == 409 and not response.streaming
    text = response.content.decode()
    assert "does not hash to its name" in text and "src/app.py" in text
    refused = AuditEvent.objects.get(action="salvage.download_refused")
    assert "src/app.py" in refused.reason
    assert not AuditEvent.objects.filter(action="salvage.download").exists()


def test_a_missing_stored_object_refuses_the_download(salvaged, reviewer):
    body = FIRST["notes/new.txt"]
    default_storage.delete(f"attachments/{_sha(body)[:2]}/{_sha(body)[2:4]}/{_sha(body)}")
    response = login(reviewer).get(_url(salvaged))
    assert response.status_code == 409 and b"is missing" in response.content


def test_an_object_that_changes_while_streaming_breaks_the_zip(salvaged, reviewer):
    """Verified while streaming: the stream stops before the central directory,
    so what arrived does not open as a zip."""
    response = login(reviewer).get(_url(salvaged))
    received = []
    chunks = iter(response.streaming_content)
    received.append(next(chunks))  # the manifest went out; now the object goes bad
    _corrupt(SECOND["src/app.py"])
    with pytest.raises(SalvageCorrupt, match="src/app.py"):
        for chunk in chunks:
            received.append(chunk)
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(b"".join(received)))


def test_the_detail_page_links_the_download_only_when_something_was_salvaged(salvaged, reviewer):
    client = login(reviewer)
    page = client.get(reverse("sandbox-detail", kwargs={"pk": salvaged.pk})).content.decode()
    assert _url(salvaged) in page and "3 salvaged files" in page
    bare = RetirementFactory()
    page = client.get(reverse("sandbox-detail", kwargs={"pk": bare.pk})).content.decode()
    assert "salvage.zip" not in page


def _queries(client, url, **headers) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
        b"".join(response.streaming_content)
    return len(ctx.captured_queries)


def test_the_page_download_costs_the_same_queries_however_much_was_salvaged(reviewer):
    small, large = RetirementFactory(), RetirementFactory()
    salvage_export(small, {"a.txt": b"a"})
    for n in range(4):
        salvage_export(large, {f"f{n}/{i}.txt": f"{n}-{i}".encode() for i in range(5)})
    client = login(reviewer)
    assert _queries(client, _url(small)) == _queries(client, _url(large)) == 7


# --- the API ------------------------------------------------------------------------------


def _bearer(scope: str) -> dict:
    _, raw = ApiToken.issue(f"{scope}-bot", scope)
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@pytest.mark.parametrize("scope", ["operator", "reviewer"])
def test_operator_and_reviewer_tokens_download_through_the_api(salvaged, client, scope):
    archive = _zip(client.get(_api(salvaged), **_bearer(scope)))
    manifest = json.loads(archive.read("MANIFEST.json"))
    assert len(manifest["files"]) == 3
    event = AuditEvent.objects.get(action="salvage.download")
    assert event.actor_label == f"token:{scope}-bot" and event.after["via"] == "api"


def test_the_api_refuses_an_ingest_token_and_no_token(salvaged, client):
    assert client.get(_api(salvaged), **_bearer("ingest")).status_code == 403
    assert client.get(_api(salvaged)).status_code == 401
    assert not AuditEvent.objects.filter(action__startswith="salvage.").exists()


def test_a_reviewer_token_reads_the_list_and_a_sandbox(salvaged, client):
    headers = _bearer("reviewer")
    listed = client.get("/api/v1/kept-sandboxes", **headers)
    assert listed.status_code == 200
    assert [x["sandbox_id"] for x in listed.json()["results"]] == [salvaged.provider_lease_id]
    one = client.get(f"/api/v1/kept-sandboxes/{salvaged.provider_lease_id}", **headers)
    assert one.status_code == 200 and len(one.json()["receipts"]) == 2


def test_a_reviewer_token_still_cannot_act(salvaged, client):
    response = client.post(
        f"/api/v1/kept-sandboxes/{salvaged.provider_lease_id}/hold",
        {"reason": "x"},
        content_type="application/json",
        **_bearer("reviewer"),
    )
    assert response.status_code == 403


def test_the_api_answers_404_for_unknown_and_unsalvaged_sandboxes(client):
    headers = _bearer("reviewer")
    response = client.get(_api("no-such-sandbox"), **headers)
    assert response.status_code == 404 and "keeps no record" in response.json()["error"]
    response = client.get(_api(RetirementFactory()), **headers)
    assert response.status_code == 404 and "Nothing was salvaged" in response.json()["error"]


def test_the_api_refuses_a_corrupt_object_naming_it(salvaged, client):
    _corrupt(FIRST["notes/new.txt"])
    response = client.get(_api(salvaged), **_bearer("operator"))
    assert response.status_code == 409
    body = response.json()
    assert any("notes/new.txt" in p and "does not hash" in p for p in body["problems"])


def test_the_api_download_reaches_a_sandbox_id_with_slashes(client):
    r = RetirementFactory(lease__provider_lease_id="ssh://host/srv/work")
    salvage_export(r, {"a.txt": b"a"})
    archive = _zip(
        client.get(
            "/api/v1/kept-sandboxes/ssh%3A%2F%2Fhost%2Fsrv%2Fwork/salvage.zip",
            **_bearer("reviewer"),
        )
    )
    assert json.loads(archive.read("MANIFEST.json"))["sandbox"]["id"] == "ssh://host/srv/work"


def test_the_api_download_costs_the_same_queries_however_much_was_salvaged(client):
    small, large = RetirementFactory(), RetirementFactory()
    salvage_export(small, {"a.txt": b"a"})
    for n in range(4):
        salvage_export(large, {f"f{n}/{i}.txt": f"{n}-{i}".encode() for i in range(5)})
    headers = _bearer("reviewer")
    assert _queries(client, _api(small), **headers) == _queries(client, _api(large), **headers) == 5
