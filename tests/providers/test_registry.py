"""One shared client per provider configuration; tokens read from the environment."""

import pytest

from sandboxes.providers import get_provider, reset_providers
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.providers.local import LocalProvider


@pytest.fixture(autouse=True)
def fresh():
    reset_providers()
    yield
    reset_providers()


def test_local_uses_the_configured_root(settings, tmp_path):
    settings.LOCAL_SANDBOX_ROOT = tmp_path / "boxes"
    provider = get_provider("local")
    assert isinstance(provider, LocalProvider) and provider.root == tmp_path / "boxes"
    assert get_provider("local") is provider


def test_daytona_clients_are_shared_per_url_and_key_variable(settings):
    settings.PROVIDER_API_KEY_VARIABLES = ["DAYTONA_API_KEY", "OTHER_KEY"]
    settings.DAYTONA_API_URL = "https://daytona.example/api"
    default = get_provider("daytona")
    assert isinstance(default, DaytonaProvider)
    assert default.api_url == "https://daytona.example/api"
    assert get_provider("daytona", api_url=None) is default
    other = get_provider("daytona", api_url="https://other.example", api_key_env="OTHER_KEY")
    assert other is not default
    assert (
        get_provider("daytona", api_url="https://other.example", api_key_env="OTHER_KEY") is other
    )


def test_the_token_is_read_from_the_environment_at_call_time(simulator, monkeypatch, settings):
    settings.PROVIDER_API_KEY_VARIABLES = ["SIM_KEY"]
    monkeypatch.delenv("SIM_KEY", raising=False)
    provider = get_provider("daytona", api_url=simulator.url, api_key_env="SIM_KEY")
    assert "test-key" not in repr(vars(provider))
    monkeypatch.setenv("SIM_KEY", "test-key")
    assert provider.get("nothing").state == "destroyed"


def test_unknown_providers_and_missing_urls_are_refused(settings):
    settings.DAYTONA_API_URL = ""
    with pytest.raises(ValueError):
        get_provider("daytona")
    with pytest.raises(ValueError):
        get_provider("ssh")


def test_provider_settings_default_from_django(settings):
    settings.PROVIDER_STEP_BUDGET_SECONDS = 12
    settings.PROVIDER_MAX_CONCURRENCY = 3
    settings.DAYTONA_API_URL = "https://x.example"
    provider = get_provider("daytona")
    assert provider.budget_seconds == 12 and provider.max_concurrency == 3


def test_an_environment_asks_for_the_shared_client_of_its_own_settings(settings, tmp_path):
    """Environment.provider_client: the one way the reconciler and the console's
    "Ask the provider now" build a client."""
    from sandboxes.models import Environment

    settings.PROVIDER_API_KEY_VARIABLES = ["DAYTONA_API_KEY", "OTHER_KEY"]
    settings.DAYTONA_API_URL = "https://daytona.example/api"
    settings.LOCAL_SANDBOX_ROOT = tmp_path / "boxes"
    # Unsaved: building a client reads only the environment's own fields.
    env = Environment(provider="daytona", api_url="", api_key_env="", toolbox_hosts="")
    assert env.provider_client() is get_provider("daytona")
    assert env.provider_client("local") is get_provider("local")
    env = Environment(
        provider="daytona",
        api_url="https://other.example",
        api_key_env="OTHER_KEY",
        toolbox_hosts="toolbox.example",
    )
    client = env.provider_client()
    assert client is get_provider(
        "daytona",
        api_url="https://other.example",
        api_key_env="OTHER_KEY",
        toolbox_hosts=("toolbox.example",),
    )
    assert client is not get_provider("daytona")
    with pytest.raises(ValueError):
        Environment(provider="ssh").provider_client()
