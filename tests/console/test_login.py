from django.urls import reverse

from tests.factories import UserFactory

PASSWORD = "correct horse battery staple"


def test_it_logs_in(client, db):
    UserFactory(username="oscar", groups=["operators"])
    response = client.post(reverse("login"), {"username": "oscar", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("dashboard")).status_code == 200


def test_it_limits_failed_attempts(client, db):
    UserFactory(username="oscar", groups=["operators"])
    for _ in range(5):
        response = client.post(reverse("login"), {"username": "oscar", "password": "nope"})
        assert response.status_code == 200
    response = client.post(reverse("login"), {"username": "oscar", "password": PASSWORD})
    assert response.status_code == 429
    assert b"Too many failed attempts" in response.content
    assert client.get(reverse("dashboard")).status_code == 302


def test_the_limit_also_counts_per_address_across_usernames(client, db):
    for i in range(20):  # LOGIN_FREE_ATTEMPTS_PER_ADDRESS
        client.post(reverse("login"), {"username": f"guess{i}", "password": "nope"})
    UserFactory(username="oscar", groups=["operators"])
    response = client.post(reverse("login"), {"username": "oscar", "password": PASSWORD})
    assert response.status_code == 429


def test_a_success_clears_the_count(client, db):
    UserFactory(username="oscar", groups=["operators"])
    for _ in range(4):
        client.post(reverse("login"), {"username": "oscar", "password": "nope"})
    client.post(reverse("login"), {"username": "oscar", "password": PASSWORD})
    client.logout()
    for _ in range(4):
        client.post(reverse("login"), {"username": "oscar", "password": "nope"})
    response = client.post(reverse("login"), {"username": "oscar", "password": PASSWORD})
    assert response.status_code == 302
