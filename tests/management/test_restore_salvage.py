"""manage.py restore_salvage: the files back under DIR, from the store or a salvage.zip,
verified, never outside DIR, never over different work without --force."""

import hashlib
import io
import json
import os
import zipfile
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sandboxes.models import AuditEvent
from sandboxes.salvage_archive import salvage_of, stream_zip
from tests.factories import RetirementFactory, salvage_export

pytestmark = pytest.mark.django_db

OLD = {"src/app.py": b"v1\n", "notes/a.txt": b"note\n"}
NEW = {"src/app.py": b"v2\n"}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def salvaged(db):
    r = RetirementFactory()
    first = salvage_export(r, OLD, confirmed_at=timezone.now() - timedelta(hours=1))
    second = salvage_export(r, NEW, deleted=["gone.txt"])
    return r, first, second


def restore(*args, **options) -> str:
    out = io.StringIO()
    call_command("restore_salvage", *[str(a) for a in args], stdout=out, **options)
    return out.getvalue()


def tree(folder) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def zip_of(r, path):
    path.write_bytes(b"".join(stream_zip(salvage_of(r))))
    return path


def test_it_writes_the_latest_version_of_each_path_and_says_what_it_wrote(salvaged, tmp_path):
    r, _, _ = salvaged
    out = restore(r.provider_lease_id, tmp_path / "back")
    assert tree(tmp_path / "back") == {"src/app.py": b"v2\n", "notes/a.txt": b"note\n"}
    assert "wrote src/app.py (3 bytes" in out and "wrote notes/a.txt" in out
    assert "deleted in the sandbox, not touched: gone.txt" in out
    assert "restored 2 file(s), 8 bytes, from 2 exports" in out
    event = AuditEvent.objects.get(action="salvage.restore")
    assert sorted(event.after["written"]) == ["notes/a.txt", "src/app.py"]


def test_export_picks_one_export(salvaged, tmp_path):
    r, first, _ = salvaged
    restore(r.provider_lease_id, tmp_path / "back", export=str(first.pk)[:8])
    assert tree(tmp_path / "back") == OLD
    with pytest.raises(CommandError, match="no export of this sandbox has that id"):
        restore(r.provider_lease_id, tmp_path / "other", export="ffffffffffff")


def test_a_different_file_is_kept_unless_forced_and_the_same_one_is_unchanged(salvaged, tmp_path):
    r, _, _ = salvaged
    back = tmp_path / "back"
    (back / "src").mkdir(parents=True)
    (back / "src/app.py").write_bytes(b"my newer work\n")
    with pytest.raises(CommandError, match=r"'src/app.py' exists .* --force overwrites it"):
        restore(r.provider_lease_id, back)
    assert tree(back) == {"src/app.py": b"my newer work\n"}  # nothing written, not even notes/
    out = restore(r.provider_lease_id, back, force=True)
    assert "overwrote src/app.py" in out and tree(back)["src/app.py"] == b"v2\n"
    out = restore(r.provider_lease_id, back)
    assert "unchanged src/app.py" in out and "restored 0 file(s)" in out


def _hostile(path: str):
    r = RetirementFactory()
    salvage_export(r, {"fine.txt": b"fine\n", path: b"evil\n"})
    return r


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/etc/evil", "is absolute"),
        ("../evil", r"leaves the folder \(\.\.\)"),
        ("src/../../evil", r"leaves the folder \(\.\.\)"),
        ("src//evil", "empty or '.' segment"),
    ],
)
def test_a_path_that_leaves_dir_is_refused_and_nothing_is_written(tmp_path, path, words):
    r = _hostile(path)
    with pytest.raises(CommandError, match=words):
        restore(r.provider_lease_id, tmp_path / "back")
    assert tree(tmp_path / "back") == {}
    assert not (tmp_path / "evil").exists()


def test_a_symlinked_folder_in_dir_pointing_out_is_refused(tmp_path):
    r = _hostile("src/app.py")
    outside = tmp_path / "outside"
    outside.mkdir()
    back = tmp_path / "back"
    back.mkdir()
    os.symlink(outside, back / "src")
    with pytest.raises(
        CommandError, match="'src/app.py' leads outside the folder through a symlink"
    ):
        restore(r.provider_lease_id, back)
    assert list(outside.iterdir()) == [] and not (back / "fine.txt").exists()


def test_a_symlinked_file_in_dir_pointing_out_is_refused_even_with_force(tmp_path):
    r = _hostile("src/app.py")
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    back = tmp_path / "back"
    (back / "src").mkdir(parents=True)
    os.symlink(victim, back / "src/app.py")
    with pytest.raises(CommandError, match="leads outside the folder through a symlink"):
        restore(r.provider_lease_id, back, force=True)
    assert victim.read_bytes() == b"keep me\n"


def test_a_corrupt_stored_object_is_refused_and_nothing_is_written(salvaged, tmp_path):
    r, _, _ = salvaged
    digest = hashlib.sha256(b"v2\n").hexdigest()
    with open(default_storage.path(f"attachments/{digest[:2]}/{digest[2:4]}/{digest}"), "wb") as fh:
        fh.write(b"bad\n")
    with pytest.raises(
        CommandError, match="src/app.py .* does not hash to what its export recorded"
    ):
        restore(r.provider_lease_id, tmp_path / "back")
    assert tree(tmp_path / "back") == {}
    assert not AuditEvent.objects.filter(action="salvage.restore").exists()


