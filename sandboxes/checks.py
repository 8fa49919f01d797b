"""System checks for a deployment (`manage.py check --deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.core.files.storage import FileSystemStorage, storages

SALVAGE_ON_ONE_DISK = "sandboxes.W001"


@checks.register(checks.Tags.files, deploy=True)
def salvage_storage_is_shared(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """With DEBUG off and REDIS_URL set, reconcilers may run on several machines
    (DOMAIN §2.4): a salvage exported by one of them to its local disk is the only
    copy of the work once the sandbox is destroyed, and only that machine has it."""
    if settings.DEBUG or not getattr(settings, "REDIS_URL", ""):
        return []
    storage = storages["default"]
    if not isinstance(storage, FileSystemStorage):
        return []
    return [
        checks.Warning(
            "Salvaged files are kept on a local filesystem "
            f"({storage.location}) while REDIS_URL lets reconcilers run on more than one "
            "machine: salvaged files would live on one machine's disk.",
            hint=(
                "Set ATTACHMENTS_STORAGE=s3 and AWS_STORAGE_BUCKET_NAME (README: object "
                "storage for salvaged files)."
            ),
            id=SALVAGE_ON_ONE_DISK,
        )
    ]
