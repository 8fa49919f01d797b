"""Small template helpers for the console: labels, lookups and payload shapes."""

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    if not mapping:
        return ""
    return mapping.get(key, "")


@register.filter
def label(value):
    """`awaiting_approval` → `awaiting approval`."""
    return str(value or "").replace("_", " ")


@register.filter
def files(items):
    """A receipt's file list as dicts, whether it holds paths or {path, size, ...}."""
    out = []
    for item in items or []:
        if isinstance(item, dict):
            out.append(item)
        else:
            out.append({"path": str(item)})
    return out


def shown(value) -> str:
    """A value as the audit trail shows it: nothing is "—", but 0 and False are values."""
    if value is None or value == "" or value == [] or value == {}:
        return "—"
    return str(value)


@register.filter
def changes(event):
    """An audit row's before → after as rows of {key, old, new}: keys whose value moved."""
    before, after = event.before or {}, event.after or {}
    rows = []
    for key, new in after.items():
        old = before.get(key)
        if old != new:
            rows.append({"key": key, "old": shown(old), "new": shown(new)})
    return rows


@register.simple_tag
def nav_class(request, *names):
    match = getattr(request, "resolver_match", None)
    return "active" if match and match.url_name in names else ""
