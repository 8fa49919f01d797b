"""The provider protocol: typed results, classified errors, time budgets and retries.

Everything the reconciler knows about a sandbox comes through these types, so
they carry the provider's own state plus what a receipt needs (docs/rules.md,
proof and claims and failures; docs/architecture.md, the rooms).
"""

from __future__ import annotations

import builtins
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol, TypeVar, runtime_checkable

log = logging.getLogger(__name__)

T = TypeVar("T")


class SandboxState(StrEnum):
    """Daytona's `SandboxState`, all 22 values (daytonaio/daytona
    apps/api/src/sandbox/enums/sandbox-state.enum.ts; the `daytona-api-client`
    model of the same name). Anything newer parses as `unknown`; `raw` keeps it."""

    CREATING = "creating"
    RESTORING = "restoring"
    DESTROYED = "destroyed"
    DESTROYING = "destroying"
    STARTED = "started"
    STOPPED = "stopped"
    STARTING = "starting"
    STOPPING = "stopping"
    ERROR = "error"
    BUILD_FAILED = "build_failed"
    PENDING_BUILD = "pending_build"
    BUILDING_SNAPSHOT = "building_snapshot"
    UNKNOWN = "unknown"
    PULLING_SNAPSHOT = "pulling_snapshot"
    ARCHIVED = "archived"
    ARCHIVING = "archiving"
    RESIZING = "resizing"
    SNAPSHOTTING = "snapshotting"
    FORKING = "forking"
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"

    @classmethod
    def parse(cls, value: object) -> SandboxState:
        """Map a provider's state string to ours; anything new is `unknown` (raw keeps it)."""
        if not isinstance(value, str):
            return cls.UNKNOWN
        try:
            return cls(value.strip().lower())
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_transitional(self) -> bool:
        return self in TRANSITIONAL_STATES


# States a sandbox rests in until someone acts. `paused` is one of them: a
# paused sandbox stays paused (it can be stopped, or resumed where supported).
SETTLED_STATES = frozenset(
    {
        SandboxState.STARTED,
        SandboxState.STOPPED,
        SandboxState.ARCHIVED,
        SandboxState.PAUSED,
        SandboxState.ERROR,
        SandboxState.BUILD_FAILED,
        SandboxState.DESTROYED,
    }
)
# States that settle on their own; `unknown` also covers states newer than
# this list, which settle without our help too.
TRANSITIONAL_STATES = frozenset(set(SandboxState) - SETTLED_STATES)
FAILED_STATES = frozenset({SandboxState.ERROR, SandboxState.BUILD_FAILED})


@dataclass(frozen=True)
class Resources:
    """What a sandbox holds (Daytona's `cpu`, `gpu`, `memory` GiB, `disk` GiB):
    what a kept sandbox costs while it is kept. None is a size the provider does
    not report (the local provider measures only its disk): unknown, never 0."""

    cpu: float | None
    memory_gib: float | None
    disk_gib: float | None
    gpu: int = 0

    def as_payload(self) -> dict:
        return {
            "cpu": self.cpu,
            "memory_gib": self.memory_gib,
            "disk_gib": self.disk_gib,
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class SandboxInfo:
    """One read of a sandbox. `state` is where it is; `desired_state` where the
    provider is taking it (Daytona's `desiredState`): right after a stop, start or
    delete the old state stays while the request is pending. A sandbox whose
    deletion was accepted reads `destroying` whatever its old state, because
    Daytona has renamed it and will not bring it back."""

    id: str
    name: str
    state: SandboxState
    labels: dict[str, str]
    toolbox_proxy_url: str | None
    raw: dict = field(default_factory=dict, compare=False)
    desired_state: str | None = None
    resources: Resources | None = None

    @property
    def pending(self) -> bool:
        """A requested change the provider has not finished yet. An errored
        sandbox is not pending (Daytona clears `pending` on error): it stays put."""
        if self.state in FAILED_STATES:
            return False
        return bool(self.desired_state) and self.desired_state != str(
            self.raw.get("state") or self.state
        )


@dataclass(frozen=True)
class Confirmation:
    """The provider's confirmed state after an action: what a receipt stores."""

    sandbox_id: str
    state: SandboxState
    confirmed_at: datetime
    request_id: str
    operation: str
    provider: str = ""

    def as_payload(self) -> dict:
        return {
            "sandbox_id": self.sandbox_id,
            "state": str(self.state),
            "confirmed_at": self.confirmed_at.isoformat(),
            "request_id": self.request_id,
            "operation": self.operation,
            "provider": self.provider,
        }


@dataclass(frozen=True)
class FileDigest:
    path: str
    sha256: str
    size: int


# --- errors -----------------------------------------------------------------


class ProviderError(Exception):
    """A provider call failed; `transient` says whether retrying later can help."""

    transient = False

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        sandbox_id: str = "",
        status_code: int | None = None,
    ):
        super().__init__(message)
        self.operation = operation
        self.sandbox_id = sandbox_id
        self.status_code = status_code


class TransientProviderError(ProviderError):
    """429 / 5xx / 409, 400 "state change in progress", timeouts, dropped connections."""

    transient = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class BudgetExhausted(TransientProviderError):
    """The step's time budget ran out while the error was still transient."""


class ProviderAuthError(ProviderError):
    """401 / 403: retrying cannot help; the token is wrong or lacks rights."""


class SandboxNotFound(ProviderError):
    """The sandbox is gone, for operations where gone is an error (start, hash, ...)."""


class UnsafePath(ProviderError):
    """A path would leave the sandbox's root (`..`, absolute, symlink out)."""


class ProviderProtocolError(ProviderError):
    """The provider answered something we cannot parse."""


