"""A round trip: a real reconciler pass salvages a local sandbox's unsaved files
and destroys it; restore_salvage then writes them back identical, from the
store and from the zip the API serves."""

import io

import pytest
from django.core.management import call_command
from django.test import Client

from sandboxes import models as m

from .conftest import SAVED, retirement_of

pytestmark = pytest.mark.django_db

WORK = {
    **SAVED,
    "src/app.py": b"print('edited after the save')\n",  # changed
    "notes/new.txt": b"fresh work\n",  # added
    "data/blob.bin": bytes(range(256)) * 4096,  # added, 1 MiB of every byte value
}
UNSAVED = {p: body for p, body in WORK.items() if SAVED.get(p) != body}


def tree(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def retired(warm, local, reconcile):
    lease = warm(
        files={k: v for k, v in WORK.items() if k != "old.txt"}, status=m.LeaseStatus.FAILED
    )
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    assert local.count("destroy") == 1  # the sandbox is gone: the salvage is the only copy
    return r


def test_a_salvaged_sandbox_is_restored_identical_from_the_store(retired, tmp_path):
    out = io.StringIO()
    call_command("restore_salvage", retired.provider_lease_id, str(tmp_path / "back"), stdout=out)
    assert tree(tmp_path / "back") == UNSAVED
    assert "deleted in the sandbox, not touched: old.txt" in out.getvalue()


def test_a_salvaged_sandbox_is_restored_identical_from_the_downloaded_zip(retired, tmp_path):
    _, raw = m.ApiToken.issue("restorer", m.TokenScope.REVIEWER)
    response = Client().get(
        f"/api/v1/kept-sandboxes/{retired.provider_lease_id}/salvage.zip",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 200
    (tmp_path / "salvage.zip").write_bytes(b"".join(response.streaming_content))
    call_command(
        "restore_salvage",
        str(tmp_path / "back"),
        from_zip=str(tmp_path / "salvage.zip"),
        stdout=io.StringIO(),
    )
    assert tree(tmp_path / "back") == UNSAVED
