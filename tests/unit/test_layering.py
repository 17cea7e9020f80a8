"""No module reaches up a layer, and no modules or packages import each other (docs/design.md, "Layering");
only ``stores`` touches SQL: every other package reaches storage through the contracts.

The layer table has one source: the fenced block under **Layering** in ``docs/design.md``, read here.
Each line below the first starts with ``→`` and names one layer's packages or modules (the first
component under ``tjobs/``, or the top-level ``sharding`` package), top first; ``apart:`` names the SDK
side, which imports only itself and ``wire``. The README's numbered layer list must say the same.

Every module under ``tjobs/`` and ``sharding/`` is parsed (not imported), and every import in it is
checked: at module level, inside functions and under ``TYPE_CHECKING``, relative ones resolved.

The cycle checks read the imports that run: at module level and inside functions (an import moved into
a function only postpones a cycle: the two modules still need each other when it runs), not those under
``TYPE_CHECKING``, which name a type for the checker and never run. A type-only import cannot reach up
a layer either (the layering check counts it), so a loop through one stays inside a layer.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import deque
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED_PACKAGES = ("tjobs", "sharding")
APART = "apart"


@dataclass(frozen=True)
class Layers:
    ranks: dict[str, int]  # package or module name -> layer index, 0 at the top
    names: list[list[str]]  # the layers' members, top first
    apart: frozenset[str]  # the SDK side


def parse_layers(design: str) -> Layers:
    """The layer table from the first fenced block after the ``**Layering**`` paragraph."""
    after = design.split("**Layering**", 1)[1]
    block = after.split("```", 2)[1]
    names: list[list[str]] = []
    apart: set[str] = set()
    for line in block.splitlines()[1:]:  # the first item of the split is the fence's info string
        text = line.strip().removeprefix("→").strip()
        if not text:
            continue
        members, is_apart = (text.removeprefix(APART + ":"), True) if text.startswith(APART + ":") else (text, False)
        parts = [part.strip() for part in members.split(",")]
        assert all(part.isidentifier() for part in parts), f"design.md layering line {line!r}: names, comma-separated"
        if is_apart:
            apart.update(parts)
        else:
            names.append(parts)
    ranks = {name: index for index, layer in enumerate(names) for name in layer}
    assert len(ranks) == sum(map(len, names)), "a name appears in two layers"
    return Layers(ranks, names, frozenset(apart))


LAYERS = parse_layers((ROOT / "docs" / "design.md").read_text())


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The layer table's name for ``module``: ``tjobs.delivery.urls`` -> ``delivery``,
    ``tjobs.node`` -> ``node``, ``sharding.ids`` -> ``sharding``, the ``tjobs`` package itself -> ``tjobs``."""
    parts = module.split(".")
    if parts[0] != "tjobs":
        return parts[0]
    return parts[1] if len(parts) > 1 else "tjobs"


@functools.cache
def parsed(path: Path) -> ast.Module:
    """Each file is parsed once for every check here."""
    return ast.parse(path.read_text(), str(path))


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# The nodes that may hold statements (an import is one); expressions hold none.
HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


