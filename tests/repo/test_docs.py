"""docs/ describes the code as it is: every function, constant and test that
docs/rules.md (and docs/architecture.md) names exists, and rules.md describes
every candidate kind and every hold code."""

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from sandboxes.models.choices import HoldCode, RetirementKind

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs" / "rules.md", REPO / "docs" / "architecture.md"]

# `sandboxes.rules.proof:approval_for` — a module and an attribute path in it.
CODE_REF = re.compile(r"`((?:sandboxes|paperclip_console)(?:\.\w+)+):([\w.]+)`")
# `tests/reconciler/test_machine.py::test_one_function_calls_destroy`
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
# `sandboxes/reconciler/machine.py` — a file named in the prose.
FILE_REF = re.compile(r"`((?:sandboxes|tests|paperclip_console|templates)/[\w/.]*\w)(?::\w+)?`")


def refs(pattern: re.Pattern, docs=DOCS) -> list[tuple[str, ...]]:
    return sorted({m.groups() for doc in docs for m in pattern.finditer(doc.read_text())})


@cache
def functions_in(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
    return names


def test_the_docs_name_things_to_check():
    # A parser that matched nothing would pass every test below.
    assert len(refs(CODE_REF, DOCS[:1])) >= 25
    assert len(refs(TEST_REF, DOCS[:1])) >= 50


@pytest.mark.parametrize(("module", "attribute"), refs(CODE_REF))
def test_every_function_the_docs_name_exists(module, attribute):
    obj = importlib.import_module(module)
    for part in attribute.split("."):
        assert hasattr(obj, part), f"{module}:{attribute} — no {part!r}"
        obj = getattr(obj, part)


@pytest.mark.parametrize(("path", "name"), refs(TEST_REF))
def test_every_test_the_docs_name_exists(path, name):
    assert (REPO / path).is_file(), f"{path} does not exist"
    assert name.startswith("test_") and name in functions_in(path), f"{path} has no {name}"


@pytest.mark.parametrize("path", sorted({p for (p,) in refs(FILE_REF)}))
def test_every_file_the_docs_name_exists(path):
    assert (REPO / path).exists(), f"{path} does not exist"


def test_rules_describe_every_candidate_kind_and_hold():
    text = DOCS[0].read_text()
    missing = [c.value for c in [*RetirementKind, *HoldCode] if f"`{c.value}`" not in text]
    assert not missing, f"docs/rules.md does not describe {missing}"
