"""The product's import graph (docs/architecture.md, the rooms): no circle, and no
arrow that runs upward through the layers.

The graph is read from the source with `ast`, not by importing it. Every import
statement counts: at the top of a module, inside a function, and under
`if TYPE_CHECKING:` too, since a circle only the type checker sees is still a
circle in the design. Importing `a.b.c` names the module `a.b.c`, not its parent
packages (Python runs their `__init__` first, but that is no arrow of the design).
Dotted paths in strings (settings, django-q2 task names) are not imports.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("sandboxes", "paperclip_console")

# Bottom to top. A module may import its own layer and the layers below; a
# module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The ground floor: plain functions over plain data, importing nothing of
    # the project but each other (tests/rules/test_ground_floor.py: nor Django).
    ("pure rules", ("sandboxes.rules",)),
    ("vocabulary", ("sandboxes.models.choices", "paperclip_console.env")),
    ("provider clients", ("sandboxes.providers",)),
    ("models", ("sandboxes.models",)),
    (
        "rooms over the models",
        (
            "sandboxes.audit",
            "sandboxes.content_store",
            "sandboxes.costs",
            "sandboxes.explain",
            "sandboxes.ingest",
            "sandboxes.keep_links",
            "sandboxes.logging",
            "sandboxes.mirror",
            "sandboxes.notifications",
            "sandboxes.object_storage",
            "sandboxes.paging",
            "sandboxes.paperclip",
            "sandboxes.pg_json",
            "sandboxes.proof",
            "sandboxes.read_ahead",
            "sandboxes.receipts",
            "sandboxes.roles",
            "sandboxes.salvage_archive",
            "sandboxes.salvage_restore",
            "sandboxes.staging",
        ),
    ),
    ("reconciler", ("sandboxes.reconciler",)),
    # A channel's admin actions are operator actions: the same permission
    # check, refusals and storable text as sandboxes.actions.
    (
        "operator actions",
        (
            "sandboxes.actions",
            "sandboxes.bulk",
            "sandboxes.keeping",
            "sandboxes.notifications.channels",
            "sandboxes.notifications.owner_mail",
            "sandboxes.people",
            "sandboxes.policy",
            "sandboxes.run_now",
            "sandboxes.token_actions",
        ),
    ),
    (
        "pages, API and commands",
        (
            "sandboxes.admin",
            "sandboxes.api",
            "sandboxes.converters",
            "sandboxes.forms",
            "sandboxes.management",
            "sandboxes.metrics",
            "sandboxes.middleware",
            "sandboxes.templatetags",
            "sandboxes.views",
        ),
    ),
    (
        "wiring",
        (
            "sandboxes.apps",
            "sandboxes.checks",
            "sandboxes.migrations",
            "sandboxes.urls",
            "paperclip_console",
        ),
    ),
)


def modules(root: Path = REPO, packages=PACKAGES) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package)} of every module under `packages`."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known) -> list[str]:
    """The dotted names an import statement asks for (a module, or a name in one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    # `from a import b` names the module a.b if there is one, else a name in a.
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def imports_of(name: str, path: Path, is_package: bool, known) -> set[str]:
    """The project modules `name` imports, wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target in _targets(node, name, is_package, known):
            while target and target not in known:  # `import a.b.name`: the module a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = REPO, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports_of(name, path, pkg, known) for name, (path, pkg) in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int | None:
    if module in PACKAGES:  # the packages themselves: what the wiring imports
        return len(LAYERS) - 1
    best, depth = None, -1
    for level, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = level, len(prefix)
    return best


def upward(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            below, above = layer_of(source), layer_of(target)
            if below is not None and above is not None and above > below:
                arrows.append(f"{source} ({LAYERS[below][0]}) -> {target} ({LAYERS[above][0]})")
    return arrows


# --- the reader, on a small package of its own ------------------------------------------


@pytest.fixture
def package(tmp_path):
    def write(files: dict[str, str]) -> dict[str, set[str]]:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return import_graph(tmp_path, ("pkg",))

    return write


def test_it_reads_every_kind_of_import(package):
    graph = package(
        {
            "pkg/__init__.py": "from .a import thing\n",
            "pkg/a.py": "import os\nfrom pkg import b\nfrom . import c as see\n",
            "pkg/b.py": "from .sub.d import name\nimport pkg.sub.e\n",
            "pkg/c.py": "def later():\n    from .a import thing\n",
            "pkg/sub/__init__.py": "from . import d\nfrom ..c import x\n",
            "pkg/sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from pkg.b import B\n",
            "pkg/sub/e.py": "from pkg.sub.d import name, other\n",
        }
    )
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b", "pkg.c"},  # `os` is not the project's
        "pkg.b": {"pkg.sub.d", "pkg.sub.e"},
        "pkg.c": {"pkg.a"},  # inside a function
        "pkg.sub": {"pkg.sub.d", "pkg.c"},
        "pkg.sub.d": {"pkg.b"},  # under TYPE_CHECKING
        "pkg.sub.e": {"pkg.sub.d"},
    }


def test_it_finds_a_circle_through_several_modules(package):
    graph = package(
        {
            "pkg/__init__.py": "",
            "pkg/plan.py": "from .worker import Worker\n",
            "pkg/worker.py": "def f():\n    from .steps import stop\n",
            "pkg/steps.py": "from . import plan\n",
            "pkg/alone.py": "from .plan import x\n",
        }
    )
    assert circles(graph) == [["pkg.plan", "pkg.steps", "pkg.worker"]]


# --- the product --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def product():
    return import_graph()


def test_the_product_graph_is_read(product):
    # A reader that found nothing would pass every test below.
    assert len(product) > 100
    assert "sandboxes.reconciler.steps" in product["sandboxes.reconciler.machine"]
    assert sum(len(targets) for targets in product.values()) > 300


def test_no_module_imports_itself_back(product):
    assert circles(product) == []


def test_every_module_has_a_layer(product):
    assert [name for name in sorted(product) if layer_of(name) is None] == []


def test_no_import_runs_upward(product):
    assert upward(product) == []
