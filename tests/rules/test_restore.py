"""Which salvaged paths may be written under a folder, and which version of each
path a restore writes (sandboxes/rules/restore.py), over plain data."""

import pytest

from sandboxes.rules.restore import choose, path_problem, pick_export


@pytest.mark.parametrize("path", ["a.txt", "src/app.py", ".env", "dir/.hidden/x", "a..b"])
def test_a_plain_relative_path_may_be_written(path):
    assert path_problem(path) == ""


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "is empty"),
        (None, "is empty"),
        ("/etc/passwd", "is absolute"),
        ("\\\\server\\share", "is absolute"),
        ("C:/Windows", "is absolute"),
        ("..", "leaves the folder (..)"),
        ("../x", "leaves the folder (..)"),
        ("a/../../x", "leaves the folder (..)"),
        ("a\\..\\x", "leaves the folder (..)"),
        ("a//b", "has an empty or '.' segment"),
        ("./a", "has an empty or '.' segment"),
        ("a/", "has an empty or '.' segment"),
        ("a\x00b", "contains a NUL character"),
    ],
)
def test_a_path_that_could_leave_the_folder_is_refused(path, why):
    assert path_problem(path) == why


EXPORTS = [
    {
        "id": "e1",
        "files": [{"path": "a", "sha256": "1"}, {"path": "b", "sha256": "1"}],
        "deleted": [],
    },
    {"id": "e2", "files": [{"path": "a", "sha256": "2"}], "deleted": ["b", "c"]},
    {"id": "e3", "files": [{"path": "c", "sha256": "3"}], "deleted": []},
]


def test_the_latest_export_mentioning_a_path_decides_it():
    chosen = choose(EXPORTS)
    assert [(f["path"], f["sha256"], f["export"]) for f in chosen.files] == [
        ("a", "2", "e2"),
        ("c", "3", "e3"),
    ]
    assert chosen.deleted == ["b"]  # listed deleted by e2, never salvaged again


def test_one_export_alone():
    chosen = choose(EXPORTS, only="e1")
    assert [(f["path"], f["sha256"]) for f in chosen.files] == [("a", "1"), ("b", "1")]
    assert chosen.deleted == []


def test_an_export_is_picked_by_its_id_or_a_unique_prefix():
    ids = ["0f1e2d3c-aaaa", "0f1e2d3c-bbbb", "99887766-cccc"]
    assert pick_export(ids, "99887766") == ("99887766-cccc", "")
    assert pick_export(ids, "0F1E2D3C-AAAA") == ("0f1e2d3c-aaaa", "")
    assert (
        pick_export(ids, "0f1e2d3c")[0] is None and "2 exports" in pick_export(ids, "0f1e2d3c")[1]
    )
    assert "at least 8" in pick_export(ids, "0f1")[1]
    assert "no export" in pick_export(ids, "12345678")[1]
