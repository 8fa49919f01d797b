import pytest
from django.test import override_settings

from .paperclip import Paperclip, create_database, drop_database, scratch_name


@pytest.fixture(scope="session")
def paperclip_dsn():
    name = scratch_name("paperclip_source_test")
    dsn = create_database(name)
    yield dsn
    drop_database(name)


@pytest.fixture
def paperclip(paperclip_dsn):
    source = Paperclip(paperclip_dsn)
    source.truncate()
    yield source
    source.close()


@pytest.fixture(autouse=True)
def cursor_file(tmp_path):
    path = tmp_path / "mirror-cursors.json"
    with override_settings(MIRROR_CURSOR_FILE=path):
        yield path
