"""Keyset pages and their cursors, for the console's lists and the API: no
OFFSET, no COUNT, and a cursor the console did not issue is a 400 naming its
parameter (sandboxes.middleware answers BadCursor)."""

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils.dateparse import parse_datetime


@dataclass
class Page:
    items: list
    next_cursor: str | None
    size: int


def _encode(value) -> dict:
    if isinstance(value, datetime):
        return {"t": "dt", "v": value.isoformat()}
    if isinstance(value, Decimal):
        return {"t": "dec", "v": str(value)}
    return {"t": "raw", "v": value}


def _decode(data: dict):
    if data.get("t") == "dt":
        return parse_datetime(data["v"])
    if data.get("t") == "dec":
        if not isinstance(data["v"], str):
            raise ValueError("not a decimal")
        try:
            value = Decimal(data["v"])
        except InvalidOperation:
            raise ValueError("not a decimal") from None
        if not value.is_finite():
            raise ValueError("not a decimal")
        return value
    return data.get("v")


def encode_cursor(value, pk) -> str:
    raw = json.dumps({**_encode(value), "id": str(pk)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class BadCursor(ValueError):
    """A paging cursor this console did not issue (or issued for another
    order). The middleware answers 400 naming the query parameter."""

    def __init__(self, param: str, detail: str = ""):
        super().__init__(
            f"the {param!r} parameter is not a cursor this page issued"
            + (f" ({detail})" if detail else "")
        )
        self.param = param


def decode_cursor(cursor: str):
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        return _decode(data), data["id"]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _field(qs, field: str):
    """The model field, or the output field of the annotation, `field` names."""
    annotation = qs.query.annotations.get(field)
    if annotation is not None:
        return annotation.output_field
    return qs.model._meta.get_field(field)


def _checked(qs, field: str, value, pk, param: str):
    """The cursor's (value, pk) as the field's own Python types, or BadCursor:
    a list, a dict, None, NUL or an out-of-range number must not reach SQL."""
    model = qs.model
    model_field = _field(qs, field)
    kind = model_field.get_internal_type()
    expected = (
        datetime
        if kind == "DateTimeField"
        else int
        if kind.endswith("IntegerField") or kind == "AutoField"
        else Decimal
        if kind == "DecimalField"
        else str
    )
    # encode_cursor writes datetimes as {"t": "dt"}, everything else as JSON,
    # and the pk as a string: any other type is not a cursor we issued.
    for name, raw, want in ((field, value, expected), ("pk", pk, str)):
        if not isinstance(raw, want) or isinstance(raw, bool):
            raise BadCursor(param, f"{name} has the wrong type")
        if isinstance(raw, str) and ("\x00" in raw or len(raw) > 1000):
            raise BadCursor(param, f"{name} is not a value of that field")
    try:
        value = model_field.clean(value, None)
        pk = model._meta.pk.clean(pk, None)
    except (ValidationError, TypeError, ValueError, OverflowError) as exc:
        raise BadCursor(param, "it does not match this page's order") from exc
    return value, pk


def keyset_page(qs, *, order: str, cursor: str | None, size: int, param: str = "after") -> Page:
    """One page ordered by (`order`, pk), resuming after `cursor`. `order` is a
    non-null field or annotation name, '-' prefixed for descending. No OFFSET, no COUNT.
    A cursor that is not one this function issued for this order raises
    BadCursor naming `param` (a 400, not a 500 or a silent first page)."""
    desc = order.startswith("-")
    field = order.lstrip("-")
    qs = qs.order_by(order, "-pk" if desc else "pk")
    decoded = decode_cursor(cursor) if cursor else None
    if cursor and decoded is None:
        raise BadCursor(param)
    if decoded is not None:
        value, pk = _checked(qs, field, *decoded, param)
        op = "lt" if desc else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": value}) | Q(**{field: value, f"pk__{op}": pk}))
    rows = list(qs[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, field), last.pk)
    return Page(rows, next_cursor, size)
