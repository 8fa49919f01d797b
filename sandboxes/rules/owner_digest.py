"""An owner's digest in words (README: Owner e-mail): the hour it belongs to,
and its subject and body, from plain data read at send time.

Each sandbox of the owner's tasks is one entry: its task, its sandbox, and
what happens to it: "will be retired in 2 d 4 h, at 2026-12-04 09:00:00 UTC"
(counted down from the notice's `retire_after` to the moment of sending), or
"retired: exported 2 files" with each file's path, size and link. Every
duration, time and size is in the one format of `words`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import datetime

from .words import absolute, duration, size

WIDTH = 76  # a plain-text mail's line
KEPT_IF = (
    "A sandbox is kept if you open its keep link, or an operator holds it, before its notice ends."
)


def hour_of(moment: datetime) -> datetime:
    """The hour a digest formed at `moment` belongs to (its window's start)."""
    return moment.replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Notice:
    """A notice: the sandbox is retired no earlier than `retire_after`. `stands`
    is False once the record left that notice (held, retired, dismissed):
    `stage` says where it is now."""

    retire_after: datetime
    stands: bool = True
    stage: str = "noticed"
    keep_url: str = ""


@dataclass(frozen=True)
class ExportedFile:
    path: str
    size: int
    url: str = ""


@dataclass(frozen=True)
class Retired:
    exported: tuple[ExportedFile, ...] = ()
    deleted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """One sandbox in a digest."""

    task_key: str
    task_title: str
    sandbox: str  # provider:id
    record_url: str
    notice: Notice | None = None
    retired: Retired | None = None
    task_url: str = ""


def notice_words(n: Notice, now: datetime) -> str:
    """What the notice says at `now`, counted down to its retire_after."""
    at = absolute(n.retire_after)
    if not n.stands:
        return f"No longer to be retired at {at}: it is {n.stage.replace('_', ' ')} now."
    if n.retire_after <= now:
        return f"Due to be retired now: its notice ended at {at}."
    return f"Will be retired in {duration(n.retire_after - now)}, at {at}."


def retired_words(r: Retired) -> list[str]:
    count = len(r.exported)
    if not count:
        lines = ["Retired: nothing was unsaved, nothing was exported."]
    else:
        noun = "file" if count == 1 else "files"
        total = size(sum(f.size for f in r.exported))
        lines = [f"Retired: exported {count} {noun} ({total}) to the task:"]
        lines += [f"    {f.path} ({size(f.size)}) {f.url}".rstrip() for f in r.exported]
    if r.deleted:
        lines.append(f"Deleted since the last save: {', '.join(r.deleted)}")
    return lines


def entry_lines(e: Entry, now: datetime) -> list[str]:
    title = f"{e.task_key} {e.task_title}".strip() or "A task without a key"
    lines = [title, f"  Sandbox: {e.sandbox}"]
    if e.retired is not None:
        lines += [f"  {line}" for line in retired_words(e.retired)]
    elif e.notice is not None:
        lines.append(f"  {notice_words(e.notice, now)}")
        if e.notice.stands and e.notice.keep_url and e.notice.retire_after > now:
            lines.append(f"  Keep it: {e.notice.keep_url}")
    if e.task_url:
        lines.append(f"  Task: {e.task_url}")
    lines.append(f"  Record: {e.record_url}")
    return lines


def subject(entries: list[Entry], environment: str) -> str:
    noticed = sum(1 for e in entries if e.retired is None and e.notice is not None)
    retired = sum(1 for e in entries if e.retired is not None)
    parts = []
    if noticed:
        parts.append(f"{noticed} to be retired")
    if retired:
        parts.append(f"{retired} retired")
    noun = "sandbox" if len(entries) == 1 else "sandboxes"
    return f"[{environment}] {len(entries)} {noun} of your tasks: {', '.join(parts)}"


def compose(
    entries: list[Entry], *, environment: str, owner_name: str, now: datetime
) -> tuple[str, str]:
    """Subject and plain-text body of one owner's digest, as of `now`."""
    greeting = f"Hello {owner_name}," if owner_name else "Hello,"
    intro = (
        f"The Paperclip Console retires kept sandboxes of {environment} once no unsaved "
        "work lives only on them. These are sandboxes of tasks you own:"
    )
    body = [greeting, "", *textwrap.wrap(intro, WIDTH)]
    for e in entries:
        body += ["", *entry_lines(e, now)]
    footer = f"Times are UTC; countdowns as of {absolute(now)}. {KEPT_IF}"
    body += ["", *textwrap.wrap(footer, WIDTH)]
    return subject(entries, environment), "\n".join(body) + "\n"