def test_unknown_sandbox_and_nothing_salvaged_are_clear_errors(tmp_path):
    with pytest.raises(CommandError, match="PROVIDER_LEASE_ID: the console keeps no record"):
        restore("no-such-sandbox", tmp_path / "back")
    with pytest.raises(CommandError, match="nothing was salvaged from sandbox"):
        restore(RetirementFactory().provider_lease_id, tmp_path / "back")
    with pytest.raises(CommandError, match="give PROVIDER_LEASE_ID DIR"):
        restore(tmp_path / "back")


def test_it_exits_non_zero_naming_the_problem(salvaged, tmp_path, capsys):
    from django.core.management import execute_from_command_line

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(
            ["manage.py", "restore_salvage", salvaged[0].provider_lease_id, str(tmp_path / "file")]
        )
    assert exited.value.code != 0
    assert "is not a folder" in capsys.readouterr().err


# --- from a downloaded salvage.zip ----------------------------------------------------


def test_from_zip_restores_without_the_database(salvaged, tmp_path):
    r, _, _ = salvaged
    archive = zip_of(r, tmp_path / "salvage.zip")
    with CaptureQueriesContext(connection) as ctx:
        out = restore(tmp_path / "back", from_zip=archive)
    assert ctx.captured_queries == []
    assert tree(tmp_path / "back") == {"src/app.py": b"v2\n", "notes/a.txt": b"note\n"}
    assert f"sandbox {r.provider_lease_id}" in out


def test_from_zip_checks_the_sandbox_id_and_the_export(salvaged, tmp_path):
    r, first, _ = salvaged
    archive = zip_of(r, tmp_path / "salvage.zip")
    with pytest.raises(CommandError, match="is the salvage of sandbox"):
        restore("another-sandbox", tmp_path / "back", from_zip=archive)
    restore(r.provider_lease_id, tmp_path / "back", from_zip=archive, export=str(first.pk))
    assert tree(tmp_path / "back") == OLD


def _rewritten(source, target, change):
    """A copy of the zip at `source` with its manifest passed through `change`."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for name in zin.namelist():
            body = zin.read(name)
            if name == "MANIFEST.json":
                manifest = json.loads(body)
                change(manifest)
                body = json.dumps(manifest).encode()
            zout.writestr(name, body)
    return target


def test_from_zip_refuses_a_path_that_leaves_dir(salvaged, tmp_path):
    r, _, _ = salvaged
    source = zip_of(r, tmp_path / "salvage.zip")

    def escape(manifest):
        manifest["files"][0]["path"] = "../../escaped.txt"

    archive = _rewritten(source, tmp_path / "evil.zip", escape)
    with pytest.raises(CommandError, match=r"leaves the folder \(\.\.\)"):
        restore(tmp_path / "back", from_zip=archive)
    assert tree(tmp_path / "back") == {} and not (tmp_path / "escaped.txt").exists()


def test_from_zip_refuses_a_member_that_does_not_hash_to_its_manifest(salvaged, tmp_path):
    r, _, _ = salvaged
    source = zip_of(r, tmp_path / "salvage.zip")

    def lie(manifest):
        for f in manifest["files"]:
            f["sha256"] = "0" * 64

    archive = _rewritten(source, tmp_path / "lying.zip", lie)
    with pytest.raises(CommandError, match="does not hash to what its export recorded"):
        restore(tmp_path / "back", from_zip=archive)
    assert tree(tmp_path / "back") == {}


def test_from_zip_names_a_file_that_is_no_salvage(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    with pytest.raises(CommandError, match="is not a readable zip"):
        restore(tmp_path / "back", from_zip=tmp_path / "x.zip")
    with zipfile.ZipFile(tmp_path / "y.zip", "w") as z:
        z.writestr("readme.txt", "hi")
    with pytest.raises(CommandError, match="has no MANIFEST.json"):
        restore(tmp_path / "back", from_zip=tmp_path / "y.zip")
    with pytest.raises(CommandError, match="does not exist"):
        restore(tmp_path / "back", from_zip=tmp_path / "none.zip")


def test_from_zip_refuses_a_manifest_entry_without_its_fields(salvaged, tmp_path):
    r, _, _ = salvaged
    source = zip_of(r, tmp_path / "salvage.zip")

    def strip(manifest):
        del manifest["files"][0]["sha256"]

    archive = _rewritten(source, tmp_path / "stripped.zip", strip)
    with pytest.raises(CommandError, match="file entry 0 lacks sha256"):
        restore(tmp_path / "back", from_zip=archive)
    assert not (tmp_path / "back").exists()


def test_a_refused_restore_does_not_even_create_dir(tmp_path):
    r = _hostile("../evil")
    with pytest.raises(CommandError):
        restore(r.provider_lease_id, tmp_path / "new" / "back")
    assert not (tmp_path / "new").exists()
