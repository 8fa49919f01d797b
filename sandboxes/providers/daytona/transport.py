"""One HTTP call to Daytona: headers, time budget, the credential host
allowlist, and what each answer means (docs/architecture.md, Providers)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from sandboxes.providers.base import (
    Budget,
    BudgetExhausted,
    ProviderAuthError,
    ProviderError,
    ProviderProtocolError,
    RetryingProvider,
    SandboxNotFound,
    TransientProviderError,
    UnsafePath,
    utcnow,
)

# daytonaio/daytona apps/proxy/pkg/proxy/proxy.go SKIP_LAST_ACTIVITY_UPDATE_HEADER;
# the proxy skips the update only when the value is exactly "true".
SKIP_ACTIVITY = {"X-Daytona-Skip-Last-Activity-Update": "true"}
_IN_PROGRESS = "state change in progress"
# Daytona's start holds its answer up to 30 s waiting for `started`
# (sandbox.controller.ts waitForSandboxStarted); a shorter read timeout would cut
# a start that is going well and retry it into 409s.
SERVER_START_WAIT_SECONDS = 30.0


class UntrustedHost(ProviderError):
    """A URL the provider handed us (a toolboxProxyUrl) names a host that is not
    trusted with the API key: the request is refused, not sent without it."""


def origin(url: str | httpx.URL) -> str:
    """scheme://host:port of a URL, with the scheme's default port filled in."""
    u = httpx.URL(str(url))
    port = u.port or {"https": 443, "http": 80}.get(u.scheme, 0)
    return f"{u.scheme}://{u.host}:{port}"


def trusted_origins(api_url: str, toolbox_hosts: Iterable[str] | None) -> frozenset[str]:
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


def error_for(
    response: httpx.Response, message: str, *, operation: str, sandbox_id: str, api_key_env: str
) -> ProviderError:
    """The typed error a failed answer means: what may be retried, what is an
    auth problem, what says the sandbox is gone."""
    status = response.status_code
    where: dict[str, Any] = {
        "operation": operation,
        "sandbox_id": sandbox_id,
        "status_code": status,
    }
    if status in (401, 403):
        return ProviderAuthError(
            f"{message} — the provider refused our credentials; check {api_key_env}", **where
        )
    if status == 429:
        return TransientProviderError(
            message, retry_after=_retry_after(response.headers.get("Retry-After")), **where
        )
    if status == 409 and "already exists" in message.lower():
        return ProviderError(message, **where)
    if status >= 500 or status == 409:
        return TransientProviderError(message, **where)
    if status == 400 and _IN_PROGRESS in message.lower():
        return TransientProviderError(message, **where)
    if status == 404:
        return SandboxNotFound(message, **where)
    return ProviderError(message, **where)


class DaytonaTransport(RetryingProvider):
    """The client's configuration and its one way to send a request."""

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
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not api_url:
            raise ProviderError("no Daytona API URL configured (set DAYTONA_API_URL)")
        self.api_url = api_url.rstrip("/")
        self.api_key_env = api_key_env
        # The API key goes to the API's origin and to toolbox hosts the
        # environment allowlists, never to wherever a provider answer points.
        self.trusted_origins = trusted_origins(self.api_url, toolbox_hosts)
        self._api_key = _key_reader(api_key, api_key_env)
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

    def close(self) -> None:
        self._closed.set()
        self._http.close()

    def __repr__(self) -> str:
        return f"<DaytonaProvider {self.api_url}>"

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

    def _timeout(
        self, budget: Budget, operation: str, sandbox_id: str, extra: float = 0.0
    ) -> httpx.Timeout:
        remaining = budget.remaining()
        if remaining <= 0.01:
            raise BudgetExhausted(
                f"{self.name} {operation} {sandbox_id}: no time left in a "
                f"{budget.seconds:g}s budget",
                operation=operation,
                sandbox_id=sandbox_id,
            )
        read = min(self.request_timeout, remaining)
        return httpx.Timeout(read + extra, connect=min(self.connect_timeout, read))

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
        params: dict[str, str] | None = None,
        json_body: object = None,
        files: dict[str, tuple[str, bytes]] | None = None,
        data: dict[str, str] | None = None,
        not_found_ok: bool = False,
        extra_timeout: float = 0.0,
    ) -> httpx.Response:
        """One attempt: send, classify the answer, raise a typed error for failures."""
        timeout = self._timeout(budget, operation, sandbox_id, extra_timeout)
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
        response = self._transmit(request, stream, operation, sandbox_id)
        status = response.status_code
        if status < 300 or (status == 404 and not_found_ok):
            return response
        if stream:
            response.read()
            response.close()
        message = f"{method} {request.url.path} answered {status}: {_message(response)}"
        raise error_for(
            response,
            message,
            operation=operation,
            sandbox_id=sandbox_id,
            api_key_env=self.api_key_env,
        )

    def _transmit(
        self, request: httpx.Request, stream: bool, operation: str, sandbox_id: str
    ) -> httpx.Response:
        """Send within a concurrency slot; a timeout or a cut connection is transient."""
        what = f"{request.method} {request.url.path}"
        with self._slots:
            try:
                return self._http.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                raise TransientProviderError(
                    f"{what} timed out: {exc!r}", operation=operation, sandbox_id=sandbox_id
                ) from exc
            except httpx.TransportError as exc:
                raise TransientProviderError(
                    f"{what} failed to connect or was cut: {exc!r}",
                    operation=operation,
                    sandbox_id=sandbox_id,
                ) from exc

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


def _key_reader(
    api_key: Callable[[], str | None] | str | None, api_key_env: str
) -> Callable[[], str | None]:
    """The token is read when needed, never kept: rotation needs no restart."""
    if callable(api_key):
        return api_key
    if api_key is not None:
        key: str = api_key
        return lambda: key
    return lambda: os.environ.get(api_key_env)