@functools.cache
def import_statements(path: Path) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """Every import statement in the file, anywhere in it, with whether it is under ``if TYPE_CHECKING:`` (in its
    body, not its ``else``). One walk of each file's statements serves every check here: walking each whole tree
    again for each check (and once more for the ``TYPE_CHECKING`` blocks) took most of this module's ~5 s of CPU."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    todo: deque[tuple[ast.AST, bool]] = deque([(parsed(path), False)])
    while todo:
        node, type_only = todo.popleft()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, type_only))
            continue
        guarded = (
            {id(statement) for statement in node.body}
            if isinstance(node, ast.If) and is_type_checking(node.test)
            else set()
        )
        todo.extend(
            (child, type_only or id(child) in guarded)
            for child in ast.iter_child_nodes(node)
            if isinstance(child, HOLDS_STATEMENTS)
        )
    return tuple(found)


def imported_modules(
    module: str, path: Path, known: set[str], *, run_time_only: bool = False
) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import of ours in the file, anywhere in it (with
    ``run_time_only``, leaving out those under ``if TYPE_CHECKING:``, which never run)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, type_only in import_statements(path):
        if run_time_only and type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in SCANNED_PACKAGES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in SCANNED_PACKAGES:
                continue
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                submodule = f"{target}.{alias.name}"
                yield (submodule if submodule in known else target), node.lineno


@functools.cache
def scanned_files() -> dict[str, Path]:
    return {module_name(path): path for package in SCANNED_PACKAGES for path in (ROOT / package).rglob("*.py")}


def describe(unit: str) -> str:
    if unit in LAYERS.apart:
        return f"{unit!r} (apart)"
    return f"layer {LAYERS.ranks[unit] + 1} {unit!r}"


def layering_violations() -> list[str]:
    files = scanned_files()
    known = set(files)
    top_layer = set(LAYERS.names[0])
    violations: list[str] = []
    for module, path in sorted(files.items()):
        importer = unit_of(module)
        for imported, line in sorted(set(imported_modules(module, path, known))):
            target = unit_of(imported)
            if target == importer or target not in LAYERS.ranks.keys() | LAYERS.apart:
                continue  # within one package, or unlisted (test_every_package_is_in_a_layer says so)
            where = f"{module} imports {imported} ({path.relative_to(ROOT)}:{line}; "
            if importer in LAYERS.apart:
                if target not in LAYERS.apart and target != "wire":
                    violations.append(where + f"{describe(importer)} imports only its side and 'wire')")
            elif importer == "tjobs":
                violations.append(where + "the tjobs package itself imports nothing of ours)")
            elif target in LAYERS.apart:
                if importer not in top_layer:
                    violations.append(where + f"{describe(target)} is used only by layer 1)")
            elif LAYERS.ranks[target] < LAYERS.ranks[importer]:
                violations.append(where + f"{describe(target)} above {describe(importer)})")
    return violations


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """Every scanned module -> the scanned modules it imports when it runs (module level and functions)."""
    files = scanned_files()
    known = set(files)
    return {
        module: frozenset(
            imported for imported, _ in imported_modules(module, path, known, run_time_only=True) if imported in known
        )
        - {module}
        for module, path in files.items()
    }


def package_graph(modules: Mapping[str, Set[str]]) -> dict[str, set[str]]:
    """The same imports between the layer table's names (``tjobs.delivery.urls`` counts as ``delivery``)."""
    graph: dict[str, set[str]] = {}
    for module, imported in modules.items():
        graph.setdefault(unit_of(module), set()).update(unit_of(each) for each in imported)
    return {unit: targets - {unit} for unit, targets in graph.items()}


