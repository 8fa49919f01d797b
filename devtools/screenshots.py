"""Screenshots of every console page at desktop and phone width, with a check that
no page scrolls sideways (README, The console: Screenshots).

`capture()` drives Debian's chromium through Playwright against a running console;
`manage.py console_screenshots` builds a throwaway database with the demo fleet,
serves it and calls `capture()`; tests/console/browser/test_screenshots.py calls
it against pytest-django's live server and asserts that nothing overflows.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTHS = (1440, 390)
HEIGHTS = {1440: 900, 390: 844}


@dataclass(frozen=True)
class Shot:
    name: str
    width: int
    path: Path
    status: int
    scroll_width: int
    client_width: int

    @property
    def overflows(self) -> bool:
        return self.scroll_width > self.client_width


def console_pages() -> list[tuple[str, str]]:
    """(name, path) of every page, with real objects from the database: call it
    where the database is readable (not inside Playwright's event loop)."""
    from django.urls import reverse

    from sandboxes.models import Environment, Receipt, ReconcilerPass, Retirement
    from sandboxes.models.choices import ReceiptKind, Stage

    pages = [
        ("dashboard", reverse("dashboard")),
        ("dashboard-by-environment", reverse("dashboard") + "?split=environment"),
        ("kept-sandboxes", reverse("sandbox-list")),
        ("kept-sandboxes-all-stages", reverse("sandbox-list") + "?stage=all"),
        ("kept-sandboxes-empty-search", reverse("sandbox-list") + "?q=no-such-sandbox"),
    ]
    richest = (
        Receipt.objects.filter(retirement__isnull=False)
        .order_by(
            # An export receipt has the widest table; then a compare.
            "-kind",
        )
        .filter(kind__in=[ReceiptKind.SALVAGE_EXPORT, ReceiptKind.SALVAGE_COMPARE])
        .values_list("retirement_id", flat=True)
        .first()
    )
    detail = Retirement.objects.filter(pk=richest).first() if richest else None
    detail = detail or Retirement.objects.order_by("-updated_at").first()
    if detail is not None:
        pages.append(("sandbox", reverse("sandbox-detail", kwargs={"pk": detail.pk})))
        pages.append(
            (
                "sandbox-by-provider-id",
                reverse("sandbox-by-id", kwargs={"sandbox_id": detail.provider_lease_id}),
            )
        )
        if detail.lease.issue_id:
            pages.append(("task", reverse("task", kwargs={"pk": detail.lease.issue_id})))
    for stage in (Stage.FAILED, Stage.RETIRED, Stage.HELD, Stage.AWAITING_APPROVAL):
        r = Retirement.objects.filter(stage=stage).order_by("-updated_at").first()
        if r is not None:
            pages.append((f"sandbox-{stage}", reverse("sandbox-detail", kwargs={"pk": r.pk})))
    pages += [
        ("approvals", reverse("approvals")),
        ("audit", reverse("audit")),
        ("audit-filtered", reverse("audit") + "?action=retirement.retired"),
        ("audit-bad-filter", reverse("audit") + "?action=no.such.action"),
        ("passes", reverse("passes")),
        ("environments", reverse("environments")),
        ("tokens", reverse("tokens")),
        ("users", reverse("users")),
        ("not-found", "/sandboxes/no-such-sandbox-anywhere/"),
    ]
    env = Environment.objects.order_by("name").first()
    if env is not None:
        pages.append(("channels", reverse("channels", kwargs={"pk": env.pk})))
    last_pass = ReconcilerPass.objects.order_by("-started_at").first()
    if last_pass is not None:
        pages.append(("pass", reverse("pass-detail", kwargs={"pk": last_pass.pk})))
    return pages


def launch(playwright):
    if not shutil.which(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def log_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}/")


def measure(page) -> tuple[int, int]:
    return page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )


def capture(
    browser,
    base_url: str,
    out_dir: Path,
    pages: list[tuple[str, str]],
    *,
    username: str,
    password: str,
    no_role: tuple[str, str] | None = None,
    widths=WIDTHS,
) -> list[Shot]:
    """Log in, open each page at each width, save a full-page PNG and measure it.
    `no_role` = (username, password) of an account without a role, for its page."""
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    out_dir.mkdir(parents=True, exist_ok=True)
    shots: list[Shot] = []

    def take(page, name: str, width: int, path: str | None) -> None:
        status = 200
        if path is not None:
            response = page.goto(f"{base_url}{path}")
            status = response.status if response is not None else 0
        page.wait_for_load_state("networkidle")
        file = out_dir / f"{name}-{width}.png"
        page.screenshot(path=str(file), full_page=True)
        scroll, client = measure(page)
        shots.append(Shot(name, width, file, status, scroll, client))

    for width in widths:
        context = browser.new_context(viewport={"width": width, "height": HEIGHTS.get(width, 900)})
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{base_url}/accounts/login/")
        take(page, "login", width, None)
        log_in(page, base_url, username, password)
        for name, path in pages:
            take(page, name, width, path)
        context.close()
        if no_role is not None:
            context = browser.new_context(
                viewport={"width": width, "height": HEIGHTS.get(width, 900)}
            )
            page = context.new_page()
            log_in(page, base_url, *no_role)
            take(page, "no-role", width, None)
            context.close()
    return shots


def report(shots: list[Shot]) -> str:
    lines = []
    for s in shots:
        flag = "OVERFLOWS" if s.overflows else "ok"
        lines.append(
            f"{s.name:<32} {s.width:>5}px  [{s.status}]  scrollWidth {s.scroll_width:>5} / "
            f"clientWidth {s.client_width:>5}  {flag}  {s.path}"
        )
    return "\n".join(lines)
