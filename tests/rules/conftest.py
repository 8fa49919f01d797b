"""The pure rules (sandboxes/rules/) are tested on plain data: no test here may
ask for the database. pytest-django already refuses a query from a test without
the mark; this refuses the mark itself, so the folder runs with no test database."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE not in Path(item.path).parents:
            continue
        if item.get_closest_marker("django_db") or {"db", "transactional_db"} & set(
            item.fixturenames
        ):
            raise pytest.UsageError(f"{item.nodeid}: tests/rules runs without a database")
