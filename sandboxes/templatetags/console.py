"""Small template helpers for the console: labels, lookups, payload shapes, and
the one way to show a time (`when`), a duration (`duration`) and a size
(`size`, `gib`), all from sandboxes.views.humanize."""

from django import template
from django.utils import timezone

from sandboxes.explain import when_zoned
from sandboxes.views import humanize
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
def per_day(value, currency="USD"):
    """ "$1.32/day", or "unknown" (never "unknown/day")."""
    from sandboxes.costs import money as fmt

    return fmt(value, currency or "USD") + ("" if value is None else "/day")


@register.filter
def kept_size(retirement):
    """What a record keeps on disk, for people ("12 KiB"), or "unknown"."""
    from sandboxes.costs import storage_bytes

    return humanize.size(storage_bytes(retirement))


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


@register.filter
def when(moment, style=""):
    """`<time datetime="ISO" title="absolute UTC">20 s ago</time>`; with
    "both", the absolute time follows the relative one in the text too."""
    if not moment:
        return humanize.DASH
    if style == "both":
        now = timezone.now()
        text = f"{humanize.relative(moment, now)} · {humanize.absolute(moment)}"
        return humanize.time_element(moment, now, text=text)
    return humanize.time_element(moment)


@register.filter
def zoned(moment):
    """`<time datetime="ISO" title="absolute UTC">Dec 9 09:00 UTC</time>`: a
    moment for a page read away from the console (explain.when_zoned)."""
    if not moment:
        return humanize.DASH
    return humanize.time_element(moment, text=when_zoned(moment))


@register.filter
def duration(value):
    """A timedelta or a number of seconds: "40 s", "5 min", "1 d 4 h"."""
    return humanize.duration(value)


@register.filter
def hours(value):
    """A number of hours, in the one duration format."""
    return humanize.duration(None if value is None else float(value) * 3600)


@register.filter
def size(n_bytes):
    """Bytes for people: "12 KiB", "2.4 GiB"."""
    return humanize.size(n_bytes)


@register.filter
def gib(value):
    """A provider-reported GiB size for people: "2.4 GiB"."""
    return humanize.size_gib(value)


@register.inclusion_tag("sandboxes/_heartbeat.html")
def heartbeat():
    """The reconciler's heartbeat, on every page (one query: ReconcilerPass.objects.pulse)."""
    from sandboxes.models import ReconcilerPass

    return {"pulse": ReconcilerPass.objects.pulse()}


@register.filter
def span_since(moment, now):
    """How long since `moment`, as a duration ("3 d 4 h"), in the one `<time>`
    (the absolute moment on hover)."""
    if moment is None or now is None:
        return humanize.DASH
    return humanize.time_element(moment, now, text=humanize.duration(now - moment))
