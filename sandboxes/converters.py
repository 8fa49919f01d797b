"""URL converters for ids the console does not mint.

A provider's sandbox id is not always one path segment: Paperclip's SSH
environments name a sandbox like ``ssh://host/srv/work``. Clients send it
percent-encoded (``ssh%3A%2F%2Fhost%2Fsrv%2Fwork``); the WSGI server decodes
the path before Django routes it, so the converter accepts slashes. The act
API's route (``…/{id}/{verb}``) takes the last segment as the verb; its view
reads the whole path as an id when a GET's last segment is not a verb. (A GET
of an id that itself ends in ``/approve``, ``/retry``, ``/hold`` or
``/release-hold`` is refused as a GET on an action; the list API finds it.)
"""

from __future__ import annotations

from django.urls import register_converter


class SandboxIdConverter:
    """Any non-empty sandbox id, slashes included."""

    regex = r".+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        # reverse() percent-encodes what it must; the id stays readable.
        return str(value)


class PathSegmentConverter:
    """Exactly one path segment (the act API's verb after a sandbox id)."""

    regex = r"[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SandboxIdConverter, "sandbox_id")
register_converter(PathSegmentConverter, "segment")
