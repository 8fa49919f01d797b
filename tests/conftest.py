import os
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import settings as hypothesis_settings

from sandboxes.models import ApiToken

# CI replays the same generated cases every run, so a red build is reproducible.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(items):
    """Every test hypothesis drives is `slow`: its tens to hundreds of examples
    each make requests and queries, which is most of what the fuzz files cost.
    `make check` leaves them out; the full suite (bin/test, CI) runs them."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.slow)


# --- a real S3 endpoint on loopback -----------------------------------------------


@pytest.fixture(scope="session")
def moto_server():
    """moto's standalone S3 server on a free loopback port, for the whole session."""
    from devtools.s3 import MotoServer

    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def s3(moto_server, settings):
    """Salvaged files in a fresh bucket on the moto server, reached through a door
    the test can shut (`s3.door.close()`: the endpoint is down). `s3.client`
    talks to the bucket directly, behind the console's back."""
    from devtools.s3 import Door, client, storage_settings

    door = Door(moto_server.port).open()
    bucket = f"salvage-{uuid.uuid4().hex[:16]}"
    direct = client(moto_server.url)
    direct.create_bucket(Bucket=bucket)

    def keys() -> list[str]:
        pages = direct.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    settings.STORAGES = {**settings.STORAGES, "default": storage_settings(door.url, bucket)}
    yield SimpleNamespace(door=door, bucket=bucket, client=direct, keys=keys)
    door.close()


# --- a real SMTP server on loopback -------------------------------------------------


@pytest.fixture
def smtp(settings):
    """A real SMTP server (aiosmtpd) on loopback, listed in NOTIFY_ALLOWED_HOSTS
    by host:port: owner e-mail is tested over the wire (README: Owner e-mail)."""
    from tests.notifications.conftest import allow
    from tests.notifications.smtp import Mailbox, free_port

    box = Mailbox(port=free_port())
    box.open()
    allow(settings, box.address)
    yield box
    box.shut()


@pytest.fixture
def ingest_token(db):
    """(token row, raw bearer value) with ingest scope."""
    return ApiToken.issue("paperclip-runtime", "ingest")


@pytest.fixture
def operator_token(db):
    return ApiToken.issue("ops-bot", "operator")


# --- resetting tables in tests ------------------------------------------------------
#
# Receipts and audit rows refuse TRUNCATE (a statement trigger, migration 0010),
# and Django resets the database after a transactional test with one TRUNCATE of
# every table. This is the one documented path around the trigger, and it is
# test-only: the flush runs with `session_replication_role = replica`, which
# turns off ordinary triggers for the transaction and which only a superuser may
# set (the test database's user is one; the app's role in production is not, and
# no app code sets it).


def _flush_past_append_only_triggers():
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush
    if getattr(original, "_test_reset", False):
        return

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        statements = original(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
        if not statements:
            return statements
        return ["SET LOCAL session_replication_role = replica", *statements]

    sql_flush._test_reset = True
    DatabaseOperations.sql_flush = sql_flush


_flush_past_append_only_triggers()
