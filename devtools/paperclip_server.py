"""A small Paperclip-shaped HTTP server on loopback: the two attachment routes
the console calls, answered as Paperclip answers them, with switchable faults
and a request log. Standard library only.

Written from paperclipai/paperclip:
- server/src/routes/issues.ts @ 42467257fb96: `POST
  /api/companies/:companyId/issues/:issueId/attachments` (assertCompanyAccess
  first; 404 "Issue not found"; 422 "Issue does not belong to company"; multer's
  single field `file` with `limits.fileSize` = MAX_ATTACHMENT_BYTES, over it 422
  "Attachment exceeds N bytes", another multer error 400; no file 400 "Missing
  file field 'file'"; a type not allowed 422 "Unsupported attachment type: T";
  empty 422 "Attachment is empty"; else 201 with the attachment row and
  `contentPath` `/api/attachments/:id/content`), and `GET
  /api/attachments/:attachmentId/content` (404 "Attachment not found", then
  assertCompanyAccess, then the bytes);
- server/src/attachment-types.ts @ 07e80be34764: DEFAULT_ALLOWED_TYPES (which
  holds application/zip) and MAX_ATTACHMENT_BYTES =
  PAPERCLIP_ATTACHMENT_MAX_BYTES || 10 MiB;
- server/src/middleware/auth.ts @ 027bd8cc9602 and server/src/routes/authz.ts
  @ 09cec30c4792: a board API key or an agent key as `Authorization: Bearer`;
  no key it knows is no actor, 401 "Unauthorized"; an agent key of another
  company 403 "Agent key cannot access another company"; a board key without
  the company 403 "User does not have access to this company".

Faults (set `faults`): `forbidden` (403 on upload), `too_large` (413 on upload,
as a proxy in front of Paperclip answers a body it will not take), `bad_type`
(the deployment's allowlist lacks application/zip: 422), `error` (500),
`corrupt` (the content route serves bytes that differ), `redirect` (the content
route answers 302 to `redirect_to`). `down()` stops listening: connection refused.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
ALLOWED = {"application/zip", "application/pdf", "text/plain", "application/json", "image/png"}
UPLOAD = re.compile(r"^/api/companies/([^/]+)/issues/([^/]+)/attachments$")
CONTENT = re.compile(r"^/api/attachments/([^/]+)/content$")


@dataclass
class Key:
    """A board key (companies it may reach) or an agent key (its one company)."""

    kind: str  # "board" or "agent"
    companies: tuple[str, ...]


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None
    status: int = 0


@dataclass
class State:
    max_bytes: int = DEFAULT_MAX_BYTES
    keys: dict[str, Key] = field(default_factory=dict)
    issues: dict[str, str] = field(default_factory=dict)  # issue id -> company id
    attachments: dict[str, dict] = field(default_factory=dict)
    faults: set[str] = field(default_factory=set)
    redirect_to: str = ""
    upload_delay: float = 0.0  # seconds an upload takes, for overlapping workers
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    server_version = "paperclip-fake"
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> State:
        return cast(Any, self.server).state

    def log_message(self, format, *args):
        pass

    def _answer(self, status: int, body: dict | bytes, headers: dict | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        ctype = "application/octet-stream" if isinstance(body, bytes) else "application/json"
        for k, v in ({"Content-Type": ctype} | (headers or {})).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.state.requests[-1].status = status

    def _actor(self) -> Key | None:
        auth = self.headers.get("Authorization") or ""
        if not auth.lower().startswith("bearer "):
            return None
        return self.state.keys.get(auth[7:].strip())

    def _company_refusal(self, actor: Key | None, company: str) -> tuple[int, str] | None:
        """authz.ts assertCompanyAccess."""
        if actor is None:
            return 401, "Unauthorized"
        if actor.kind == "agent" and company not in actor.companies:
            return 403, "Agent key cannot access another company"
        if actor.kind == "board" and company not in actor.companies:
            return 403, "User does not have access to this company"
        return None

    def _seen(self) -> None:
        with self.state.lock:
            self.state.requests.append(
                Seen(self.command, self.path, self.headers.get("Authorization"))
            )

    def do_POST(self):
        self._seen()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        match = UPLOAD.match(self.path)
        if not match:
            return self._answer(404, {"error": "Not found"})
        company, issue = match.groups()
        time.sleep(self.state.upload_delay)
        if "error" in self.state.faults:
            return self._answer(500, {"error": "Internal server error"})
        if "too_large" in self.state.faults:
            return self._answer(413, {"error": "request entity too large"})
        refusal = self._company_refusal(self._actor(), company)
        if "forbidden" in self.state.faults:
            refusal = (403, "User does not have access to this company")
        if refusal:
            return self._answer(refusal[0], {"error": refusal[1]})
        if issue not in self.state.issues:
            return self._answer(404, {"error": "Issue not found"})
        if self.state.issues[issue] != company:
            return self._answer(422, {"error": "Issue does not belong to company"})
        part = _file_field(self.headers.get("Content-Type") or "", body)
        if part == "bad":
            return self._answer(400, {"error": "Malformed part header"})
        if part is None:
            return self._answer(400, {"error": "Missing file field 'file'"})
        filename, ctype, data = part
        if len(data) > self.state.max_bytes:
            return self._answer(422, {"error": f"Attachment exceeds {self.state.max_bytes} bytes"})
        if ctype not in ALLOWED or "bad_type" in self.state.faults:
            return self._answer(
                422, {"error": f"Unsupported attachment type: {ctype or 'unknown'}"}
            )
        if not data:
            return self._answer(422, {"error": "Attachment is empty"})
        aid = str(uuid.uuid4())
        now = datetime.now(UTC).isoformat()
        row = {
            "id": aid,
            "companyId": company,
            "issueId": issue,
            "issueCommentId": None,
            "provider": "local_disk",
            "objectKey": f"issues/{issue}/{aid}",
            "contentType": ctype,
            "byteSize": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "originalFilename": filename,
            "createdAt": now,
            "updatedAt": now,
        }
        with self.state.lock:
            self.state.attachments[aid] = row | {"data": data}
        self._answer(201, row | {"contentPath": f"/api/attachments/{aid}/content"})

    def do_GET(self):
        self._seen()
        match = CONTENT.match(self.path)
        if not match:
            return self._answer(404, {"error": "Not found"})
        row = self.state.attachments.get(match.group(1))
        if row is None:
            return self._answer(404, {"error": "Attachment not found"})
        refusal = self._company_refusal(self._actor(), row["companyId"])
        if refusal:
            return self._answer(refusal[0], {"error": refusal[1]})
        if "redirect" in self.state.faults:
            return self._answer(302, {"error": "moved"}, {"Location": self.state.redirect_to})
        data = row["data"]
        if "corrupt" in self.state.faults:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        self._answer(200, data, {"Content-Type": row["contentType"]})


def _file_field(content_type: str, body: bytes):
    """(filename, content type, bytes) of the multipart field `file`; None if absent."""
    if not content_type.startswith("multipart/form-data"):
        return None
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        return "bad"
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            data = part.get_payload(decode=True) or b""
            return part.get_filename() or "", (part.get_content_type() or "").lower(), data
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: State


class FakePaperclip:
    """Run on loopback; `with FakePaperclip() as pc:` in a test."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, host: str = "127.0.0.1"):
        self._httpd = _Server((host, 0), Handler)
        self.state = self._httpd.state = State(max_bytes=max_bytes)
        host, port = cast(tuple[str, int], self._httpd.server_address[:2])
        self.url = f"http://{host}:{port}"
        self._thread: threading.Thread | None = None

    def add_issue(self, issue_id, company_id) -> None:
        self.state.issues[str(issue_id)] = str(company_id)

    def add_key(self, token: str, kind: str, *companies) -> None:
        self.state.keys[token] = Key(kind, tuple(str(c) for c in companies))

    def attachments_of(self, issue_id) -> list[dict]:
        return [a for a in self.state.attachments.values() if a["issueId"] == str(issue_id)]

    def start(self) -> FakePaperclip:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def down(self) -> None:
        """Stop listening: every later connection is refused."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread = None

    def up(self) -> FakePaperclip:
        """Listen again on the same port, with the same state."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self._httpd = _Server((host, int(port)), Handler)
        self._httpd.state = self.state
        return self.start()

    def __enter__(self) -> FakePaperclip:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self.down()
