"""bin/sizes (`make sizes`) names what the product keeps at none (README, The two
commands): modules over the line limit and functions over theirs, migrations aside."""

import subprocess
import sys
from pathlib import Path

import pytest

# bin/sizes runs in its own Python process.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def sizes(*args) -> str:
    run = [sys.executable, str(REPO / "bin" / "sizes"), *map(str, args)]
    return subprocess.run(run, check=True, capture_output=True, text=True).stdout


def test_it_names_long_modules_and_long_functions_migrations_aside(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    method_body = body.replace("    ", "        ")
    (tmp_path / "long.py").write_text(
        f"class C:\n    def method(self):\n{method_body}\n\n        def inner():\n"
        "            return 1\n\n        return inner\n"
    )
    (tmp_path / "short.py").write_text("def f():\n    return 1\n")
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "0001_initial.py").write_text("\n" * 50 + f"def big():\n{body}\n")

    out = sizes("--module", 8, "--function", 4, tmp_path)

    assert "modules over 8 lines: 1" in out and "long.py" in out
    assert "functions over 4 lines: 1" in out and "C.method" in out
    assert "short.py" not in out and "0001_initial" not in out


def test_the_product_is_measured_by_default():
    out = sizes()
    assert out.startswith("modules over 500 lines:")
    assert "sandboxes/migrations" not in out
