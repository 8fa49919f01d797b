"""jsonb by orjson (sandboxes/pg_json.py): read and written as json, psycopg's
default and Django's JSONField, would, through a real PostgreSQL jsonb column."""

import json

import psycopg
import pytest
from django.db import connection
from psycopg.types.json import Jsonb

from sandboxes.pg_json import JsonbLoader, dumps

pytestmark = pytest.mark.django_db

VALUES = [
    {"receipts": [{"kind": "stop", "at": "2026-12-03T10:00:00Z"}], "remoteCwd": "/home/u"},
    {"ünïcødé": "日本語 🦀", "quote": 'it\'s "q"', "nl": "a\nb", "nul-ish": "\\u0000 text"},
    {"big": 123456789012345678901234567890, "neg": -9223372036854775809},
    {"nineteen": 1234567890123456789, "small": 1, "float": 2.5, "tiny": 2.5e-7},
    [1, [2, [3, {"deep": None}]], True, False, ""],
    "a string",
    42,
    None,
]


@pytest.fixture
def conn():
    # A connection of its own: Django's reads jsonb as text (for JSONField to
    # decode), not through psycopg's json.loads loader the comparison needs.
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    ) as conn:
        yield conn


def read(conn, text: str, *, loader: bool):
    with conn.cursor() as cur:
        if loader:
            cur.adapters.register_loader("jsonb", JsonbLoader)
        cur.execute("SELECT %s::text::jsonb", [text])
        return cur.fetchone()[0]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_loader_reads_what_json_loads_reads(conn, value):
    text = json.dumps(value)
    assert read(conn, text, loader=True) == read(conn, text, loader=False) == value


@pytest.mark.parametrize("text", ['{"huge": 1e400}', '{"exp": 1e300}', "-0.0", "[1e-400]"])
def test_numbers_beyond_a_double_read_as_json_loads_reads_them(conn, text):
    # jsonb keeps them as numerics and writes them out in full; orjson refuses
    # the first, reads the others as floats where json reads an integer or a 0.
    assert read(conn, text, loader=True) == read(conn, text, loader=False)


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_writes_what_json_dumps_writes(conn, value):
    with conn.cursor() as cur:
        cur.execute(
            "SELECT %s::jsonb = %s::jsonb",
            [Jsonb(value, dumps=dumps), Jsonb(value, dumps=json.dumps)],
        )
        assert cur.fetchone()[0] is True


def test_what_orjson_cannot_write_json_writes():
    assert json.loads(dumps({1: "an int key"})) == {"1": "an int key"}
    assert json.loads(dumps({"big": 2**70})) == {"big": 2**70}
    assert isinstance(dumps({"a": 1}), bytes)  # orjson's, when it can
