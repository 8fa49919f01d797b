"""Where salvaged files live in production: `check --deploy` warns when several
machines may run reconcilers (REDIS_URL) and salvaged files are on a local disk,
where a salvage exported by one machine is the only copy, on that machine only
(README: object storage for salvaged files). The storage is chosen by
ATTACHMENTS_STORAGE; a bad choice stops the start, naming the variable."""

import pytest
from django.core import checks
from django.core.files.storage import FileSystemStorage, storages

from sandboxes.checks import SALVAGE_ON_ONE_DISK, salvage_storage_is_shared

from .helpers import manage, production_env

WORDS = "salvaged files would live on one machine's disk"
REDIS = "redis://127.0.0.1:6379/15"
S3 = {
    "ATTACHMENTS_STORAGE": "s3",
    "AWS_STORAGE_BUCKET_NAME": "console-salvage",
    "AWS_S3_ENDPOINT_URL": "https://minio.internal:9000",
    "AWS_S3_REGION_NAME": "us-east-1",
}


def test_check_deploy_warns_with_redis_and_a_local_disk():
    done = manage("check", "--deploy", env=production_env(REDIS_URL=REDIS))
    assert done.returncode == 0, done.stderr
    assert SALVAGE_ON_ONE_DISK in done.stderr and WORDS in done.stderr
    failed = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=production_env(REDIS_URL=REDIS)
    )
    assert failed.returncode != 0


def test_check_deploy_is_clean_with_redis_and_a_bucket():
    done = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=production_env(REDIS_URL=REDIS, **S3)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert WORDS not in done.stderr


def test_one_machine_without_redis_is_not_warned():
    done = manage("check", "--deploy", env=production_env(REDIS_URL=None))
    assert WORDS not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ATTACHMENTS_STORAGE": "gcs"}, "ATTACHMENTS_STORAGE"),
        ({"ATTACHMENTS_STORAGE": "s3"}, "AWS_STORAGE_BUCKET_NAME"),
    ],
)
def test_a_bad_storage_choice_stops_the_start_naming_the_variable(env, named):
    done = manage("check", env=production_env(**env))
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr


@pytest.mark.parametrize(
    ("debug", "redis", "warned"),
    [(False, REDIS, True), (True, REDIS, False), (False, "", False)],
)
def test_the_check_itself(settings, debug, redis, warned):
    settings.DEBUG, settings.REDIS_URL = debug, redis
    assert isinstance(storages["default"], FileSystemStorage)
    found = salvage_storage_is_shared()
    assert [(w.id, WORDS in w.msg) for w in found] == (
        [(SALVAGE_ON_ONE_DISK, True)] if warned else []
    )
    assert all(w.level == checks.WARNING for w in found)


def test_the_check_runs_with_the_deploy_checks_only(settings):
    settings.DEBUG, settings.REDIS_URL = False, REDIS
    ids = {m.id for m in checks.run_checks(include_deployment_checks=True)}
    assert SALVAGE_ON_ONE_DISK in ids
    assert SALVAGE_ON_ONE_DISK not in {m.id for m in checks.run_checks()}
