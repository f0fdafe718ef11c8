"""The layers import one way, no module imports itself back through others, and each
folder holds what its name says (issue 39).

Read from the source with `ast` (every import statement, at module level, inside
functions and under `if TYPE_CHECKING:` alike: a type-only arrow is still an arrow):

    ranking <- simulators
    ranking <- stream <- telemetry <- producers <- selection <- workers <- serve <- harness
        <- rankstream (CLI, demos, evals)

`rankstream.client` (an engine's HTTP client) imports nothing but itself.
`stream` and `simulators` are siblings: neither imports the other; `telemetry`,
`producers` and `selection` import no simulator. The client libraries stay where
docs/architecture.md puts them: `ranking` never imports Kafka, Redis, Prometheus or pyarrow;
`simulators` none of the services; nothing above `stream` imports Kafka or Redis (their
exceptions are translated inside `stream`).

And the rooms (issue 39): outside `rankstream/commands/` (which mirrors the CLI's words)
no two modules share a file name; `workers/` holds the long-running processes, their
options beside each, and the runtime they share, nothing else; interleaving lives in
three modules (the algorithm, the race, the evaluation); serve and the simulator ask the
one resolver what serves; a benchmark lives in `harness/`, its command only parses
arguments; every package's docstring names only modules it holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_deprecated_names import MOVED

ROOT = Path(__file__).resolve().parents[1]
# folder -> the installed package it becomes (pyproject.toml's package-dir)
FOLDERS = {
    "ranking": "rankstream.ranking",
    "simulators": "rankstream.simulators",
    "stream": "rankstream.stream",
    "telemetry": "rankstream.telemetry",
    "producers": "rankstream.producers",
    "selection": "rankstream.selection",
    "workers": "rankstream.workers",
    "serve": "rankstream.serve",
    "harness": "rankstream.harness",
    "client": "rankstream.client",
    "rankstream": "rankstream",
}
# layer -> the layers it may import (itself included)
_BELOW_WORKERS = {"ranking", "simulators", "stream", "telemetry", "producers", "selection"}
ALLOWED = {
    "ranking": {"ranking"},
    "simulators": {"ranking", "simulators"},
    "stream": {"stream"},
    "telemetry": {"stream", "telemetry"},
    "producers": {"ranking", "stream", "telemetry", "producers"},
    "selection": {"ranking", "stream", "telemetry", "producers", "selection"},
    "workers": _BELOW_WORKERS | {"workers"},
    "serve": _BELOW_WORKERS | {"workers", "serve"},
    "harness": _BELOW_WORKERS | {"workers", "serve", "harness"},
    "client": {"client"},  # an engine's HTTP client: nothing of the server
    "rankstream": set(FOLDERS),
}
# The sanctioned crossings: the record type of the stream, defined with the learners
# whose input it is (`ranking.triplets`: numpy only), is encoded and stored by `stream`;
# the paper's phi width (`rankstream.ranking.DEFAULT_PHI_DIM`, no import at all) is the
# deployment's default width and the simulator's.
CROSSINGS = {("stream", "rankstream.ranking.triplets"), ("stream", "rankstream.ranking")}
# layer -> third-party top-level names it must never import
FORBIDDEN = {
    "ranking": {"kafka", "redis", "prometheus_client", "pyarrow"},
    "simulators": {"kafka", "redis", "prometheus_client"},
    "telemetry": {"kafka", "redis"},
    "producers": {"kafka", "redis"},
    "selection": {"kafka", "redis"},
    "workers": {"kafka", "redis"},
}


def module_files() -> Iterator[tuple[str, str, Path]]:
    """(layer, dotted module name, path) of every source module."""
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield folder, ".".join([package, *parts]), path


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name the file imports (`from a import b` gives a and a.b)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".")
                keep = len(package) - node.level + (1 if is_package else 0)
                base = ".".join(package[:keep] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


MODULES = {name: (layer, path) for layer, name, path in module_files()}


def layer_of(module: str) -> str | None:
    """The layer a rankstream module belongs to (the longest matching package)."""
    best = None
    for folder, package in FOLDERS.items():
        if (module == package or module.startswith(package + ".")) and (
            best is None or len(package) > len(FOLDERS[best])
        ):
            best = folder
    return best


def internal_imports(module: str) -> set[str]:
    """The rankstream modules this module imports (names resolved to real modules)."""
    _, path = MODULES[module]
    found = set()
    for name in imported_names(path, module):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module and name.startswith("rankstream"):
            found.add(name)
    return found


def test_the_source_tree_is_found() -> None:
    layers = {layer for layer, _ in MODULES.values()}
    assert layers == set(FOLDERS)
    assert "rankstream.ranking.online" in MODULES
    assert "rankstream.workers.online_worker" in MODULES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    layer, path = MODULES[module]
    upward = sorted(
        f"{name} ({layer_of(name)})"
        for name in internal_imports(module)
        if name != "rankstream"  # the root package: __version__
        and layer_of(name) not in ALLOWED[layer]
        and (layer, name) not in CROSSINGS
    )
    assert not upward, f"{module} ({layer}) imports upward: {upward}"
    banned = {n.split(".")[0] for n in imported_names(path, module)} & FORBIDDEN.get(layer, set())
    assert not banned, f"{module} ({layer}) imports {sorted(banned)}"


def test_no_import_cycles() -> None:
    graph = {module: internal_imports(module) for module in MODULES}
    # a package's __init__ importing its own submodules is not a cycle of meaning
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    cycles = strongly_connected(graph)
    assert not cycles, f"import cycles: {cycles}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module (each a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser itself: a planted upward import and a cycle are caught."""
    planted = tmp_path / "x.py"
    planted.write_text("def f():\n    from rankstream.workers.online_worker import OnlineWorker\n")
    assert "rankstream.workers.online_worker" in imported_names(planted, "rankstream.ranking.x")
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


