"""sandboxes/rules/ is the ground floor: it imports the standard library and
itself, never Django, a model or the database (docs/architecture.md, the rooms)."""

import ast
import sys
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "sandboxes" / "rules"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(RULES.glob("*.py")), ids=lambda p: p.name)
def test_a_rule_imports_only_the_standard_library_and_other_rules(path):
    foreign = {
        name
        for name in imported(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith("sandboxes.rules")
    }
    assert not foreign, f"{path.name} imports {sorted(foreign)}"
