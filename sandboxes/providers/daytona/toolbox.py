"""Daytona's toolbox: hashing a workspace for the salvage compare, streaming
files out (bulk-download, whose parts name files by `filename*`), and seeding a
sandbox through the upload routes (docs/architecture.md, Providers)."""

from __future__ import annotations

import builtins
import hashlib
import json
import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from sandboxes.providers import wire
from sandboxes.providers.base import (
    Budget,
    FileDigest,
    ProviderError,
    ProviderProtocolError,
    RootNotFound,
    SandboxInfo,
    SandboxNotFound,
    SandboxState,
    TransientProviderError,
    check_relative_path,
    new_request_id,
    observed,
)
from sandboxes.providers.daytona.lifecycle import DaytonaLifecycle
from sandboxes.providers.daytona.sandbox import sandbox_info
from sandboxes.providers.daytona.transport import segment

CHUNK_SIZE = 64 * 1024
BULK_BATCH = 64
# What an older toolbox answers for a route it does not have.
_NO_ROUTE = (404, 405, 501)


class DaytonaToolbox(DaytonaLifecycle):
    """File access through a started sandbox's toolbox proxy."""

    def _started(
        self, sandbox_id: str, budget: Budget, request_id: str, operation: str
    ) -> tuple[SandboxInfo, str]:
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

    # --- hashing (the salvage compare) -----------------------------------

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

    def _execute(
        self, toolbox: str, command: str, info: SandboxInfo, budget: Budget, request_id: str
    ) -> tuple[int, str]:
        timeout = max(1, int(budget.remaining()))

        def attempt() -> object:
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

    def _raise_for_exit(
        self, code: int, output: str, sandbox_id: str, root: str, *, fallback: bool = True
    ) -> None:
        if code == wire.ROOT_MISSING_EXIT:
            raise RootNotFound(
                f"workspace root {root!r} not found in {sandbox_id}",
                operation="hash_files",
                sandbox_id=sandbox_id,
            )
        if fallback and (code == wire.NOT_FOUND_EXIT or "not found" in output.lower()):
            return
        raise ProviderError(
            f"hashing {root!r} in {sandbox_id} exited {code}: {output[-300:]!r}",
            operation="hash_files",
            sandbox_id=sandbox_id,
        )

    # --- reading files out -----------------------------------------------

    def open_files(
        self,
        sandbox_id: str,
        root: str,
        paths: builtins.list[str],
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
        paths: builtins.list[str],
        budget: Budget,
        request_id: str,
    ) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Bulk-download in batches, retrying a batch from the first file not yet handed out.

        The budget bounds getting each answer; streaming a body is bounded by the
        read timeout instead, so large workspaces are not cut off mid-file.
        """
        by_remote = {posixpath.join(root, p): p for p in paths}
        pending = builtins.list(by_remote)
        bulk_supported = True
        while pending:
            if not bulk_supported:
                remote = pending[0]
                response = self._download(info.id, toolbox, remote, budget, request_id)
                try:
                    yield by_remote[remote], response.iter_bytes(CHUNK_SIZE)
                finally:
                    response.close()
                pending.pop(0)
                continue
            batch = pending[:BULK_BATCH]
            try:
                response = self._bulk_download(info.id, toolbox, batch, budget, request_id)
            except ProviderError as exc:
                if exc.status_code in _NO_ROUTE and not exc.transient:
                    bulk_supported = False  # older toolbox: one file per request
                    continue
                raise
            try:
                yield from self._read_bulk(response, info.id, by_remote, batch, pending)
            except TransientProviderError:
                continue  # retry the rest of the batch; handed-out files are done
            finally:
                response.close()

    def _download(
        self, sandbox_id: str, toolbox: str, remote: str, budget: Budget, request_id: str
    ) -> httpx.Response:
        """GET /files/download of one file, streamed (toolboxes without bulk-download)."""
        return self.retrying(
            "open_files",
            sandbox_id,
            budget,
            lambda: self._send(
                "GET",
                f"{toolbox}/files/download",
                operation="download",
                sandbox_id=sandbox_id,
                request_id=request_id,
                budget=budget,
                stream=True,
                params={"path": remote},
                extra_timeout=self.request_timeout,
            ),
        )

    def _bulk_download(
        self,
        sandbox_id: str,
        toolbox: str,
        batch: builtins.list[str],
        budget: Budget,
        request_id: str,
    ) -> httpx.Response:
        """POST /files/bulk-download of a batch: a multipart answer, streamed."""
        return self.retrying(
            "open_files",
            sandbox_id,
            budget,
            lambda: self._send(
                "POST",
                f"{toolbox}/files/bulk-download",
                operation="bulk_download",
                sandbox_id=sandbox_id,
                request_id=request_id,
                budget=budget,
                stream=True,
                json_body={"paths": batch},
                extra_timeout=self.request_timeout,
            ),
        )

    def _read_bulk(
        self,
        response: httpx.Response,
        sandbox_id: str,
        by_remote: Mapping[str, str],
        batch: builtins.list[str],
        pending: builtins.list[str],
    ) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Hand out each part of a bulk download as it arrives, crossing it off
        `pending`; an error part, an unasked file or a missing one is refused."""
        boundary = wire.boundary_from(response.headers.get("content-type", ""))
        stream = wire.MultipartStream(response.iter_bytes(CHUNK_SIZE), boundary)
        context: dict[str, Any] = {"operation": "open_files", "sandbox_id": sandbox_id}
        expected = set(batch)
        parts = stream.parts()
        while True:
            try:
                headers, body = next(parts)
            except StopIteration:
                break
            except httpx.TransportError as exc:
                raise TransientProviderError(f"bulk download cut: {exc!r}", **context) from exc
            remote = _part_name(headers, body, sandbox_id, context)
            if remote not in expected:
                raise ProviderProtocolError(f"bulk download sent unasked {remote!r}", **context)
            expected.discard(remote)
            try:
                yield by_remote[remote], _guard(body, context)
            finally:
                pending.remove(remote)
        if expected:
            raise ProviderProtocolError(f"bulk download left out {sorted(expected)[:5]}", **context)

    # --- seeding (demos, tests) ------------------------------------------

    def create(
        self,
        name: str,
        labels: dict[str, Any],
        files: dict[str, bytes] | None = None,
        root: str = "workspace",
        *,
        budget_seconds: float | None = None,
    ) -> SandboxInfo:
        """Seed a sandbox (demos, tests): POST /sandbox, then toolbox uploads."""
        with observed(self.name, "create"):
            budget = self.budget(budget_seconds)
            request_id = new_request_id()
            info = self.retrying(
                "create", name, budget, lambda: self._post_sandbox(name, labels, budget, request_id)
            )
            info, toolbox = self._started(info.id, budget, request_id, "create")
            uploads = [
                (posixpath.join(root, check_relative_path(rel, operation="create")), data)
                for rel, data in (files or {}).items()
            ]
            self._upload(info.id, toolbox, uploads, budget, request_id)
            return self._get(info.id, budget, request_id, operation="create")

    def _post_sandbox(
        self, name: str, labels: dict[str, Any], budget: Budget, request_id: str
    ) -> SandboxInfo:
        """POST /sandbox once. A retried POST whose first answer was lost finds
        the name taken by the sandbox we asked for: that one is ours. Any other
        holder of the name is a real clash."""
        try:
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
        except ProviderError as exc:
            if exc.status_code != 409 or exc.transient:
                raise
            found = self._get(name, budget, request_id, operation="create")
            if found.state != SandboxState.DESTROYED and found.labels == {
                str(k): str(v) for k, v in (labels or {}).items()
            }:
                return found
            raise

    def _upload(
        self,
        sandbox_id: str,
        toolbox: str,
        uploads: builtins.list[tuple[str, bytes]],
        budget: Budget,
        request_id: str,
    ) -> None:
        """Write files through the current toolbox routes: `/files/bulk-upload`
        (fields `files[i].path` then `files[i].file`, apps/daemon/pkg/toolbox/fs/
        upload_files.go), else `/files/upload-v2` one by one (upload_file.go), else
        the legacy `/files/upload` of old toolboxes."""
        routes = ["bulk-upload", "upload-v2", "upload"]
        pending = builtins.list(uploads)
        while pending:
            route = routes[0]
            batch = pending[:BULK_BATCH] if route == "bulk-upload" else pending[:1]
            params, fields, parts = _upload_form(route, batch)

            def attempt(route: str = route, params=params, fields=fields, parts=parts) -> None:
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
                if exc.status_code in _NO_ROUTE and not exc.transient and len(routes) > 1:
                    routes.pop(0)  # an older toolbox: try the route before it
                    continue
                raise
            del pending[: len(batch)]