LONG_FUNCTION_LINES = 60


@pytest.mark.parametrize(
    "module",
    sorted(
        m
        for m, (layer, _) in MODULES.items()
        if layer in ("workers", "producers", "selection") or ".commands." in m
    ),
)
def test_worker_handler_and_command_functions_stay_short(module: str) -> None:
    """A function of a worker, handler or command module fits on a screen (<= 60 lines)."""
    _, path = MODULES[module]
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > LONG_FUNCTION_LINES  # type: ignore[operator]
    ]
    assert not long, f"{module}: {long}"


# --- the rooms (issue 39) -------------------------------------------------------------
# Deprecated re-exports kept at their old paths for one release (test_deprecated_names.py)
DEPRECATED = set(MOVED)
# workers/: the long-running processes (each may have `<process>_options` and
# `<process>_<part>` modules beside it) and the runtime they share
PROCESSES = {
    "online_worker", "scaleout", "batch_worker", "evaluator", "click_join", "recorder",
    "simulator", "direct_replay",
}  # fmt: skip
RUNTIME = {"runtime", "runtime_options", "options", "checkpoint", "resilience", "deadletters"}


def product_modules() -> dict[str, Path]:
    """Every product module but a package's `__init__`, the CLI's command modules and the
    deprecated re-exports."""
    return {
        name: path
        for name, (_, path) in MODULES.items()
        if path.name != "__init__.py" and ".commands." not in name and name not in DEPRECATED
    }


def test_no_two_product_modules_share_a_file_name() -> None:
    by_name: dict[str, list[str]] = {}
    for name, path in product_modules().items():
        by_name.setdefault(path.name, []).append(name)
    shared = {file: names for file, names in by_name.items() if len(names) > 1}
    assert not shared, f"one file name, several modules: {shared}"


def test_workers_holds_processes_their_options_and_the_runtime_only() -> None:
    stems = {
        name.rpartition(".")[2]
        for name in product_modules()
        if name.startswith("rankstream.workers.")
    }
    assert stems >= PROCESSES, f"a process is missing: {sorted(PROCESSES - stems)}"
    stray = sorted(
        stem
        for stem in stems - PROCESSES - RUNTIME
        if not any(stem.startswith(p + "_") for p in PROCESSES)
    )
    assert not stray, f"not a process, its part or the runtime, so not in workers/: {stray}"
    lonely = sorted(
        s for s in stems if s.endswith("_options") and s.removesuffix("_options") not in stems
    )
    assert not lonely, f"options beside no process of that name: {lonely}"


INTERLEAVING_HOMES = {
    "rankstream.ranking.interleaving",  # the algorithm (team draft, multileave)
    "rankstream.selection.click_race",  # the race and the drafting at serve time
    "rankstream.evals.interleaving_eval",  # the evaluation (`rankstream eval interleaving`)
}


def test_interleaving_lives_in_three_modules_with_distinct_names() -> None:
    named = {n for n in product_modules() if "interleav" in n.rpartition(".")[2]}
    assert named <= INTERLEAVING_HOMES, f"interleaving outside its homes: {named}"
    users = {
        n for n in product_modules() if "rankstream.ranking.interleaving" in internal_imports(n)
    }
    assert users <= INTERLEAVING_HOMES, f"the algorithm drafted outside its homes: {users}"
    assert len({h.rpartition(".")[2] for h in INTERLEAVING_HOMES}) == len(INTERLEAVING_HOMES)


def test_serve_and_the_simulator_ask_the_one_resolver() -> None:
    resolver = "rankstream.selection.what_serves"
    for user in ("rankstream.serve.registry", "rankstream.workers.simulator"):
        assert resolver in internal_imports(user), f"{user} decides what serves on its own"
    defining = [
        n
        for n, path in product_modules().items()
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "serves_now"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert defining == [resolver]


def test_a_benchmark_lives_in_the_harness_and_its_command_only_parses() -> None:
    for name, (_, path) in MODULES.items():
        if ".commands.bench." not in name or path.name == "__init__.py":
            continue
        public = [
            node.name
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        ]
        assert set(public) <= {"add_arguments", "run"}, f"{name} holds a benchmark: {public}"


def test_every_package_docstring_names_only_modules_it_holds() -> None:
    """A package's first docstring is what a newcomer reads: every bare name it cites in
    backticks that names a module somewhere (`scoring`, `errors`) is a module of that
    package or a package of its own (a parameter, `url`, is no module anywhere)."""
    import re

    stems = {name.rpartition(".")[2] for name in MODULES}
    for name, (_, path) in MODULES.items():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"{name} has no docstring"
        for cited in re.findall(r"`([a-z][a-z_]*)`", doc):
            if cited not in stems or f"{name}.{cited}" in MODULES:
                continue
            here = f"rankstream.{cited}" in MODULES or (ROOT / cited / "__init__.py").is_file()
            assert here, f"{name}'s docstring cites `{cited}`, not a module of it"
