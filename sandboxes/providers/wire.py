"""Wire formats shared by the Daytona client and the simulator: toolbox commands
for remote hashing and a streaming multipart reader for bulk downloads."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from urllib.parse import unquote_to_bytes

from sandboxes.providers.base import FileDigest, ProviderProtocolError

# One record per regular file, NUL-terminated so that names with spaces or
# newlines survive: "<sha256> <size> ./<path>\0". POSIX sh + find + wc only;
# sha256sum is checked up front so its absence is a clean exit 127 (fallback).
HASH_TAG = "paperclip-hash"
HASH_SCRIPT = (
    'cd -- "$1" || exit 3\n'
    "command -v sha256sum >/dev/null 2>&1 || { echo 'sha256sum: not found' >&2; exit 127; }\n"
    "find . -type f -exec sh -c '"
    'for f do h=$(sha256sum < "$f") && s=$(wc -c < "$f") || exit 1; '
    'printf "%s %s %s\\0" "${h%% *}" $s "$f"; done'
    "' paperclip-hash-each {} +\n"
)

# Fallback listing when the sandbox cannot hash: NUL-terminated "./<path>\0".
LIST_TAG = "paperclip-list"
LIST_SCRIPT = 'cd -- "$1" || exit 3\nfind . -type f -print0\n'

ROOT_MISSING_EXIT = 3
NOT_FOUND_EXIT = 127

_SHA256 = re.compile(r"[0-9a-f]{64}")


def hash_command(root: str) -> str:
    return shlex.join(["sh", "-c", HASH_SCRIPT, HASH_TAG, root])


def list_command(root: str) -> str:
    return shlex.join(["sh", "-c", LIST_SCRIPT, LIST_TAG, root])


def parse_command(command: str) -> tuple[str, str] | None:
    """For the simulator: (tag, root) when `command` is one of ours, else None."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) == 5 and argv[:2] == ["sh", "-c"] and argv[3] in (HASH_TAG, LIST_TAG):
        return argv[3], argv[4]
    return None


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def parse_hash_output(output: str) -> dict[str, FileDigest]:
    digests: dict[str, FileDigest] = {}
    for record in output.split("\0"):
        if not record.strip("\n"):
            continue
        record = record.lstrip("\n")
        try:
            sha, size, path = record.split(" ", 2)
            size_int = int(size)
        except ValueError:
            raise ProviderProtocolError(f"unreadable hash record {record[:200]!r}") from None
        if not _SHA256.fullmatch(sha) or size_int < 0 or not path.startswith("./"):
            raise ProviderProtocolError(f"unreadable hash record {record[:200]!r}")
        rel = _strip_dot(path)
        digests[rel] = FileDigest(path=rel, sha256=sha, size=size_int)
    return digests


def parse_list_output(output: str) -> list[str]:
    paths = []
    for record in output.split("\0"):
        record = record.lstrip("\n")
        if not record:
            continue
        if not record.startswith("./"):
            raise ProviderProtocolError(f"unreadable listing record {record[:200]!r}")
        paths.append(_strip_dot(record))
    return paths


def format_hash_records(records: Iterable[tuple[str, int, str]]) -> str:
    """For the simulator: render (sha256, size, relpath) the way HASH_SCRIPT prints."""
    return "".join(f"{sha} {size} ./{path}\0" for sha, size, path in records)


# --- multipart ---------------------------------------------------------------


def boundary_from(content_type: str) -> bytes:
    match = re.search(r'boundary="?([^";]+)"?', content_type or "")
    if not match:
        raise ProviderProtocolError(f"multipart answer without a boundary: {content_type!r}")
    return match.group(1).encode("latin-1")


def _parse_headers(block: bytes) -> dict[str, str]:
    """Part headers, decoded byte for byte (Latin-1): Daytona's `filename` carries
    raw Latin-1 bytes, and `part_filename` re-reads them as it must."""
    headers = {}
    for line in block.decode("latin-1").split("\r\n"):
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return headers


def disposition_params(value: str) -> dict[str, str]:
    """Parse `form-data; name="file"; filename="a b.txt"` (quoted, backslash-escaped)."""
    params = {}
    for match in re.finditer(r';\s*([\w*-]+)=(?:"((?:[^"\\]|\\.)*)"|([^;]*))', value):
        raw = match.group(2) if match.group(2) is not None else match.group(3).strip()
        if match.group(2) is not None:
            raw = re.sub(r"\\(.)", r"\1", raw)
        params[match.group(1).lower()] = raw
    return params