def _upload_form(
    route: str, batch: builtins.list[tuple[str, bytes]]
) -> tuple[dict[str, str] | None, dict[str, str] | None, dict[str, tuple[str, bytes]]]:
    """(query, form fields, file parts) of one upload: bulk-upload pairs
    `files[i].path` with `files[i].file`; upload-v2 and upload take `?path=`."""
    if route == "bulk-upload":
        fields = {f"files[{i}].path": path for i, (path, _) in enumerate(batch)}
        parts = {
            f"files[{i}].file": (posixpath.basename(path), data)
            for i, (path, data) in enumerate(batch)
        }
        return None, fields, parts
    path, data = batch[0]
    return {"path": path}, None, {"file": (posixpath.basename(path), data)}


def _part_name(
    headers: Mapping[str, str], body: Iterator[bytes], sandbox_id: str, context: dict[str, Any]
) -> str:
    """The remote path a bulk-download part carries (`filename*` or `filename`);
    an error part (form name `error`) is raised as the provider's error."""
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
    return remote


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


def _guard(chunks: Iterator[bytes], context: dict[str, Any]) -> Iterator[bytes]:
    """A body cut mid-file cannot be retried transparently: the caller saw part of it."""
    try:
        yield from chunks
    except httpx.TransportError as exc:
        raise TransientProviderError(f"download cut mid-file: {exc!r}", **context) from exc
