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
        for key in ("message", "error", "detail"):
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


def sandbox_info(data: object) -> SandboxInfo:
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise ProviderProtocolError(f"not a sandbox: {str(data)[:200]}")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict):
        raise ProviderProtocolError(f"sandbox {data['id']} has labels {labels!r}")
    return SandboxInfo(
        id=data["id"],
        name=str(data.get("name") or data["id"]),
        state=SandboxState.parse(data.get("state")),
        labels={str(k): str(v) for k, v in labels.items()},
        toolbox_proxy_url=data.get("toolboxProxyUrl") or None,
        raw=data,
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
        request_timeout: float = 30.0,
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

    def _headers(self, request_id: str, read: bool) -> dict[str, str]:
        headers = {"X-Request-Id": request_id, "Accept": "application/json"}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if read:
            headers.update(SKIP_ACTIVITY)
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
        read: bool = False,
        stream: bool = False,
        params: dict | None = None,
        json_body: object = None,
        files: dict | None = None,
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
            headers=self._headers(request_id, read),
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
                read=True,
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
                        read=True,
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
        targets = _TARGETS[action]
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
                    # 409 / in progress: read the state before asking again.
                except ProviderAuthError:
                    raise
                except ProviderError as exc:
                    # e.g. "sandbox is not started" on a stop that raced: the
                    # read below decides whether the target is already reached.
                    if exc.status_code != 400:
                        raise
                    info = self._get(sandbox_id, budget, request_id, operation=action)
                    if info.state in targets:
                        return self._confirmation(info, info.state, request_id, action)
                    if action == "archive" and info.state == SandboxState.STARTED:
                        self._lifecycle("stop", sandbox_id, budget, request_id)
                        continue
                    raise
            info = self._get(sandbox_id, budget, request_id, operation=action)
            last_state.append(str(info.raw.get("state") or info.state))
            if info.state in targets:
                return self._confirmation(info, info.state, request_id, action)
            if info.state == SandboxState.DESTROYED:
                raise SandboxNotFound(
                    f"cannot {action} {sandbox_id}: the sandbox is gone",
                    operation=action,
                    sandbox_id=sandbox_id,
                    status_code=404,
                )
            if info.state in FAILED_STATES and action == "start":
                raise ProviderError(
                    f"cannot start {sandbox_id}: provider reports state {info.raw.get('state')!r}",
                    operation=action,
                    sandbox_id=sandbox_id,
                )
            if not info.state.is_transitional:
                # Settled somewhere else (someone started it again, or it
                # failed): ask again, after a pause.
                need_post = True
            self._sleep(
                self.poll_interval,
                budget,
                why=f"still {info.raw.get('state') or info.state} waiting for "
                f"{'/'.join(sorted(targets))}",
                operation=action,
                sandbox_id=sandbox_id,
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
        """Idempotent: a sandbox already gone is destroyed; confirmed by a read (404)."""
        with observed(self.name, "destroy"):
            budget = self.budget(budget_seconds)
            request_id = new_request_id()

            def delete():
                return self._send(
                    "DELETE",
                    self._sandbox_url(sandbox_id),
                    operation="destroy",
                    sandbox_id=sandbox_id,
                    request_id=request_id,
                    budget=budget,
                    not_found_ok=True,
                )

            self.retrying("destroy", sandbox_id, budget, delete)
            while True:
                info = self._get(sandbox_id, budget, request_id, operation="destroy")
                if info.state == SandboxState.DESTROYED:
                    return self._confirmation(
                        sandbox_id, SandboxState.DESTROYED, request_id, "destroy"
                    )
                if info.state != SandboxState.DESTROYING:
                    # It came back (or DELETE was lost): ask again.
                    self.retrying("destroy", sandbox_id, budget, delete)
                self._sleep(
                    self.poll_interval,
                    budget,
                    why=f"still {info.raw.get('state') or info.state} after DELETE",
                    operation="destroy",
                    sandbox_id=sandbox_id,
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

            info = self.retrying("create", name, budget, post)
            info, toolbox = self._started(info.id, budget, request_id, "create")
            for rel, data in (files or {}).items():
                path = posixpath.join(root, check_relative_path(rel, operation="create"))

                def upload(path=path, data=data):
                    self._send(
                        "POST",
                        f"{toolbox}/files/upload",
                        operation="upload",
                        sandbox_id=info.id,
                        request_id=request_id,
                        budget=budget,
                        params={"path": path},
                        files={"file": (posixpath.basename(path), data)},
                    )

                self.retrying("create", info.id, budget, upload)
            return self._get(info.id, budget, request_id, operation="create")

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
        if info.state != SandboxState.STARTED:
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
                        read=True,
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
            remote = params.get("filename", "")
            if params.get("name") == "error":
                detail = b"".join(body).decode("utf-8", "replace")
                raise ProviderError(
                    f"cannot read {remote!r} in {sandbox_id}: {detail[:300]}",
                    status_code=404 if "not found" in detail.lower() else None,
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


def _guard(chunks: Iterator[bytes], context: dict) -> Iterator[bytes]:
    """A body cut mid-file cannot be retried transparently: the caller saw part of it."""
    try:
        yield from chunks
    except httpx.TransportError as exc:
        raise TransientProviderError(f"download cut mid-file: {exc!r}", **context) from exc
