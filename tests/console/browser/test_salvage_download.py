"""A reviewer clicks the detail page's salvage link in a real browser and gets the
zip: its manifest and files read back."""

import io
import json
import zipfile
from pathlib import Path

import pytest

from sandboxes.models import AuditEvent
from sandboxes.roles import REVIEWERS
from tests import factories as f
from tests.console.browser.conftest import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILES = {"src/app.py": b"print('unsaved')\n", "notes/todo.md": b"- finish it\n"}


def test_a_reviewer_downloads_the_salvage_from_the_detail_page(
    page, live_server, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path / "media"
    f.UserFactory(username="rita", password=PASSWORD, groups=[REVIEWERS])
    r = f.RetirementFactory()
    f.salvage_export(r, FILES, deleted=["old.txt"])
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/sandboxes/{r.pk}/")
    with page.expect_download() as caught:
        page.get_by_role("link", name="Download salvage (.zip)").click()
    download = caught.value
    assert download.suggested_filename == f"salvage-{r.provider_lease_id}.zip"
    archive = zipfile.ZipFile(io.BytesIO(Path(download.path()).read_bytes()))
    manifest = json.loads(archive.read("MANIFEST.json"))
    assert {x["path"]: archive.read(x["zip_path"]) for x in manifest["files"]} == FILES
    assert manifest["deleted"] == ["old.txt"]
    assert AuditEvent.objects.get(action="salvage.download").actor_label == "rita"
