"""The Daytona REST client (docs/architecture.md, Providers), one concern a module:

- `transport`: one HTTP call — headers (the skip-activity header on every
  request), the time budget, the credential host allowlist, answer → typed error;
- `sandbox`: Daytona's `Sandbox` read into ours (its 22 states, `desiredState`,
  size) and the states each lifecycle action must reach;
- `lifecycle`: get, list, start, stop, archive, and the soft delete confirmed by a read;
- `toolbox`: hashing for the salvage compare, bulk and single downloads, uploads.

Each builds on the one before; `DaytonaProvider` is the whole client, the
name the registry and the tests import from here.
"""

from sandboxes.providers.daytona.sandbox import _DESIRED, sandbox_info
from sandboxes.providers.daytona.toolbox import BULK_BATCH, CHUNK_SIZE, DaytonaToolbox
from sandboxes.providers.daytona.transport import (
    SERVER_START_WAIT_SECONDS,
    SKIP_ACTIVITY,
    UntrustedHost,
    _retry_after,
    origin,
    segment,
    trusted_origins,
)


class DaytonaProvider(DaytonaToolbox):
    """Daytona's sandboxes through its REST API and toolbox proxy."""


__all__ = [
    "BULK_BATCH",
    "CHUNK_SIZE",
    "SERVER_START_WAIT_SECONDS",
    "SKIP_ACTIVITY",
    "_DESIRED",
    "DaytonaProvider",
    "UntrustedHost",
    "_retry_after",
    "origin",
    "sandbox_info",
    "segment",
    "trusted_origins",
]
