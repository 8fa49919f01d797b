"""Daytona's sandbox lifecycle: read, list, start, stop, archive, and the soft
delete confirmed by a read (docs/architecture.md, Providers)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum

from sandboxes.providers.base import (
    FAILED_STATES,
    Budget,
    BudgetExhausted,
    Confirmation,
    ProviderAuthError,
    ProviderError,
    ProviderProtocolError,
    SandboxInfo,
    SandboxNotFound,
    SandboxState,
    TransientProviderError,
    new_request_id,
    observed,
)
from sandboxes.providers.daytona.sandbox import (
    _ARCHIVE_STOPS_FIRST,
    _TARGETS,
    ask_again,
    gone,
    reached,
    sandbox_info,
    shown,
)
from sandboxes.providers.daytona.transport import DaytonaTransport


class _Next(Enum):
    """What a lifecycle loop does after asking for its action."""

    READ = "read"  # read the state (and wait on it)
    ASK = "ask"  # ask again at once, without a read


@dataclass
class _Progress:
    """One lifecycle call's memory across its loop."""

    asking: bool = True  # the action must (still) be asked for
    attempts: int = 0  # transient failures of the ask, for the backoff
    seen: builtins.list[str] = field(default_factory=builtins.list)  # states read


class DaytonaLifecycle(DaytonaTransport):
    """Reads and lifecycle actions on `/sandbox`."""

    # --- reads -----------------------------------------------------------

    def _get(
        self, sandbox_id: str, budget: Budget, request_id: str, operation: str = "get"
    ) -> SandboxInfo:
        def attempt() -> SandboxInfo:
            response = self._send(
                "GET",
                self._sandbox_url(sandbox_id),
                operation=operation,
                sandbox_id=sandbox_id,
                request_id=request_id,
                budget=budget,
                not_found_ok=True,
            )
            if response.status_code == 404:
                return gone(sandbox_id)
            return sandbox_info(self._json(response, operation, sandbox_id))

        return self.retrying(operation, sandbox_id, budget, attempt)

    def get(self, sandbox_id: str, *, budget_seconds: float | None = None) -> SandboxInfo:
        with observed(self.name, "get"):
            return self._get(sandbox_id, self.budget(budget_seconds), new_request_id())

    def list(
        self, labels: dict[str, str] | None = None, *, budget_seconds: float | None = None
    ) -> Iterator[SandboxInfo]:
        with observed(self.name, "list"):
            request_id = new_request_id()
            params: dict[str, str] = {}
            if labels:
                params["labels"] = json.dumps(labels, sort_keys=True, separators=(",", ":"))
            seen_cursors: set[str] = set()
            while True:
                budget = self.budget(budget_seconds)  # one budget per page
                items, cursor = self._list_page(params, budget, request_id)
                for item in items:
                    info = sandbox_info(item)
                    # A server that ignores the filter must not widen the listing.
                    if all(info.labels.get(k) == v for k, v in (labels or {}).items()):
                        yield info
                if not cursor:
                    return
                if cursor in seen_cursors:
                    raise ProviderProtocolError(
                        f"list repeated cursor {cursor!r}", operation="list"
                    )
                seen_cursors.add(cursor)
                params = {**params, "cursor": str(cursor)}

    def _list_page(
        self, params: dict[str, str], budget: Budget, request_id: str
    ) -> tuple[builtins.list[object], str | None]:
        """One page of GET /sandbox: a bare array (older APIs) or `{items, nextCursor}`."""

        def attempt() -> object:
            response = self._send(
                "GET",
                f"{self.api_url}/sandbox",
                operation="list",
                sandbox_id="",
                request_id=request_id,
                budget=budget,
                params=params,
            )
            return self._json(response, "list", "")

        body = self.retrying("list", "", budget, attempt)
        if isinstance(body, builtins.list):
            return body, None
        if isinstance(body, dict) and isinstance(body.get("items"), builtins.list):
            return body["items"], body.get("nextCursor")
        raise ProviderProtocolError(
            f"list answered neither an array nor {{items}}: {str(body)[:200]}",
            operation="list",
        )

    # --- start, stop, archive --------------------------------------------

    def _action(self, action: str, sandbox_id: str, budget_seconds: float | None) -> Confirmation:
        with observed(self.name, action):
            return self._lifecycle(
                action, sandbox_id, self.budget(budget_seconds), new_request_id()
            )

    def start(self, sandbox_id: str, *, budget_seconds: float | None = None) -> Confirmation:
        return self._action("start", sandbox_id, budget_seconds)

    def stop(self, sandbox_id: str, *, budget_seconds: float | None = None) -> Confirmation:
        return self._action("stop", sandbox_id, budget_seconds)

    def archive(self, sandbox_id: str, *, budget_seconds: float | None = None) -> Confirmation:
        return self._action("archive", sandbox_id, budget_seconds)

    def _lifecycle(
        self, action: str, sandbox_id: str, budget: Budget, request_id: str
    ) -> Confirmation:
        """Ask for `action`, then read until the sandbox settles in the target state."""
        progress = _Progress()
        try:
            return self._lifecycle_loop(action, sandbox_id, budget, request_id, progress)
        except BudgetExhausted as exc:
            if progress.seen and f"still {progress.seen[-1]}" not in str(exc):
                raise BudgetExhausted(
                    f"{exc} (last seen state: {progress.seen[-1]})",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=exc.status_code,
                ) from exc
            raise

    def _lifecycle_loop(
        self, action: str, sandbox_id: str, budget: Budget, request_id: str, progress: _Progress
    ) -> Confirmation:
        """POST once, then read until settled. Daytona answers a stop, start or
        archive by moving `desiredState` while the old `state` stays (pending): a
        read showing our desired state is our request under way, so it is waited
        for, never asked again (a second POST would only earn 409s)."""
        while True:
            if progress.asking:
                asked = self._ask(action, sandbox_id, budget, request_id, progress)
                if isinstance(asked, Confirmation):
                    return asked
                if asked is _Next.ASK:
                    continue
            info = self._get(sandbox_id, budget, request_id, operation=action)
            progress.seen.append(shown(info))
            if reached(action, info):
                return self._confirmation(info, info.state, request_id, action)
            if info.state == SandboxState.DESTROYED or info.desired_state == "destroyed":
                raise SandboxNotFound(
                    f"cannot {action} {sandbox_id}: the sandbox is gone or being deleted",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=404,
                )
            self._refuse_failed(action, info)
            progress.asking = ask_again(action, info, progress.asking)
            self._sleep(
                self.poll_interval,
                budget,
                why=f"still {shown(info)} waiting for {'/'.join(sorted(_TARGETS[action]))}",
                operation=action,
                sandbox_id=sandbox_id,
            )

    def _ask(
        self, action: str, sandbox_id: str, budget: Budget, request_id: str, progress: _Progress
    ) -> Confirmation | _Next:
        """POST the action once. A transient failure waits out its backoff (a 429
        asks again; anything else reads the state first: the answer may have been
        lost); a 400/422 refusal is judged by a read."""
        try:
            self._send(
                "POST",
                f"{self._sandbox_url(sandbox_id)}/{action}",
                operation=action,
                sandbox_id=sandbox_id,
                request_id=request_id,
                budget=budget,
            )
        except TransientProviderError as exc:
            if isinstance(exc, BudgetExhausted):
                raise
            progress.attempts += 1
            self._pause(exc, progress.attempts, budget, action, sandbox_id)
            return _Next.ASK if exc.status_code == 429 else _Next.READ
        except (SandboxNotFound, ProviderAuthError):
            raise
        except ProviderError as exc:
            # e.g. "Sandbox is not in a stoppable state" on a stop that raced:
            # the read decides whether the target is reached.
            if exc.status_code not in (400, 422):
                raise
            return self._after_refusal(action, sandbox_id, budget, request_id, exc, progress)
        progress.asking = False
        return _Next.READ

    def _after_refusal(
        self,
        action: str,
        sandbox_id: str,
        budget: Budget,
        request_id: str,
        refusal: ProviderError,
        progress: _Progress,
    ) -> Confirmation | _Next:
        info = self._get(sandbox_id, budget, request_id, operation=action)
        if info.state in _TARGETS[action] and not info.pending:
            return self._confirmation(info, info.state, request_id, action)
        self._refuse_failed(action, info, refusal)
        if action == "archive" and info.state in _ARCHIVE_STOPS_FIRST:
            self._lifecycle("stop", sandbox_id, budget, request_id)
            return _Next.ASK
        if not (info.state.is_transitional or info.pending):
            raise refusal
        progress.asking = False  # someone else's change is under way: wait
        return _Next.READ

    def _pause(
        self,
        exc: TransientProviderError,
        attempt: int,
        budget: Budget,
        operation: str,
        sandbox_id: str,
    ) -> None:
        """Wait as the provider asked (Retry-After), else a jittered backoff."""
        self._sleep(
            exc.retry_after if exc.retry_after is not None else self._backoff(attempt),
            budget,
            why=f"last error: {exc}",
            operation=operation,
            sandbox_id=sandbox_id,
        )

    def _refuse_failed(
        self, action: str, info: SandboxInfo, cause: Exception | None = None
    ) -> None:
        """An errored sandbox cannot be started, stopped or archived: Daytona answers
        400 "Sandbox is in an errored state" (sandbox.service.ts
        assertSandboxNotErrored). That is a failure to report, never a success."""
        if info.state in FAILED_STATES:
            reason = info.raw.get("errorReason")
            raise ProviderError(
                f"cannot {action} {info.id}: the provider reports state "
                f"{info.raw.get('state')!r}" + (f" ({reason})" if reason else ""),
                operation=action,
                sandbox_id=info.id,
                status_code=getattr(cause, "status_code", None),
            )

    # --- destroy ---------------------------------------------------------

    def destroy(self, sandbox_id: str, *, budget_seconds: float | None = None) -> Confirmation:
        """Idempotent: a sandbox already gone is destroyed; confirmed by a read (404).

        Daytona's delete is soft (sandbox.service.ts destroy): the sandbox keeps its
        state with `desiredState: destroyed`, is renamed `DESTROYED_<name>_<ms>`,
        goes `destroying`, then reads 404. So the DELETE's answer names the id, and
        everything after it reads by that id: by the old name the sandbox would
        read 404 at once, a false confirmation. A DELETE refused with 409 because a
        deletion is already pending is not retried: the read shows it under way."""
        with observed(self.name, "destroy"):
            budget = self.budget(budget_seconds)
            request_id = new_request_id()
            target = self._ask_delete(sandbox_id, budget, request_id)
            while True:
                info = self._get(target, budget, request_id, operation="destroy")
                if info.state == SandboxState.DESTROYED:
                    return self._confirmation(target, SandboxState.DESTROYED, request_id, "destroy")
                if info.state != SandboxState.DESTROYING:
                    # Not deleted after all (a DELETE whose answer was lost before
                    # it was received): ask again.
                    target = self._ask_delete(target, budget, request_id)
                self._sleep(
                    self.poll_interval,
                    budget,
                    why=f"still {shown(info)} after DELETE",
                    operation="destroy",
                    sandbox_id=target,
                )

    def _ask_delete(self, sandbox_id: str, budget: Budget, request_id: str) -> str:
        """DELETE until accepted, or until a read shows the deletion under way;
        the id to follow from then on."""
        attempt = 0
        while True:
            try:
                return self._delete(sandbox_id, budget, request_id)
            except BudgetExhausted:
                raise
            except TransientProviderError as exc:
                attempt += 1
                if exc.status_code in (400, 409):
                    info = self._get(sandbox_id, budget, request_id, operation="destroy")
                    if info.state in (SandboxState.DESTROYED, SandboxState.DESTROYING):
                        return info.id or sandbox_id  # already being deleted: wait for it
                self._pause(exc, attempt, budget, "destroy", sandbox_id)

    def _delete(self, sandbox_id: str, budget: Budget, request_id: str) -> str:
        """One DELETE; the id its answer names (the renamed sandbox's), else ours."""
        response = self._send(
            "DELETE",
            self._sandbox_url(sandbox_id),
            operation="destroy",
            sandbox_id=sandbox_id,
            request_id=request_id,
            budget=budget,
            not_found_ok=True,
        )
        if response.status_code == 404:
            return sandbox_id
        try:
            body = response.json()
        except ValueError:
            return sandbox_id
        if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"]:
            return body["id"]
        return sandbox_id
