"""The Content-Security-Policy in a real browser (issue 13, item 10): every
console page renders, polls and acts with no CSP violation — nothing inline,
no eval — and a hidden tab's live regions poll every 30 s, not every 3 s."""

import pytest

from sandboxes.models.choices import Stage
from tests import factories as f
from tests.console.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Runs before any page script (injected by the browser, not by the page), so it
# sees violations the page itself causes.
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || ''));
});
"""


def test_no_page_violates_the_policy(page, live_server):
    f.UserFactory(username="ada", groups=["admins"])
    r = f.RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    messages = []
    page.on("console", lambda m: messages.append(m.text))
    page.add_init_script(WATCH)
    log_in(page, live_server, "ada")
    polls = []
    page.on("request", lambda req: polls.append(req.url) if "fp=" in req.url else None)
    for path in (
        "/",
        "/sandboxes/",
        f"/sandboxes/{r.pk}/",
        "/approvals/",
        "/audit/",
        "/passes/",
        "/environments/",
        "/tokens/",
    ):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        if path in ("/", "/sandboxes/"):
            page.wait_for_timeout(3500)  # one live poll, through htmx, under the CSP
        assert page.evaluate("window.__csp") == [], path
    assert page.evaluate("typeof htmx") == "object"
    assert page.evaluate("htmx.config.allowEval") is False
    assert polls, "the live regions polled"
    blocked = [m for m in messages if "Content Security Policy" in m or "unsafe-eval" in m]
    assert blocked == []


def test_a_hidden_tab_polls_every_30_seconds(page, live_server):
    f.UserFactory(username="rita", groups=["reviewers"])
    log_in(page, live_server, "rita")
    polls = []
    page.on("request", lambda req: polls.append(req.url) if "fp=" in req.url else None)
    page.evaluate(
        """() => {
        Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'});
    }"""
    )
    page.wait_for_timeout(7000)  # two 3 s ticks: at most the first one goes through
    assert len(polls) <= 1, polls