def part_filename(params: dict[str, str]) -> str:
    """The part's file name: `filename*` (RFC 5987/8187, `utf-8''<percent-encoded>`)
    when present, else `filename`.

    Daytona's toolbox names each bulk-download part both ways (daytonaio/daytona
    apps/daemon/pkg/toolbox/fs/download_files.go, multipartContentDisposition):
    `filename` is the path sanitised to Latin-1 (every rune above U+00FF, every
    control character, CR and LF replaced or dropped), `filename*` the exact UTF-8
    path. Only `filename*` names `日本.txt` or a path with a newline. A server
    without `filename*` that sent raw UTF-8 in `filename` is read as UTF-8."""
    extended = params.get("filename*")
    if extended is not None:
        charset, _, rest = extended.partition("'")
        _language, sep, encoded = rest.partition("'")
        if not sep or charset.strip().lower() not in ("utf-8", "iso-8859-1"):
            raise ProviderProtocolError(f"unreadable filename* parameter {extended[:200]!r}")
        try:
            raw = unquote_to_bytes(encoded)
            return raw.decode("utf-8" if charset.strip().lower() == "utf-8" else "latin-1")
        except UnicodeDecodeError:
            raise ProviderProtocolError(f"filename* is not {charset}: {extended[:200]!r}") from None
    name = params.get("filename", "")
    try:
        return name.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return name


def content_disposition(form_name: str, path: str) -> str:
    """Daytona's bulk-download part disposition, byte for byte (download_files.go):
    `form-data; name="file"; filename="<latin-1>"; filename*=utf-8''<rfc5987>`."""
    return (
        f'form-data; name="{form_name}"; filename="{to_latin1(path)}"; '
        f"filename*=utf-8''{encode_rfc5987(path)}"
    )


def to_latin1(value: str) -> str:
    """download_files.go toLatin1: escape `\\` and `"`, drop CR, LF and NUL, and
    replace other control characters, DEL and runes above U+00FF with `_`."""
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\r", "")
        .replace("\n", "")
        .replace("\x00", "")
    )
    return "".join(
        "_" if ord(ch) > 0xFF or ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in escaped
    )


_ATTR_CHARS = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&+-.^_`|~"
)


def encode_rfc5987(value: str) -> str:
    """download_files.go encodeRFC5987: percent-encode every UTF-8 byte outside attr-char."""
    return "".join(chr(b) if b in _ATTR_CHARS else f"%{b:02X}" for b in value.encode("utf-8"))


def quote_param(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class MultipartStream:
    """Incremental multipart reader over an iterator of byte chunks.

    `parts()` yields `(headers, body_chunks)`; each body is streamed and a body
    the caller leaves unread is drained before the next part, so memory stays at
    about one chunk plus the delimiter whatever the parts' sizes.
    """

    MAX_HEADER_BYTES = 64 * 1024

    def __init__(self, chunks: Iterable[bytes], boundary: bytes):
        self._chunks = iter(chunks)
        # A leading CRLF makes the first delimiter look like every other one.
        self._buf = bytearray(b"\r\n")
        self._delim = b"\r\n--" + boundary
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        for chunk in self._chunks:
            if chunk:
                self._buf += chunk
                return True
        self._eof = True
        return False

    def _read_until(self, sep: bytes, limit: int) -> bytes:
        while True:
            index = self._buf.find(sep)
            if index >= 0:
                data = bytes(self._buf[:index])
                del self._buf[: index + len(sep)]
                return data
            if len(self._buf) > limit:
                raise ProviderProtocolError("multipart headers too long")
            if not self._fill():
                raise ProviderProtocolError("multipart answer ended early")

    def _need(self, count: int):
        while len(self._buf) < count:
            if not self._fill():
                raise ProviderProtocolError("multipart answer ended early")

    def _body(self) -> Iterator[bytes]:
        delim = self._delim
        keep = len(delim) - 1
        while True:
            index = self._buf.find(delim)
            if index >= 0:
                if index:
                    yield bytes(self._buf[:index])
                del self._buf[:index]
                return
            if len(self._buf) > keep:
                out = bytes(self._buf[: len(self._buf) - keep])
                del self._buf[: len(self._buf) - keep]
                yield out
            if not self._fill():
                raise ProviderProtocolError("multipart answer ended inside a part")

    def parts(self) -> Iterator[tuple[dict[str, str], Iterator[bytes]]]:
        # Skip any preamble up to the first delimiter.
        self._read_until(self._delim, limit=self.MAX_HEADER_BYTES)
        while True:
            self._need(2)
            if self._buf[:2] == b"--":
                return
            if self._buf[:2] != b"\r\n":
                raise ProviderProtocolError("malformed multipart delimiter")
            del self._buf[:2]
            headers = _parse_headers(self._read_until(b"\r\n\r\n", self.MAX_HEADER_BYTES))
            body = self._body()
            yield headers, body
            for _ in body:  # drain what the caller did not read
                pass
            # The buffer now starts with the delimiter.
            self._need(len(self._delim))
            del self._buf[: len(self._delim)]
