"""Company scope in a real browser (README, company scope): an admin limits an
operator to one company on the Users page; the operator then sees only that
company's sandboxes on the list, and another company's sandbox page is a 404
that names nothing."""

import pytest
from playwright.sync_api import expect

from tests import factories as f
from tests.console.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_limits_an_operator_who_then_sees_only_that_company(page, live_server, shot):
    f.UserFactory(username="ada", groups=["admins"])
    f.UserFactory(username="otto", groups=["operators"])
    acme, globex = f.CompanyFactory(name="Acme"), f.CompanyFactory(name="Globex")
    ours, theirs = f.RetirementFactory(), f.RetirementFactory()
    f.move_to_company(acme, ours)
    f.move_to_company(globex, theirs)

    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/users/")
    row = page.locator('tr[data-user="otto"]')
    row.get_by_text("Limit to companies").click()
    row.get_by_label("Acme").check()
    row.get_by_label("Reason for the company limit").fill("Acme's contractor")
    row.get_by_role("button", name="Save companies").click()
    expect(page.get_by_text("otto now sees 1 company.")).to_be_visible()
    expect(page.locator('tr[data-user="otto"] [data-companies]')).to_contain_text("Acme")
    shot(page, "users-company-limit")

    page.context.clear_cookies()
    log_in(page, live_server, "otto")
    page.goto(f"{live_server.url}/sandboxes/?stage=all")
    expect(page.locator(f'tr[data-sandbox="{ours.provider_lease_id}"]')).to_be_visible()
    expect(page.locator(f'tr[data-sandbox="{theirs.provider_lease_id}"]')).to_have_count(0)
    expect(page.locator("#rows")).not_to_contain_text("Globex")
    expect(page.get_by_label("Company")).to_contain_text("Acme")
    shot(page, "list-limited-to-a-company")

    response = page.goto(f"{live_server.url}/sandboxes/{theirs.pk}/")
    assert response is not None and response.status == 404
    assert theirs.provider_lease_id not in page.content()
    assert theirs.lease.issue.title not in page.content()