class RootNotFound(ProviderError):
    """The workspace root does not exist in the sandbox: refuse to call it empty."""


# --- instrumentation ----------------------------------------------------------

CallHook = Callable[[str, str, float, "type[BaseException] | None"], None]

#: Callbacks `(provider, operation, seconds, error_class_or_None)` run after every
#: public provider operation. A hook that raises is logged and ignored.
CALL_HOOKS: list[CallHook] = []


def _emit(provider: str, operation: str, seconds: float, error: type[BaseException] | None):
    for hook in list(CALL_HOOKS):
        try:
            hook(provider, operation, seconds, error)
        except Exception:
            log.exception("provider call hook %r failed", hook)


@contextmanager
def observed(provider: str, operation: str) -> Iterator[None]:
    started = time.monotonic()
    error: type[BaseException] | None = None
    try:
        yield
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = type(exc)
        raise
    finally:
        _emit(provider, operation, time.monotonic() - started, error)


# --- budgets and retries -------------------------------------------------------


class Budget:
    """A deadline for one step; every attempt and every wait must fit inside it."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.started = time.monotonic()
        self.deadline = self.started + self.seconds

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def new_request_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def _setting(name: str, default):
    """Read a Django setting, or the default when Django is not configured (benchmarks)."""
    try:
        from django.conf import settings

        return getattr(settings, name, default)
    except Exception:
        return default


class RetryingProvider:
    """Shared machinery: the per-step budget, jittered retries and the concurrency cap."""

    name = "base"

    def __init__(
        self,
        *,
        budget_seconds: float | None = None,
        max_concurrency: int | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 10.0,
        poll_interval: float = 1.0,
        seed: int | None = None,
    ):
        if budget_seconds is None:
            budget_seconds = _setting("PROVIDER_STEP_BUDGET_SECONDS", 90)
        if max_concurrency is None:
            max_concurrency = _setting("PROVIDER_MAX_CONCURRENCY", 8)
        self.budget_seconds = float(budget_seconds)
        self.max_concurrency = max(1, int(max_concurrency))
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.poll_interval = poll_interval
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()

    def budget(self, seconds: float | None = None) -> Budget:
        return Budget(self.budget_seconds if seconds is None else seconds)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1))
        with self._rng_lock:
            return self._rng.uniform(ceiling / 2, ceiling)

    def _sleep(self, seconds: float, budget: Budget, *, why: str, operation: str, sandbox_id: str):
        """Wait inside the budget, or give up now if the wait cannot fit."""
        # Leave a sliver for the call that follows the wait.
        if seconds + 0.02 >= budget.remaining():
            raise BudgetExhausted(
                f"{self.name} {operation} {sandbox_id}: {why}; "
                f"gave up after {budget.elapsed():.1f}s of a {budget.seconds:g}s budget",
                operation=operation,
                sandbox_id=sandbox_id,
            )
        time.sleep(seconds)

    def retrying(
        self, operation: str, sandbox_id: str, budget: Budget, attempt_once: Callable[[], T]
    ) -> T:
        """Call `attempt_once` until it succeeds, fails for good, or the budget runs out."""
        attempt = 0
        while True:
            try:
                return attempt_once()
            except BudgetExhausted:
                raise
            except TransientProviderError as exc:
                attempt += 1
                if exc.retry_after is not None:
                    delay, why = exc.retry_after, f"asked to retry after {exc.retry_after:g}s"
                else:
                    delay, why = self._backoff(attempt), "still failing"
                try:
                    self._sleep(
                        delay,
                        budget,
                        why=f"{why} (attempt {attempt}, last error: {exc})",
                        operation=operation,
                        sandbox_id=sandbox_id,
                    )
                except BudgetExhausted as final:
                    final.status_code = exc.status_code
                    raise final from exc

    def _confirmation(
        self, info_or_id: SandboxInfo | str, state: SandboxState, request_id: str, operation: str
    ) -> Confirmation:
        sandbox_id = info_or_id if isinstance(info_or_id, str) else info_or_id.id
        return Confirmation(
            sandbox_id=sandbox_id,
            state=state,
            confirmed_at=utcnow(),
            request_id=request_id,
            operation=operation,
            provider=self.name,
        )


@runtime_checkable
class Provider(Protocol):
    name: str

    def get(self, sandbox_id: str) -> SandboxInfo: ...

    def list(self, labels: dict[str, str] | None = None) -> Iterator[SandboxInfo]: ...

    def start(self, sandbox_id: str) -> Confirmation: ...

    def stop(self, sandbox_id: str) -> Confirmation: ...

    def archive(self, sandbox_id: str) -> Confirmation: ...

    def destroy(self, sandbox_id: str) -> Confirmation: ...

    def hash_files(self, sandbox_id: str, root: str) -> dict[str, FileDigest]: ...

    def open_files(
        self, sandbox_id: str, root: str, paths: builtins.list[str]
    ) -> Iterator[tuple[str, Iterator[bytes]]]: ...

    def create(
        self,
        name: str,
        labels: dict,
        files: dict[str, bytes] | None = None,
        root: str = "workspace",
    ) -> SandboxInfo: ...


def check_relative_path(path: str, *, operation: str = "", sandbox_id: str = "") -> str:
    """Normalise a path relative to a sandbox root; refuse absolute paths and `..`."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise UnsafePath(
            f"refused empty or invalid path {path!r}", operation=operation, sandbox_id=sandbox_id
        )
    if path.startswith("/"):
        raise UnsafePath(
            f"refused absolute path {path!r}", operation=operation, sandbox_id=sandbox_id
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafePath(
            f"refused path {path!r}: it leaves the sandbox root",
            operation=operation,
            sandbox_id=sandbox_id,
        )
    return "/".join(parts)
