"""A release is recorded as sent (docs/rules.md, which rows are judged): only a
missing status is filled in, and only from the disposition."""

import pytest

from sandboxes.rules.codes import Disposition
from sandboxes.rules.release import release_status, release_status_sql

K, S, D = "keep_running", "stop_and_retain", "destroy"
DERIVED = {K: "retained", S: "released", D: "expired"}


@pytest.mark.parametrize("disposition", list(Disposition))
def test_a_missing_status_comes_from_the_disposition_only(disposition):
    assert release_status(disposition) == DERIVED[disposition]


@pytest.mark.parametrize("disposition", list(Disposition))
def test_a_status_sent_is_kept(disposition):
    assert release_status(disposition, "failed") == "failed"


def test_the_sql_form_reads_the_same_table():
    sql = release_status_sql("s", "d")
    assert sql.startswith("COALESCE(s, CASE d ")
    for disposition, status in DERIVED.items():
        assert f"WHEN '{disposition}' THEN '{status}'" in sql
