"""Small template helpers for the console: labels, lookups and payload shapes."""

from django import template

from sandboxes.views.humanize import change_rows, hold_phrase
from sandboxes.views.humanize import short as _short

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


@register.filter
def money(value, currency="USD"):
    """A cost, or "unknown" - never 0 for a cost that could not be computed."""
    from sandboxes.costs import money as fmt

    return fmt(value, currency or "USD")


@register.filter
def changes(event):
    """An audit row's before → after in words (sandboxes.views.humanize)."""
    return change_rows(event.before, event.after)


@register.simple_tag
def nav_class(request, *names):
    match = getattr(request, "resolver_match", None)
    return "active" if match and match.url_name in names else ""


@register.filter
def hold_words(code, retirement):
    """`retention` → "retention until Dec 1 14:03" for this record."""
    return hold_phrase(code, retirement)


@register.inclusion_tag("sandboxes/_id.html")
def short_id(value, what="id", size=8):
    """An id shortened when long, the whole id in its title, with a copy button."""
    text = str(value or "")
    return {"full": text, "short": _short(text, size), "what": what}


@register.filter
def shorten(value, size=8):
    """An id cut to `size` characters and "…" when longer (the title keeps it whole)."""
    return _short(value, int(size))


@register.filter
def action_words(action):
    """`retirement.failed` → "a step failed" (the audit filter's words)."""
    from sandboxes.audit import ACTIONS

    return ACTIONS.get(action) or label(str(action).split(".", 1)[-1])
