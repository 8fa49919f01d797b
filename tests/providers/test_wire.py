"""Toolbox wire formats: the hash listing and the streaming multipart reader."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandboxes.providers import wire
from sandboxes.providers.base import ProviderProtocolError


def multipart(parts, boundary="b0undary"):
    out = b""
    for name, body in parts:
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f"filename={wire.quote_param(name)}\r\n\r\n"
            ).encode()
            + body
            + b"\r\n"
        )
    return out + f"--{boundary}--\r\n".encode()


def chunked(data, size):
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def read(data, size, boundary=b"b0undary"):
    result = []
    for headers, body in wire.MultipartStream(chunked(data, size), boundary).parts():
        name = wire.part_filename(wire.disposition_params(headers["content-disposition"]))
        result.append((name, b"".join(body)))
    return result


# A bare quoted `filename` is one header line: it cannot carry CR or LF (only
# `filename*` can, tested below with Daytona's own format). Nor can it carry a
# lone surrogate: no encoder writes one, so no server could send it.
HEADER_SAFE_NAMES = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@given(
    st.lists(st.tuples(HEADER_SAFE_NAMES, st.binary(max_size=300)), max_size=5),
    st.integers(min_value=1, max_value=64),
)
def test_multipart_round_trips_whatever_the_chunking(parts, size):
    assert read(multipart(parts), size) == parts


def daytona_multipart(parts, boundary="DAYTONA-FILE-BOUNDARY"):
    """The toolbox's bulk-download answer as Go's multipart.Writer writes it
    (daytonaio/daytona apps/daemon/pkg/toolbox/fs/download_files.go): headers
    sorted, `filename` in Latin-1 bytes, `filename*` in RFC 5987 UTF-8."""
    out = b""
    for i, (name, body) in enumerate(parts):
        out += b"\r\n" if i else b""
        out += f"--{boundary}\r\n".encode()
        out += f"Content-Disposition: {wire.content_disposition('file', name)}\r\n".encode(
            "latin-1"
        )
        out += f"Content-Length: {len(body)}\r\n".encode()
        out += b"Content-Type: application/octet-stream\r\n\r\n" + body
    return out + f"\r\n--{boundary}--\r\n".encode()


@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=20), st.binary(max_size=300)), max_size=5),
    st.integers(min_value=1, max_value=64),
)
def test_daytona_part_names_round_trip_through_filename_star(parts, size):
    # Any name -- non-Latin-1, quotes, backslashes, CR/LF -- survives only via
    # filename*; filename alone would lose it.
    assert read(daytona_multipart(parts), size, b"DAYTONA-FILE-BOUNDARY") == parts


@pytest.mark.parametrize(
    "header, expected",
    [
        # Recorded from download_files.go multipartContentDisposition:
        (
            b'form-data; name="file"; filename="caf\xe9.txt"; filename*=utf-8\'\'caf%C3%A9.txt',
            "café.txt",
        ),
        (
            b'form-data; name="file"; filename="__.txt"; filename*=utf-8\'\'%E6%97%A5%E6%9C%AC.txt',
            "日本.txt",
        ),
        # An old toolbox: filename only, raw UTF-8.
        (b'form-data; name="file"; filename="\xe6\x97\xa5\xe6\x9c\xac.txt"', "日本.txt"),
        # filename only, Latin-1.
        (b'form-data; name="file"; filename="caf\xe9.txt"', "café.txt"),
        (b'form-data; name="file"; filename="x"; filename*=UTF-8\'en\'a%20b.txt', "a b.txt"),
    ],
)
def test_part_filename_prefers_filename_star(header, expected):
    headers = wire._parse_headers(b"Content-Disposition: " + header)
    assert wire.part_filename(wire.disposition_params(headers["content-disposition"])) == expected


@pytest.mark.parametrize("bad", ["utf-16''abc", "abc", "utf-8''%FF%FE"])
def test_an_unreadable_filename_star_is_a_protocol_error(bad):
    with pytest.raises(ProviderProtocolError):
        wire.part_filename({"filename": "x", "filename*": bad})


def test_a_body_that_nearly_contains_the_delimiter_is_not_split():
    parts = [("x", b"\r\n--b0undar\r\n"), ("y", b"--b0undary at line start without CRLF")]
    for size in (1, 2, 5, 11):
        assert read(multipart(parts), size) == parts


def test_a_truncated_answer_is_a_protocol_error():
    data = multipart([("a", b"x" * 100)])[:-20]
    with pytest.raises(ProviderProtocolError):
        read(data, 7)


def test_hash_output_parses_names_with_spaces_and_newlines():
    sha = "a" * 64
    out = wire.format_hash_records([(sha, 3, "a b"), (sha, 0, "new\nline")])
    parsed = wire.parse_hash_output(out)
    assert set(parsed) == {"a b", "new\nline"} and parsed["a b"].size == 3


@pytest.mark.parametrize("bad", ["nonsense\0", "zz 1 ./a\0", f"{'a' * 64} x ./a\0"])
def test_unreadable_hash_output_is_a_protocol_error(bad):
    with pytest.raises(ProviderProtocolError):
        wire.parse_hash_output(bad)


def test_commands_round_trip_through_the_simulator_parser():
    assert wire.parse_command(wire.hash_command("my work'space")) == (
        wire.HASH_TAG,
        "my work'space",
    )
    assert wire.parse_command(wire.list_command("w")) == (wire.LIST_TAG, "w")
    assert wire.parse_command("ls -la") is None
