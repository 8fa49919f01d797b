"""Paperclip's attachment API, as its server answers it (paperclipai/paperclip
server/src/routes/issues.ts @ 42467257fb96; the auth in
server/src/middleware/auth.ts @ 027bd8cc9602 and server/src/routes/authz.ts
@ 09cec30c4792):

    POST /api/companies/:companyId/issues/:issueId/attachments   multipart field `file`
        201 the attachment row (`id`, `byteSize`, `sha256`, ...) and `contentPath`
        401 no key it knows; 403 no access to the company; 404 no such issue;
        422 the issue is another company's, the type is not allowed, the file is
        empty or over PAPERCLIP_ATTACHMENT_MAX_BYTES; 400 a bad multipart body
    GET /api/attachments/:attachmentId/content                   the stored bytes

A board API key or an agent key goes as `Authorization: Bearer`. The key is read
from PAPERCLIP_API_KEY when a request is sent and goes only to the configured
URL's origin; redirects are not followed (as the Daytona transport keeps its
key to the hosts it trusts, sandboxes/providers/daytona/transport.py)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from sandboxes.providers.daytona.transport import origin

KEY_ENV = "PAPERCLIP_API_KEY"
ZIP = "application/zip"


class PaperclipError(Exception):
    """An attempt that did not attach: the words say why, for the record."""

    def __init__(self, words: str, *, status: int | None = None):
        super().__init__(words)
        self.status = status


class UntrustedHost(PaperclipError):
    """A URL off the configured origin: refused before the key is sent."""


def _said(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip()
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"][:200]
    return str(body)[:200]


# What each of the route's refusals means to an operator (issues.ts, authz.ts).
WHY = {
    400: "Paperclip refused the upload as malformed",
    401: f"Paperclip did not accept the key: check {KEY_ENV}",
    403: "Paperclip refused the key access to the task's company",
    404: "Paperclip does not know the task (or the attachment)",
    413: "the part is larger than Paperclip (or a proxy before it) accepts: "
    "lower PAPERCLIP_ATTACHMENT_MAX_BYTES",
    422: "Paperclip refused the part (its type, its size, or the task's company)",
}


def refused(response: httpx.Response, doing: str) -> PaperclipError:
    status = response.status_code
    if 300 <= status < 400:
        where = response.headers.get("location", "")
        why = (
            f"Paperclip answered with a redirect to {where!r}, not followed "
            "(the key stays with PAPERCLIP_API_URL)"
        )
    elif status >= 500:
        why = "Paperclip failed on its side"
    else:
        why = WHY.get(status, "Paperclip refused")
    said = _said(response)
    return PaperclipError(
        f"{doing}: HTTP {status}, {why}" + (f" ({said})" if said else ""), status=status
    )


@dataclass(frozen=True)
class Attached:
    id: str
    content_path: str
    byte_size: int | None
    sha256: str | None


class PaperclipClient:
    def __init__(
        self,
        api_url: str,
        *,
        api_key: Callable[[], str | None] | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.api_url = api_url.rstrip("/")
        self.origin = origin(self.api_url)
        self._api_key = api_key or (lambda: os.environ.get(KEY_ENV))
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PaperclipClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _unreachable(self, doing: str, exc: Exception) -> PaperclipError:
        return PaperclipError(
            f"{doing}: Paperclip at {self.origin} could not be reached "
            f"({type(exc).__name__}: {exc})"
        )

    def _send(self, method: str, url: str, doing: str, **kwargs) -> httpx.Response:
        if origin(url) != self.origin:
            raise UntrustedHost(
                f"{doing}: {url} is not on {self.origin}; the key is not sent there"
            )
        key = self._api_key()
        if not key:
            raise PaperclipError(f"{doing}: {KEY_ENV} is not set in the console's environment")
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        try:
            response = self._http.request(method, url, headers=headers, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(doing, exc) from exc
        if not 200 <= response.status_code < 300:
            raise refused(response, doing)
        return response

    def attach(self, company_id: str, issue_id: str, filename: str, data: bytes) -> Attached:
        """One file on the task; Paperclip's 201 answer, read."""
        url = (
            f"{self.api_url}/api/companies/{quote(company_id, safe='')}"
            f"/issues/{quote(issue_id, safe='')}/attachments"
        )
        doing = f"attaching {filename}"
        response = self._send("POST", url, doing, files={"file": (filename, data, ZIP)})
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 201 or not isinstance(body, dict) or not body.get("id"):
            raise PaperclipError(
                f"{doing}: Paperclip answered HTTP {response.status_code} without an attachment id",
                status=response.status_code,
            )
        aid = str(body["id"])
        size = body.get("byteSize")
        return Attached(
            id=aid,
            content_path=str(body.get("contentPath") or f"/api/attachments/{aid}/content"),
            byte_size=size if isinstance(size, int) else None,
            sha256=body.get("sha256") if isinstance(body.get("sha256"), str) else None,
        )

    def read_back(self, attachment_id: str, limit: int) -> tuple[str, int]:
        """(sha256, size) of what Paperclip serves for the attachment, read whole
        (up to `limit` + 1 bytes: more is already wrong). The URL is built on the
        configured origin, never taken from an answer."""
        url = f"{self.api_url}/api/attachments/{quote(attachment_id, safe='')}/content"
        doing = f"reading back attachment {attachment_id}"
        if origin(url) != self.origin:  # pragma: no cover - built on api_url
            raise UntrustedHost(doing)
        key = self._api_key()
        if not key:
            raise PaperclipError(f"{doing}: {KEY_ENV} is not set in the console's environment")
        sha, size = hashlib.sha256(), 0
        try:
            with self._http.stream(
                "GET", url, headers={"Authorization": f"Bearer {key}"}
            ) as response:
                if not 200 <= response.status_code < 300:
                    response.read()
                    raise refused(response, doing)
                for chunk in response.iter_bytes():
                    sha.update(chunk)
                    size += len(chunk)
                    if size > limit:
                        break
        except httpx.TransportError as exc:
            raise self._unreachable(doing, exc) from exc
        return sha.hexdigest(), size