def cycles(graph: Mapping[str, Set[str]]) -> set[frozenset[str]]:
    """The groups of names that reach each other through ``graph`` (its strongly connected parts of two or more)."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
        reach[start] = seen
    return {
        frozenset({name} | {other for other in reach[name] if name in reach.get(other, ())})
        for name in graph
        if name in reach[name]
    }


def describe_cycles(found: set[frozenset[str]]) -> str:
    return "\n" + "\n".join(", ".join(sorted(group)) + " import each other" for group in sorted(found, key=sorted))


def test_no_module_imports_from_a_layer_above_it() -> None:
    violations = layering_violations()
    assert not violations, "\n" + "\n".join(violations)


def test_every_package_is_in_a_layer() -> None:
    units = {unit_of(module) for module in scanned_files()} - {"tjobs"}
    listed = LAYERS.ranks.keys() | LAYERS.apart
    assert sorted(units - listed) == [], "name them in docs/design.md's Layering block"
    assert sorted(listed - units) == [], "docs/design.md's Layering block names what does not exist"


def test_the_readme_lists_the_same_layers() -> None:
    readme = (ROOT / "README.md").read_text()
    _, listing, after = readme.split("The layers, from the top down:", 1)[1].split("\n\n", 3)[:3]
    layers = [re.findall(r"`(\w+)`", line) for line in listing.splitlines() if re.match(r"\d+\. ", line)]
    assert layers == LAYERS.names
    apart = set(re.findall(r"`(\w+)(?:/|\.py)?`", after))
    assert apart >= LAYERS.apart, "the paragraph after the README's list names the SDK side"


def test_the_scan_resolves_relative_and_function_level_imports(tmp_path: Path) -> None:
    """The scanner itself: ``from . import x`` and imports inside functions are seen."""
    package = tmp_path / "tjobs" / "delivery"
    package.mkdir(parents=True)
    source = package / "x.py"
    source.write_text("from . import urls\nfrom ..node import Node\n\ndef f():\n    from tjobs.api import app\n")
    found = dict(imported_modules("tjobs.delivery.x", source, {"tjobs.delivery.urls", "tjobs.api.app"}))
    assert found == {"tjobs.delivery.urls": 1, "tjobs.node": 2, "tjobs.api.app": 5}


def test_the_cycle_graph_leaves_out_type_only_imports(tmp_path: Path) -> None:
    """An import under ``TYPE_CHECKING`` counts for layering, not for cycles; one in a function counts for both."""
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n    from tjobs import a\n"
        "if typing.TYPE_CHECKING:\n    from tjobs import b\nelse:\n    from tjobs import c\n"
        "def f():\n    from tjobs import d\n"
    )
    known = {f"tjobs.{name}" for name in "abcd"}
    assert {name for name, _ in imported_modules("tjobs.x", source, known)} == known
    assert {name for name, _ in imported_modules("tjobs.x", source, known, run_time_only=True)} == {
        "tjobs.c",
        "tjobs.d",
    }


def test_no_modules_import_each_other() -> None:
    """No import cycle between modules, two modules or round a longer loop."""
    found = cycles(import_graph())
    assert not found, describe_cycles(found)


def test_no_packages_import_each_other() -> None:
    """Packages in one layer may import each other, but not both ways (nor round a loop)."""
    found = cycles(package_graph(import_graph()))
    assert not found, describe_cycles(found)


def test_the_cycle_check_finds_loops_of_any_length() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"a"}}
    assert cycles(graph) == {frozenset("abc"), frozenset("ef")}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_the_api_and_the_console_reach_services_not_the_store() -> None:
    """``api`` and ``console`` ask the node's services (``node.tasks``, ``node.app_service``, ``node.shards``,
    ...), never the store: no import of ``tjobs.stores``, no ``.store`` attribute."""
    reaching: list[str] = []
    known = set(scanned_files())
    for module, path in sorted(scanned_files().items()):
        if unit_of(module) not in ("api", "console"):
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and node.attr == "store":
                reaching.append(f"{path.relative_to(ROOT)}:{node.lineno} reads .store")
        for imported, line in imported_modules(module, path, known):
            if unit_of(imported) == "stores":
                reaching.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not reaching, "\n" + "\n".join(reaching)


SQL_LIBRARIES = frozenset({"sqlalchemy", "alembic", "asyncmy", "aiosqlite", "pymysql"})
SQL_STORE_MODULES = re.compile(
    r"tjobs\.stores\.(sql|sql_\w+|sqlalchemy|schema|schema_\w+|layout_record|migrations)(\.|$)"
)


def sql_imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(imported, line)`` for each import of a SQL library or of the SQL store's own modules (its
    package, ``sql_*``, the schema and its ``schema_*`` parts, the layout record, the migrations), anywhere
    in the file."""
    for imported, line in imported_modules(module, path, known):
        if SQL_STORE_MODULES.match(imported):
            yield imported, line
    for node, _ in import_statements(path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif not node.level and node.module:
            names = [node.module]
        else:
            continue
        yield from ((name, node.lineno) for name in names if name.split(".")[0] in SQL_LIBRARIES)


def test_only_the_stores_reach_sql() -> None:
    """Every package but ``stores`` (the hot tier's DB poll, shard moves, the CLI, ...) reaches storage
    through :mod:`tjobs.stores.contracts`: none imports SQLAlchemy, a driver, or a SQL module of the store."""
    files = scanned_files()
    known = set(files)
    reaching = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for module, path in sorted(files.items())
        if unit_of(module) != "stores"
        for imported, line in sorted(set(sql_imports(module, path, known)))
    ]
    assert not reaching, "\n" + "\n".join(reaching)


def test_the_sql_scan_sees_libraries_and_the_sql_store_modules(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from sqlalchemy.ext.asyncio import AsyncEngine\nimport aiosqlite\nfrom tjobs.stores import sqlalchemy\n"
        "def f():\n    from tjobs.stores.schema import hot_changes_table\n"
        "from tjobs.stores.contracts import HotChangeLog\nfrom ..stores.sql import hot_changes\n"
        "from tjobs.stores.schema_alerts import ALERT_RULES_TABLE\n"
    )
    known = {"tjobs.stores.sqlalchemy", "tjobs.stores.sql.hot_changes", "tjobs.stores.contracts"}
    assert dict(sql_imports("tjobs.hot_tier.x", source, known)) == {
        "sqlalchemy.ext.asyncio": 1,
        "aiosqlite": 2,
        "tjobs.stores.sqlalchemy": 3,
        "tjobs.stores.schema": 5,
        "tjobs.stores.sql.hot_changes": 7,
        "tjobs.stores.schema_alerts": 8,
    }
