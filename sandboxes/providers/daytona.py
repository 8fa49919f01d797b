"""The Daytona REST client (DOMAIN §3): lifecycle, listing and toolbox file access."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from urllib.parse import quote

import httpx

from sandboxes.providers import wire
from sandboxes.providers.base import (
    FAILED_STATES,
    Budget,
    BudgetExhausted,
    Confirmation,
    FileDigest,
    ProviderAuthError,
    ProviderError,
    ProviderProtocolError,
    Resources,
    RetryingProvider,
    RootNotFound,
    SandboxInfo,
    SandboxNotFound,
    SandboxState,
    TransientProviderError,
    UnsafePath,
    check_relative_path,
    new_request_id,
    observed,
    utcnow,
)

# daytonaio/daytona apps/proxy/pkg/proxy/proxy.go SKIP_LAST_ACTIVITY_UPDATE_HEADER;
# the proxy skips the update only when the value is exactly "true".
SKIP_ACTIVITY = {"X-Daytona-Skip-Last-Activity-Update": "true"}
CHUNK_SIZE = 64 * 1024
BULK_BATCH = 64
_IN_PROGRESS = "state change in progress"

# What each lifecycle action must reach. A stop is satisfied by an archived
# sandbox too: it is not running, and archiving is further than stopping.
_TARGETS = {
    "start": frozenset({SandboxState.STARTED}),
    "stop": frozenset({SandboxState.STOPPED, SandboxState.ARCHIVED}),
    "archive": frozenset({SandboxState.ARCHIVED}),
}
# Daytona's `desiredState` once each action is accepted.
_DESIRED = {"start": "started", "stop": "stopped", "archive": "archived"}
# Archive needs a stopped sandbox ("Sandbox is not stopped"): stop these first.
_ARCHIVE_STOPS_FIRST = frozenset({SandboxState.STARTED, SandboxState.PAUSED})
# Daytona's start holds its answer up to 30 s waiting for `started`
# (sandbox.controller.ts waitForSandboxStarted); a shorter read timeout would cut
# a start that is going well and retry it into 409s.
SERVER_START_WAIT_SECONDS = 30.0


def _shown(info: SandboxInfo) -> str:
    state = str(info.raw.get("state") or info.state)
    if info.pending and info.desired_state:
        return f"{state} (desired {info.desired_state})"
    return state


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - utcnow()).total_seconds())
    except (TypeError, ValueError):
        return None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        for key in ("message", "error", "errors", "detail"):
            if isinstance(body.get(key), str | list):
                return str(body[key])
    return str(body)[:300]


class UntrustedHost(ProviderError):
    """A URL the provider handed us (a toolboxProxyUrl) names a host that is not
    trusted with the API key: the request is refused, not sent without it."""


def origin(url: str | httpx.URL) -> str:
    """scheme://host:port of a URL, with the scheme's default port filled in."""
    u = httpx.URL(str(url))
    port = u.port or {"https": 443, "http": 80}.get(u.scheme, 0)
    return f"{u.scheme}://{u.host}:{port}"


def trusted_origins(api_url: str, toolbox_hosts) -> frozenset[str]:
    """The API's own origin and every allowlisted toolbox host. An entry is an
    origin (`https://proxy.example:8443`) or a host name with an optional port,
    which then means https."""
    out = {origin(api_url)}
    for entry in toolbox_hosts or ():
        entry = entry.strip().rstrip("/")
        if entry:
            out.add(origin(entry if "://" in entry else f"https://{entry}"))
    return frozenset(out)


def segment(sandbox_id: str) -> str:
    """A sandbox id as one quoted URL path segment. Quoting leaves `.` and `..`
    as they are and URL normalisation then drops them (`/sandbox/..` is `/`,
    whose 404 would read as "destroyed"), so those and "" are refused."""
    if sandbox_id in ("", ".", ".."):
        raise UnsafePath(f"{sandbox_id!r} is not a sandbox id", sandbox_id=sandbox_id)
    return quote(sandbox_id, safe="")


def _resources(data: dict) -> Resources | None:
    values = [data.get(key) for key in ("cpu", "memory", "disk")]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    gpu = data.get("gpu")
    return Resources(
        cpu=int(values[0]),
        memory_gib=int(values[1]),
        disk_gib=int(values[2]),
        gpu=int(gpu) if isinstance(gpu, int | float) and not isinstance(gpu, bool) else 0,
    )


