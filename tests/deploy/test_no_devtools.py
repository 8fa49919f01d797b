"""Product and harness apart: production (DEBUG off) does not install the
`devtools` app, boots and passes `check --deploy` without it, and no product
module imports it; development and the tests do install it."""

import ast
import json
import subprocess
from pathlib import Path

import pytest
from django.apps import apps

from .helpers import PYTHON, ROOT, manage, production_env

_INSTALLED = (
    "import json, django; django.setup(); from django.apps import apps; "
    "print(json.dumps([a.name for a in apps.get_app_configs()]))"
)
HARNESS_COMMANDS = (
    "chaos_wave",
    "bench_console",
    "provider_simulator",
    "demo_fleet",
    "console_screenshots",
)


def _installed(env: dict) -> list[str]:
    done = subprocess.run(
        [PYTHON, "-c", _INSTALLED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_production_does_not_install_devtools():
    installed = _installed(production_env())
    assert "sandboxes" in installed
    assert "devtools" not in installed


@pytest.mark.slow
def test_production_boots_and_passes_check_deploy_without_the_harness_commands():
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    listed = manage("help", "--commands", env=production_env())
    assert listed.returncode == 0, listed.stderr
    commands = set(listed.stdout.split())
    assert {"reconcile", "load_events", "setup_schedules"} <= commands
    assert commands.isdisjoint(HARNESS_COMMANDS)


@pytest.mark.slow
def test_development_installs_devtools():
    env = production_env(DEBUG="1", SECRET_KEY=None, ALLOWED_HOSTS=None)
    assert "devtools" in _installed(env)


def test_the_tests_install_devtools():
    assert apps.is_installed("devtools")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_product_module_imports_devtools():
    offenders = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "sandboxes").rglob("*.py")
        if any(name == "devtools" or name.startswith("devtools.") for name in _imports(path))
    )
    assert offenders == []


def test_the_product_holds_no_harness():
    # What moved to devtools stays there (issue 14: product and harness apart).
    product = ROOT / "sandboxes"
    assert not (product / "chaos").exists()
    for name in ("demo.py", "bench_fleet.py", "screenshots.py", "providers/simulator.py"):
        assert not (product / name).exists(), name
    for command in HARNESS_COMMANDS:
        assert not (product / "management" / "commands" / f"{command}.py").exists(), command
