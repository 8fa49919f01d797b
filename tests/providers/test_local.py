"""The local provider: real directories, real state changes, no way out of the root."""

import hashlib
import os

import pytest

from sandboxes.providers.base import (
    ProviderError,
    RootNotFound,
    SandboxNotFound,
    SandboxState,
    UnsafePath,
)

FILES = {
    "a.txt": b"hello",
    "dir with space/b c.txt": b"spaced",
    "deep/er/big.bin": os.urandom(300_000),
    "empty": b"",
}


@pytest.fixture
def box(local):
    return local.create("warm-1", {"team": "t"}, FILES)


def read_all(provider, sandbox_id, paths, root="workspace"):
    return {p: b"".join(chunks) for p, chunks in provider.open_files(sandbox_id, root, paths)}


def test_full_lifecycle(local, box):
    assert box.state == SandboxState.STARTED
    assert local.get(box.id).labels == {"team": "t"}

    stopped = local.stop(box.id)
    assert stopped.state == SandboxState.STOPPED and stopped.sandbox_id == box.id
    assert local.get(box.id).state == SandboxState.STOPPED
    assert local.archive(box.id).state == SandboxState.ARCHIVED
    assert local.stop(box.id).state == SandboxState.ARCHIVED  # not running: nothing to do
    assert local.start(box.id).state == SandboxState.STARTED

    gone = local.destroy(box.id)
    assert gone.state == SandboxState.DESTROYED and gone.provider == "local"
    assert not (local.root / box.id).exists()
    assert local.get(box.id).state == SandboxState.DESTROYED
    assert local.destroy(box.id).state == SandboxState.DESTROYED  # idempotent
    with pytest.raises(SandboxNotFound):
        local.start(box.id)
    assert list(local.root.iterdir()) == []


def test_a_read_measures_the_disk_and_reports_no_cpu_or_memory(local, box):
    """Issue 15 item 13: the local provider measures disk; what it cannot know
    (cpu, memory) is unknown, never 0."""
    resources = local.get(box.id).resources
    assert resources.cpu is None and resources.memory_gib is None
    blocks = sum(
        os.lstat(os.path.join(d, f)).st_blocks * 512
        for d, _, files in os.walk(local.root / box.id / "fs")
        for f in files
    )
    assert blocks >= 300_000  # big.bin at least
    assert resources.disk_gib == blocks / 2**30
    (local.root / box.id / "fs" / "workspace" / "more.bin").write_bytes(os.urandom(200_000))
    assert local.get(box.id).resources.disk_gib > resources.disk_gib


def test_a_sandbox_created_with_cpu_and_memory_reports_them_on_every_read(local):
    """Cost that reads true: a size declared at create is reported back, as
    Daytona reports a sandbox's cpu and memory; the disk is still measured."""
    box = local.create("sized", {}, FILES, cpu=2, memory_gib=4)
    local.stop(box.id)
    resources = local.get(box.id).resources
    assert (resources.cpu, resources.memory_gib) == (2.0, 4.0)
    assert resources.disk_gib > 0


def test_state_writes_leave_no_temporary_files(local, box):
    for _ in range(3):
        local.stop(box.id)
        local.start(box.id)
    assert sorted(p.name for p in (local.root / box.id).iterdir()) == ["fs", "state.json"]


def test_list_filters_by_labels(local, box):
    other = local.create("other", {"team": "u"})
    assert [s.id for s in local.list({"team": "t"})] == [box.id]
    assert {s.id for s in local.list()} == {box.id, other.id}


def test_hash_files_starts_a_stopped_sandbox_and_hashes_every_regular_file(local, box, tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"secret")
    os.symlink(outside, local.root / box.id / "fs" / "workspace" / "link-out")
    local.stop(box.id)

    digests = local.hash_files(box.id, "workspace")

    assert {p: (d.sha256, d.size) for p, d in digests.items()} == {
        p: (hashlib.sha256(data).hexdigest(), len(data)) for p, data in FILES.items()
    }
    assert local.get(box.id).state == SandboxState.STARTED


def test_hash_files_of_a_missing_root_is_an_error(local, box):
    with pytest.raises(RootNotFound):
        local.hash_files(box.id, "nope")


def test_open_files_streams_in_chunks(local, box):
    chunks = dict(local.open_files(box.id, "workspace", ["deep/er/big.bin"]))
    pieces = list(chunks["deep/er/big.bin"])
    assert len(pieces) > 1 and b"".join(pieces) == FILES["deep/er/big.bin"]
    assert read_all(local, box.id, ["a.txt", "empty"]) == {"a.txt": b"hello", "empty": b""}


def test_open_files_of_a_missing_file_is_an_error(local, box):
    with pytest.raises(ProviderError):
        read_all(local, box.id, ["nope"])


@pytest.mark.parametrize(
    "path", ["../state.json", "../../x", "a/../../state.json", "/etc/passwd", "", "."]
)
def test_open_files_refuses_paths_out_of_the_root(local, box, path):
    with pytest.raises(UnsafePath):
        read_all(local, box.id, [path])


def test_open_files_refuses_a_symlinked_file_leading_out(local, box, tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"secret")
    os.symlink(outside, local.root / box.id / "fs" / "workspace" / "link")
    with pytest.raises(UnsafePath):
        read_all(local, box.id, ["link"])


def test_open_files_refuses_a_symlinked_directory_leading_out(local, box, tmp_path):
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "f").write_bytes(b"secret")
    os.symlink(tmp_path / "outdir", local.root / box.id / "fs" / "workspace" / "d")
    with pytest.raises(UnsafePath):
        read_all(local, box.id, ["d/f"])


def test_open_files_refuses_a_symlink_to_the_sandbox_state(local, box):
    os.symlink("../../state.json", local.root / box.id / "fs" / "workspace" / "state")
    with pytest.raises(UnsafePath):
        read_all(local, box.id, ["state"])


def test_a_symlink_inside_the_root_is_followed(local, box):
    os.symlink("a.txt", local.root / box.id / "fs" / "workspace" / "alias")
    assert read_all(local, box.id, ["alias"]) == {"alias": b"hello"}


@pytest.mark.parametrize("root", ["..", "../..", "/tmp", "workspace/../.."])
def test_roots_out_of_the_sandbox_are_refused(local, box, root):
    with pytest.raises(UnsafePath):
        local.hash_files(box.id, root)
    with pytest.raises(UnsafePath):
        read_all(local, box.id, ["a.txt"], root=root)


def test_a_root_that_is_a_symlink_out_is_refused(local, box, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", local.root / box.id / "fs" / "escape")
    with pytest.raises(UnsafePath):
        local.hash_files(box.id, "escape")


@pytest.mark.parametrize("sandbox_id", ["../x", "a/b", "..", "", "/abs"])
def test_sandbox_ids_that_are_paths_are_refused(local, sandbox_id):
    with pytest.raises(UnsafePath):
        local.get(sandbox_id)
    with pytest.raises(UnsafePath):
        local.destroy(sandbox_id)


def test_create_refuses_traversal_in_seed_files(local):
    with pytest.raises(UnsafePath):
        local.create("bad", {}, {"../../escape": b"x"})


def test_hooks_see_local_operations(local, box, hook_calls):
    local.stop(box.id)
    assert ("local", "stop") in [(p, op) for p, op, _s, _e in hook_calls]