def sandbox_info(data: object) -> SandboxInfo:
    """Read a `Sandbox` or `SandboxListItem` (daytona-api-client models)."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise ProviderProtocolError(f"not a sandbox: {str(data)[:200]}")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict):
        raise ProviderProtocolError(f"sandbox {data['id']} has labels {labels!r}")
    desired = data.get("desiredState")
    desired = desired.strip().lower() if isinstance(desired, str) and desired.strip() else None
    state = SandboxState.parse(data.get("state"))
    if desired == "destroyed" and state != SandboxState.DESTROYED:
        # Soft-deleted (sandbox.service.ts destroy): renamed, on its way out, and
        # never coming back -- whatever state it still shows.
        state = SandboxState.DESTROYING
    return SandboxInfo(
        id=data["id"],
        name=str(data.get("name") or data["id"]),
        state=state,
        labels={str(k): str(v) for k, v in labels.items()},
        toolbox_proxy_url=data.get("toolboxProxyUrl") or None,
        raw=data,
        desired_state=desired,
        resources=_resources(data),
    )


class DaytonaProvider(RetryingProvider):
    name = "daytona"

    def __init__(
        self,
        api_url: str,
        *,
        api_key: Callable[[], str | None] | str | None = None,
        api_key_env: str = "DAYTONA_API_KEY",
        toolbox_hosts: tuple[str, ...] | list[str] = (),
        request_timeout: float = SERVER_START_WAIT_SECONDS + 15,
        connect_timeout: float = 5.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not api_url:
            raise ProviderError("no Daytona API URL configured (set DAYTONA_API_URL)")
        self.api_url = api_url.rstrip("/")
        self.api_key_env = api_key_env
        # The API key goes to the API's origin and to toolbox hosts the
        # environment allowlists, never to wherever a provider answer points.
        self.trusted_origins = trusted_origins(self.api_url, toolbox_hosts)
        # The token is read when needed, never kept: rotation needs no restart.
        if callable(api_key):
            self._api_key = api_key
        elif api_key is not None:
            self._api_key = lambda: api_key
        else:
            self._api_key = lambda: os.environ.get(api_key_env)
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        # Streams release the concurrency slot once headers arrive, so the
        # pool is wider than the cap.
        self._http = httpx.Client(
            limits=httpx.Limits(
                max_connections=self.max_concurrency * 4,
                max_keepalive_connections=self.max_concurrency * 2,
            ),
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            follow_redirects=False,
        )
        self._closed = threading.Event()

    def _sandbox_url(self, sandbox_id: str) -> str:
        """/sandbox/{id or name}, the id quoted as ONE path segment: a name with a
        space, `/`, `?` or `#` must not name another path (or another sandbox)."""
        return f"{self.api_url}/sandbox/{segment(sandbox_id)}"

    def close(self):
        self._closed.set()
        self._http.close()

    def __repr__(self):
        return f"<DaytonaProvider {self.api_url}>"

    # --- one HTTP call ---------------------------------------------------

    def _headers(self, request_id: str) -> dict[str, str]:
        # The skip header goes on EVERY request. Daytona's proxy refreshes a
        # sandbox's last activity -- and so its auto-stop and auto-archive timers --
        # on each toolbox call without it (daytonaio/daytona
        # apps/proxy/pkg/proxy/get_sandbox_target.go); the console only inspects.
        headers = {"X-Request-Id": request_id, "Accept": "application/json", **SKIP_ACTIVITY}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _timeout(self, budget: Budget, operation: str, sandbox_id: str) -> httpx.Timeout:
        remaining = budget.remaining()
        if remaining <= 0.01:
            raise BudgetExhausted(
                f"{self.name} {operation} {sandbox_id}: no time left in a "
                f"{budget.seconds:g}s budget",
                operation=operation,
                sandbox_id=sandbox_id,
            )
        read = min(self.request_timeout, remaining)
        return httpx.Timeout(read, connect=min(self.connect_timeout, read))

    def _check_trusted(self, url: str, operation: str, sandbox_id: str) -> None:
        try:
            where = origin(url)
        except (httpx.InvalidURL, ValueError, TypeError):
            where = repr(str(url)[:200])
        if where not in self.trusted_origins:
            raise UntrustedHost(
                f"refused to send the API key ({self.api_key_env}) to {where}: it is "
                "neither the API host nor one of this environment's toolbox hosts "
                f"({', '.join(sorted(self.trusted_origins))}); add it to the environment's "
                "toolbox hosts (or DAYTONA_TOOLBOX_HOSTS) if it is the provider's toolbox proxy",
                operation=operation,
                sandbox_id=sandbox_id,
            )

    def _send(
        self,
        method: str,
        url: str,
        *,
        operation: str,
        sandbox_id: str,
        request_id: str,
        budget: Budget,
        stream: bool = False,
        params: dict | None = None,
        json_body: object = None,
        files: dict | None = None,
        data: dict | None = None,
        not_found_ok: bool = False,
        extra_timeout: float = 0.0,
    ) -> httpx.Response:
        """One attempt: send, classify the answer, raise a typed error for failures."""
        timeout = self._timeout(budget, operation, sandbox_id)
        if extra_timeout:
            timeout = httpx.Timeout(timeout.read + extra_timeout, connect=timeout.connect)
        self._check_trusted(url, operation, sandbox_id)
        request = self._http.build_request(
            method,
            url,
            params=params,
            json=json_body,
            files=files,
            data=data,
            headers=self._headers(request_id),
            timeout=timeout,
        )
        context = {"operation": operation, "sandbox_id": sandbox_id}
        with self._slots:
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                raise TransientProviderError(
                    f"{method} {request.url.path} timed out: {exc!r}", **context
                ) from exc
            except httpx.TransportError as exc:
                raise TransientProviderError(
                    f"{method} {request.url.path} failed to connect or was cut: {exc!r}",
                    **context,
                ) from exc
        status = response.status_code
        if status < 300 or (status == 404 and not_found_ok):
            return response
        if stream:
            response.read()
            response.close()
        message = f"{method} {request.url.path} answered {status}: {_message(response)}"
        context["status_code"] = status
        if status in (401, 403):
            raise ProviderAuthError(
                f"{message} — the provider refused our credentials; check {self.api_key_env}",
                **context,
            )
        if status == 429:
            raise TransientProviderError(
                message, retry_after=_retry_after(response.headers.get("Retry-After")), **context
            )
        if status == 409 and "already exists" in message.lower():
            raise ProviderError(message, **context)
        if status >= 500 or status == 409:
            raise TransientProviderError(message, **context)
        if status == 400 and _IN_PROGRESS in message.lower():
            raise TransientProviderError(message, **context)
        if status == 404:
            raise SandboxNotFound(message, **context)
        raise ProviderError(message, **context)

    def _json(self, response: httpx.Response, operation: str, sandbox_id: str) -> object:
        try:
            return response.json()
        except ValueError as exc:
            raise ProviderProtocolError(
                f"{operation} answered non-JSON: {response.text[:200]!r}",
                operation=operation,
                sandbox_id=sandbox_id,
                status_code=response.status_code,
            ) from exc

    # --- reads -----------------------------------------------------------

    def _get(self, sandbox_id: str, budget: Budget, request_id: str, operation="get"):
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
                return SandboxInfo(sandbox_id, sandbox_id, SandboxState.DESTROYED, {}, None, {})
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

                def attempt(params=params, budget=budget) -> object:
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
                if isinstance(body, list):
                    items, cursor = body, None
                elif isinstance(body, dict) and isinstance(body.get("items"), list):
                    items, cursor = body["items"], body.get("nextCursor")
                else:
                    raise ProviderProtocolError(
                        f"list answered neither an array nor {{items}}: {str(body)[:200]}",
                        operation="list",
                    )
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

    # --- lifecycle -------------------------------------------------------

    def _post_action(self, action: str, sandbox_id: str, budget: Budget, request_id: str):
        self._send(
            "POST",
            f"{self._sandbox_url(sandbox_id)}/{action}",
            operation=action,
            sandbox_id=sandbox_id,
            request_id=request_id,
            budget=budget,
        )

    def _lifecycle(
        self, action: str, sandbox_id: str, budget: Budget, request_id: str
    ) -> Confirmation:
        """Ask for `action`, then read until the sandbox settles in the target state."""
        last_state: list[str] = []
        try:
            return self._lifecycle_loop(action, sandbox_id, budget, request_id, last_state)
        except BudgetExhausted as exc:
            if last_state and f"still {last_state[-1]}" not in str(exc):
                raise BudgetExhausted(
                    f"{exc} (last seen state: {last_state[-1]})",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=exc.status_code,
                ) from exc
            raise

    def _lifecycle_loop(self, action, sandbox_id, budget, request_id, last_state):
        """POST once, then read until settled. Daytona answers a stop, start or
        archive by moving `desiredState` while the old `state` stays (pending): a
        read showing our desired state is our request under way, so it is waited
        for, never asked again (a second POST would only earn 409s)."""
        targets = _TARGETS[action]
        desired = _DESIRED[action]
        need_post = True
        attempt = 0
        while True:
            if need_post:
                try:
                    self._post_action(action, sandbox_id, budget, request_id)
                    need_post = False
                except SandboxNotFound:
                    raise
                except TransientProviderError as exc:
                    if isinstance(exc, BudgetExhausted):
                        raise
                    attempt += 1
                    delay = exc.retry_after if exc.retry_after is not None else None
                    self._sleep(
                        delay if delay is not None else self._backoff(attempt),
                        budget,
                        why=f"last error: {exc}",
                        operation=action,
                        sandbox_id=sandbox_id,
                    )
                    if exc.status_code == 429:
                        continue
                    # 409 / in progress / a lost answer: read the state before asking again.
                except ProviderAuthError:
                    raise
                except ProviderError as exc:
                    # e.g. "Sandbox is not in a stoppable state" on a stop that
                    # raced: the read below decides whether the target is reached.
                    if exc.status_code not in (400, 422):
                        raise
                    info = self._get(sandbox_id, budget, request_id, operation=action)
                    if info.state in targets and not info.pending:
                        return self._confirmation(info, info.state, request_id, action)
                    self._refuse_failed(action, info, exc)
                    if action == "archive" and info.state in _ARCHIVE_STOPS_FIRST:
                        self._lifecycle("stop", sandbox_id, budget, request_id)
                        continue
                    if not (info.state.is_transitional or info.pending):
                        raise
                    need_post = False  # someone else's change is under way: wait
            info = self._get(sandbox_id, budget, request_id, operation=action)
            last_state.append(_shown(info))
            if info.state in targets and not (info.pending and info.desired_state != desired):
                return self._confirmation(info, info.state, request_id, action)
            if info.state == SandboxState.DESTROYED or info.desired_state == "destroyed":
                raise SandboxNotFound(
                    f"cannot {action} {sandbox_id}: the sandbox is gone or being deleted",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=404,
                )
            self._refuse_failed(action, info)
            if info.desired_state == desired and info.pending:
                need_post = False  # ours, pending: wait for it
            elif not info.state.is_transitional and not info.pending:
                # Settled somewhere else (someone started it again): ask again.
                need_post = True
            self._sleep(
                self.poll_interval,
                budget,
                why=f"still {_shown(info)} waiting for {'/'.join(sorted(targets))}",
                operation=action,
                sandbox_id=sandbox_id,
            )

    def _refuse_failed(self, action: str, info: SandboxInfo, cause: Exception | None = None):
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

    def _action(self, action: str, sandbox_id: str, budget_seconds: float | None):
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
            target = {"id": sandbox_id}

            def delete():
                response = self._send(
                    "DELETE",
                    self._sandbox_url(target["id"]),
                    operation="destroy",
                    sandbox_id=target["id"],
                    request_id=request_id,
                    budget=budget,
                    not_found_ok=True,
                )
                if response.status_code != 404:
                    try:
                        body = response.json()
                    except ValueError:
                        body = None
                    if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"]:
                        target["id"] = body["id"]
                return response

            def ask():
                attempt = 0
                while True:
                    try:
                        return delete()
                    except BudgetExhausted:
                        raise
                    except TransientProviderError as exc:
                        attempt += 1
                        if exc.status_code in (400, 409):
                            info = self._get(target["id"], budget, request_id, operation="destroy")
                            if info.state in (SandboxState.DESTROYED, SandboxState.DESTROYING):
                                if info.id:
                                    target["id"] = info.id
                                return None  # already being deleted: wait for it
                        delay = exc.retry_after if exc.retry_after is not None else None
                        self._sleep(
                            delay if delay is not None else self._backoff(attempt),
                            budget,
                            why=f"last error: {exc}",
                            operation="destroy",
                            sandbox_id=target["id"],
                        )

            ask()
            while True:
                info = self._get(target["id"], budget, request_id, operation="destroy")
                if info.state == SandboxState.DESTROYED:
                    return self._confirmation(
                        target["id"], SandboxState.DESTROYED, request_id, "destroy"
                    )
                if info.state != SandboxState.DESTROYING:
                    # Not deleted after all (a DELETE whose answer was lost before
                    # it was received): ask again.
                    ask()
                self._sleep(
                    self.poll_interval,
                    budget,
                    why=f"still {_shown(info)} after DELETE",
                    operation="destroy",
                    sandbox_id=target["id"],
                )

    def create(
        self,
        name: str,
        labels: dict,
        files: dict[str, bytes] | None = None,
        root: str = "workspace",
        *,
        budget_seconds: float | None = None,
    ) -> SandboxInfo:
        """Seed a sandbox (demos, tests): POST /sandbox, then toolbox uploads."""
        with observed(self.name, "create"):
            budget = self.budget(budget_seconds)
            request_id = new_request_id()

            def post():
                response = self._send(
                    "POST",
                    f"{self.api_url}/sandbox",
                    operation="create",
                    sandbox_id=name,
                    request_id=request_id,
                    budget=budget,
                    json_body={"name": name, "labels": dict(labels or {})},
                )
                return sandbox_info(self._json(response, "create", name))

            def post_once():
                try:
                    return post()
                except ProviderError as exc:
                    # A retried POST whose first answer was lost: the name is taken
                    # by the sandbox we asked for. Anything else is a real clash.
                    if exc.status_code != 409 or exc.transient:
                        raise
                    found = self._get(name, budget, request_id, operation="create")
                    if found.state != SandboxState.DESTROYED and found.labels == {
                        str(k): str(v) for k, v in (labels or {}).items()
                    }:
                        return found
                    raise

            info = self.retrying("create", name, budget, post_once)
            info, toolbox = self._started(info.id, budget, request_id, "create")
            uploads = [
                (posixpath.join(root, check_relative_path(rel, operation="create")), data)
                for rel, data in (files or {}).items()
            ]
            self._upload(info.id, toolbox, uploads, budget, request_id)
            return self._get(info.id, budget, request_id, operation="create")

    def _upload(self, sandbox_id, toolbox, uploads, budget, request_id) -> None:
        """Write files through the current toolbox routes: `/files/bulk-upload`
        (fields `files[i].path` then `files[i].file`, apps/daemon/pkg/toolbox/fs/
        upload_files.go), else `/files/upload-v2` one by one (upload_file.go), else
        the legacy `/files/upload` of old toolboxes."""
        routes = ["bulk-upload", "upload-v2", "upload"]
        pending = list(uploads)
        while pending:
            route = routes[0]
            batch = pending[:BULK_BATCH] if route == "bulk-upload" else pending[:1]

            def attempt(route=route, batch=batch):
                if route == "bulk-upload":
                    fields = {f"files[{i}].path": path for i, (path, _) in enumerate(batch)}
                    parts = {
                        f"files[{i}].file": (posixpath.basename(path), data)
                        for i, (path, data) in enumerate(batch)
                    }
                    params = None
                else:
                    path, data = batch[0]
                    fields, parts, params = (
                        None,
                        {"file": (posixpath.basename(path), data)},
                        {"path": path},
                    )
                self._send(
                    "POST",
                    f"{toolbox}/files/{route}",
                    operation="upload",
                    sandbox_id=sandbox_id,
                    request_id=request_id,
                    budget=budget,
                    params=params,
                    data=fields,
                    files=parts,
                )

            try:
                self.retrying("create", sandbox_id, budget, attempt)
            except ProviderError as exc:
                if exc.status_code in (404, 405, 501) and not exc.transient and len(routes) > 1:
                    routes.pop(0)  # an older toolbox: try the route before it
                    continue
                raise
            del pending[: len(batch)]

    # --- files -----------------------------------------------------------

    def _started(self, sandbox_id: str, budget: Budget, request_id: str, operation: str):
        """File access needs a started sandbox: start it first when it is not."""
        info = self._get(sandbox_id, budget, request_id, operation=operation)
        if info.state == SandboxState.DESTROYED:
            raise SandboxNotFound(
                f"cannot {operation} {sandbox_id}: the sandbox is gone",
                operation=operation,
                sandbox_id=sandbox_id,
                status_code=404,
            )
        if info.state != SandboxState.STARTED or (info.pending and info.desired_state != "started"):
            # Not running, or running with a stop under way (desiredState
            # `stopped`): the toolbox would refuse mid-way. Start waits it out.
            self._lifecycle("start", info.id, budget, request_id)
            info = self._get(info.id, budget, request_id, operation=operation)
        if not info.toolbox_proxy_url:
            raise ProviderProtocolError(
                f"sandbox {info.id} has no toolboxProxyUrl",
                operation=operation,
                sandbox_id=info.id,
            )
        return info, f"{info.toolbox_proxy_url.rstrip('/')}/{segment(info.id)}"

    def _execute(
        self, toolbox: str, command: str, info: SandboxInfo, budget: Budget, request_id: str
    ) -> tuple[int, str]:
        timeout = max(1, int(budget.remaining()))

        def attempt():
            response = self._send(
                "POST",
                f"{toolbox}/process/execute",
                operation="execute",
                sandbox_id=info.id,
                request_id=request_id,
                budget=budget,
                json_body={"command": command, "timeout": timeout},
            )
            return self._json(response, "execute", info.id)

        body = self.retrying("hash_files", info.id, budget, attempt)
        if not isinstance(body, dict) or not isinstance(body.get("exitCode"), int):
            raise ProviderProtocolError(
                f"process/execute answered {str(body)[:200]}",
                operation="hash_files",
                sandbox_id=info.id,
            )
        return body["exitCode"], str(body.get("result") or "")

    def hash_files(
        self, sandbox_id: str, root: str, *, budget_seconds: float | None = None
    ) -> dict[str, FileDigest]:
        with observed(self.name, "hash_files"):
            budget = self.budget(budget_seconds)
            request_id = new_request_id()
            info, toolbox = self._started(sandbox_id, budget, request_id, "hash_files")
            code, output = self._execute(toolbox, wire.hash_command(root), info, budget, request_id)
            if code == 0:
                return wire.parse_hash_output(output)
            self._raise_for_exit(code, output, info.id, root)
            # No sha256sum in the sandbox: list remotely, hash here while streaming.
            code, output = self._execute(toolbox, wire.list_command(root), info, budget, request_id)
            if code != 0:
                self._raise_for_exit(code, output, info.id, root, fallback=False)
            digests = {}
            paths = wire.parse_list_output(output)
            for path, chunks in self._stream_files(info, toolbox, root, paths, budget, request_id):
                sha, size = hashlib.sha256(), 0
                for chunk in chunks:
                    sha.update(chunk)
                    size += len(chunk)
                digests[path] = FileDigest(path=path, sha256=sha.hexdigest(), size=size)
            return digests

    def _raise_for_exit(self, code, output, sandbox_id, root, *, fallback=True):
        context = {"operation": "hash_files", "sandbox_id": sandbox_id}
        if code == wire.ROOT_MISSING_EXIT:
            raise RootNotFound(f"workspace root {root!r} not found in {sandbox_id}", **context)
        if fallback and (code == wire.NOT_FOUND_EXIT or "not found" in output.lower()):
            return
        raise ProviderError(
            f"hashing {root!r} in {sandbox_id} exited {code}: {output[-300:]!r}", **context
        )

    def open_files(
        self,
        sandbox_id: str,
        root: str,
        paths: list[str],
        *,
        budget_seconds: float | None = None,
    ) -> Iterator[tuple[str, Iterator[bytes]]]:
        with observed(self.name, "open_files"):
            clean = [
                check_relative_path(p, operation="open_files", sandbox_id=sandbox_id) for p in paths
            ]
            budget = self.budget(budget_seconds)
            request_id = new_request_id()
            info, toolbox = self._started(sandbox_id, budget, request_id, "open_files")
            yield from self._stream_files(info, toolbox, root, clean, budget, request_id)

    def _stream_files(
        self,
        info: SandboxInfo,
        toolbox: str,
        root: str,
        paths: list[str],
        budget: Budget,
        request_id: str,
    ) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Bulk-download in batches, retrying a batch from the first file not yet handed out.

        The budget bounds getting each answer; streaming a body is bounded by the
        read timeout instead, so large workspaces are not cut off mid-file.
        """
        by_remote = {posixpath.join(root, p): p for p in paths}
        pending = list(by_remote)
        bulk_supported = True
        while pending:
            batch = pending[:BULK_BATCH]
            if not bulk_supported:
                remote = batch[0]
                response = self.retrying(
                    "open_files",
                    info.id,
                    budget,
                    lambda remote=remote: self._send(
                        "GET",
                        f"{toolbox}/files/download",
                        operation="download",
                        sandbox_id=info.id,
                        request_id=request_id,
                        budget=budget,
                        stream=True,
                        params={"path": remote},
                        extra_timeout=self.request_timeout,
                    ),
                )
                try:
                    yield by_remote[remote], response.iter_bytes(CHUNK_SIZE)
                finally:
                    response.close()
                pending.pop(0)
                continue
            try:
                response = self.retrying(
                    "open_files",
                    info.id,
                    budget,
                    lambda batch=batch: self._send(
                        "POST",
                        f"{toolbox}/files/bulk-download",
                        operation="bulk_download",
                        sandbox_id=info.id,
                        request_id=request_id,
                        budget=budget,
                        stream=True,
                        json_body={"paths": batch},
                        extra_timeout=self.request_timeout,
                    ),
                )
            except (SandboxNotFound, ProviderError) as exc:
                if exc.status_code in (404, 405, 501) and not exc.transient:
                    bulk_supported = False  # older toolbox: one file per request
                    continue
                raise
            try:
                yield from self._read_bulk(response, info.id, by_remote, batch, pending)
            except TransientProviderError:
                continue  # retry the rest of the batch; handed-out files are done
            finally:
                response.close()

    def _read_bulk(self, response, sandbox_id, by_remote, batch, pending):
        boundary = wire.boundary_from(response.headers.get("content-type", ""))
        stream = wire.MultipartStream(response.iter_bytes(CHUNK_SIZE), boundary)
        context = {"operation": "open_files", "sandbox_id": sandbox_id}
        expected = set(batch)
        parts = stream.parts()
        while True:
            try:
                headers, body = next(parts)
            except StopIteration:
                break
            except httpx.TransportError as exc:
                raise TransientProviderError(f"bulk download cut: {exc!r}", **context) from exc
            params = wire.disposition_params(headers.get("content-disposition", ""))
            try:
                remote = wire.part_filename(params)
            except ProviderProtocolError as exc:
                raise ProviderProtocolError(str(exc), **context) from None
            if params.get("name") == "error":
                detail = b"".join(body).decode("utf-8", "replace")
                raise ProviderError(
                    f"cannot read {remote!r} in {sandbox_id}: {_part_error(detail)}",
                    status_code=_part_status(detail),
                    **context,
                )
            if remote not in expected:
                raise ProviderProtocolError(f"bulk download sent unasked {remote!r}", **context)
            expected.discard(remote)
            try:
                yield by_remote[remote], _guard(body, context)
            finally:
                pending.remove(remote)
        if expected:
            raise ProviderProtocolError(f"bulk download left out {sorted(expected)[:5]}", **context)


def _part_error(detail: str) -> str:
    """An error part's message: Daytona sends its ErrorResponse as JSON
    ({statusCode, message, code, path, ...}); older toolboxes sent text."""
    try:
        body = json.loads(detail)
    except ValueError:
        return detail[:300]
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or detail
        code = body.get("code")
        return f"{message} ({code})"[:300] if code else str(message)[:300]
    return detail[:300]


def _part_status(detail: str) -> int | None:
    try:
        body = json.loads(detail)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("statusCode"), int):
        return body["statusCode"]
    return 404 if "not found" in detail.lower() else None


def _guard(chunks: Iterator[bytes], context: dict) -> Iterator[bytes]:
    """A body cut mid-file cannot be retried transparently: the caller saw part of it."""
    try:
        yield from chunks
    except httpx.TransportError as exc:
        raise TransientProviderError(f"download cut mid-file: {exc!r}", **context) from exc
