"""An owner's digest in words (sandboxes/rules/owner_digest.py): pure, over plain data."""

from datetime import UTC, datetime, timedelta

from sandboxes.rules import owner_digest as d

NOW = datetime(2026, 12, 2, 5, 20, 30, tzinfo=UTC)


def entry(**kwargs):
    base = {
        "task_key": "PAP-142",
        "task_title": "Fix the importer",
        "sandbox": "daytona:7f9a",
        "record_url": "https://console.example.com/sandboxes/1/",
    }
    return d.Entry(**(base | kwargs))


def test_a_digest_belongs_to_the_hour_it_is_formed_in():
    assert d.hour_of(NOW) == datetime(2026, 12, 2, 5, tzinfo=UTC)


def test_a_notice_counts_down_to_its_retire_after_from_the_moment_of_sending():
    at = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    n = d.Notice(retire_after=at, keep_url="https://console.example.com/keep/abc/")
    assert d.notice_words(n, NOW) == "Will be retired in 2 d 3 h, at 2026-12-04 09:00:00 UTC."
    assert d.notice_words(n, at + timedelta(seconds=5)) == (
        "Due to be retired now: its notice ended at 2026-12-04 09:00:00 UTC."
    )
    lines = d.entry_lines(entry(notice=n), NOW)
    assert "  Keep it: https://console.example.com/keep/abc/" in lines
    # Once the notice is over, the keep link is no use: it is left out.
    assert not any("Keep it" in x for x in d.entry_lines(entry(notice=n), at))


def test_a_notice_that_no_longer_stands_has_no_countdown_nor_keep_link():
    n = d.Notice(NOW + timedelta(hours=1), stands=False, stage="awaiting_approval", keep_url="k")
    lines = d.entry_lines(entry(notice=n), NOW)
    assert "  No longer to be retired at 2026-12-02 06:20:30 UTC: it is awaiting approval now." in (
        lines
    )
    assert not any("Keep it" in x for x in lines)


def test_a_retirement_lists_each_exported_file_and_what_was_deleted():
    r = d.Retired(
        exported=(d.ExportedFile("src/app.py", 812, "https://c/attachments/1/"),),
        deleted=("old.txt",),
    )
    assert d.retired_words(r) == [
        "Retired: exported 1 file (812 B) to the task:",
        "    src/app.py (812 B) https://c/attachments/1/",
        "Deleted since the last save: old.txt",
    ]
    assert d.retired_words(d.Retired()) == ["Retired: nothing was unsaved, nothing was exported."]


def test_the_subject_counts_what_happens_to_the_owners_sandboxes():
    notice = d.Notice(NOW + timedelta(hours=3))
    entries = [entry(notice=notice), entry(retired=d.Retired()), entry(notice=notice)]
    subject, body = d.compose(entries, environment="prod", owner_name="", now=NOW)
    assert subject == "[prod] 3 sandboxes of your tasks: 2 to be retired, 1 retired"
    assert body.startswith("Hello,\n") and body.count("PAP-142 Fix the importer\n") == 3
    assert d.subject([entry(retired=d.Retired())], "prod") == (
        "[prod] 1 sandbox of your tasks: 1 retired"
    )
