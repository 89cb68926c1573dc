"""Imports point one way: cli -> arenad -> events (CONTRIBUTING.md, "Layering").

Every module of events/, arenad/ and cli.py is parsed with ``ast``; every import in it counts,
wherever it sits (top level, inside a function, under ``if TYPE_CHECKING``), because a lazy
import is still a dependency. No cycle is allowed between modules, nor between the children of
any package (the packages are the layers). Each rule names the modules it governs and what
they must not import; a rule that governs no module fails too, so a moved package cannot make
it vacuous.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

REPO = Path(__file__).resolve().parents[1]


class Import(msgspec.Struct, frozen=True):
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted (``from a import b`` gives ``a`` and ``a.b``)
    line: int

    def __str__(self) -> str:
        path = self.module.replace(".", "/")
        return f"{path}.py:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    files = [REPO / "cli.py"]
    for package in ("arenad", "events"):
        files += sorted((REPO / package).rglob("*.py"))
    return files


def imports_of(path: Path) -> Iterator[Import]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # A relative import: resolve it against the importing package.
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield Import(module, base, node.lineno)
            for alias in node.names:
                # ``from arenad import ledger`` imports the arenad.ledger package.
                yield Import(module, f"{base}.{alias.name}", node.lineno)


ALL_IMPORTS = [imp for path in source_files() for imp in imports_of(path)]
ALL_MODULES = sorted({module_name(p) for p in source_files()})


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(governed: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """One entry per offending import statement (its first forbidden target)."""
    found: dict[tuple[str, int], str] = {}
    for imp in ALL_IMPORTS:
        if within(imp.module, governed) and within(imp.target, forbidden):
            found.setdefault((imp.module, imp.line), str(imp))
    return list(found.values())


def assert_governs_something(governed: tuple[str, ...]) -> None:
    assert any(within(m, governed) for m in ALL_MODULES), f"no module under {governed}"


def test_the_parser_sees_every_kind_of_import() -> None:
    # A guard on the scanner itself: a lazy import inside a function body and one under
    # ``if TYPE_CHECKING`` must be seen.
    lazy = {i.target for i in ALL_IMPORTS if i.module == "arenad.arms.base"}
    assert "arenad.recovery.capture" in lazy
    typing_only = {i.target for i in ALL_IMPORTS if i.module == "arenad.app"}
    assert "arenad.daemon.daemon" in typing_only


def test_the_cli_has_one_door() -> None:
    # cli.py is wiring: everything of arenad it uses comes through arenad.app.
    ours = {
        i.target.partition(".")[0] + "." + i.target.split(".")[1]
        for i in ALL_IMPORTS
        if i.module == "cli" and i.target.startswith("arenad.")
    }
    assert ours == {"arenad.app"}


def test_only_the_cli_imports_the_application_layer() -> None:
    found = [
        str(imp)
        for imp in ALL_IMPORTS
        if imp.module != "cli"
        and not within(imp.module, ("arenad.app",))
        and within(imp.target, ("arenad.app",))
    ]
    assert found == []


def _module_of(target: str) -> str | None:
    """The project module an import target names (``a.b.name`` -> ``a.b``)."""
    while target:
        if target in MODULE_SET:
            return target
        target = target.rpartition(".")[0]
    return None


MODULE_SET = set(ALL_MODULES)


def test_no_import_cycles() -> None:
    # Every import counts, lazy ones included: a cycle is a design cycle even when it
    # happens to load. (A package's __init__ importing its own modules is not a cycle of
    # the modules below it; edges from a module to its own package are left out.)
    graph: dict[str, set[str]] = {m: set() for m in ALL_MODULES}
    for imp in ALL_IMPORTS:
        target = _module_of(imp.target)
        if target is None or target == imp.module or within(imp.module, (target,)):
            continue
        graph[imp.module].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
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
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert cycles == []


# The cell modules recovery may read: pure data and checks, below the captures. (The
# package itself is left out: as a prefix it would match its every module.)
CELL_BELOW_RECOVERY = ("arenad.cell.kinds", "arenad.cell.bounds")
CELL_ABOVE_RECOVERY = tuple(
    m
    for m in ALL_MODULES
    if within(m, ("arenad.cell",)) and m not in ("arenad.cell", *CELL_BELOW_RECOVERY)
)

# What each package sits on. A lower layer never imports a higher one.
LOWER_MUST_NOT_IMPORT: dict[str, tuple[str, ...]] = {
    # Process groups, the wrapper and the executors know runs, not cells or arms, nor the
    # workspaces and verdicts built on them (a step's result crosses as the seam's NodeFile).
    "arenad.runs": (
        "arenad.daemon",
        "arenad.arms",
        "arenad.ledger",
        "arenad.cell",
        "arenad.verdict",
        "arenad.materialize",
        "arenad.executors",
        "arenad.containers",
    ),
    # The engine's client and reaper sit on the process primitives and the sandbox's
    # container naming; the executors sit on them.
    "arenad.containers": ("arenad.daemon", "arenad.arms", "arenad.executors", "arenad.cell"),
    "arenad.verdict": ("arenad.daemon", "arenad.arms", "arenad.ledger", "arenad.cell"),
    "arenad.sandbox": (
        "arenad.daemon",
        "arenad.arms",
        "arenad.ledger",
        "arenad.runs",
        "arenad.containers",
        "arenad.executors",
    ),
    "arenad.materialize": ("arenad.daemon", "arenad.arms", "arenad.ledger", "arenad.cell"),
    "arenad.ingest": ("arenad.daemon", "arenad.arms", "arenad.ledger", "arenad.cell"),
    # Recovery reads the arm-kinds table (what a kind's store figures are) and the folds'
    # bounds, both pure and in cell's floor below it; never the cell machine or its writer.
    "arenad.recovery": ("arenad.daemon", "arenad.arms", "arenad.ledger", *CELL_ABOVE_RECOVERY),
    # The cell's machine, kinds table and folds sit below everything that runs a cell.
    "arenad.cell": (
        "arenad.daemon",
        "arenad.arms",
        "arenad.ledger",
        "arenad.recovery",
        "arenad.runs",
        "arenad.executors",
    ),
    "arenad.arms": ("arenad.daemon", "arenad.ledger"),
    "arenad.readmodels": ("arenad.daemon", "arenad.arms", "arenad.ledger"),
}


def test_recovery_reads_of_the_cell_only_what_sits_below_it() -> None:
    # A guard on the split rule: the cell's machine and writer stay forbidden to recovery.
    assert set(CELL_BELOW_RECOVERY) <= set(ALL_MODULES)
    assert {"arenad.cell.machine", "arenad.cell.writer"} <= set(CELL_ABOVE_RECOVERY)


@pytest.mark.parametrize("package", sorted(LOWER_MUST_NOT_IMPORT))
def test_lower_layers_do_not_import_higher_ones(package: str) -> None:
    assert_governs_something((package,))
    assert violations((package,), LOWER_MUST_NOT_IMPORT[package]) == []


def test_events_import_only_msgspec_the_stdlib_and_events() -> None:
    assert_governs_something(("events",))
    outside = [
        str(imp)
        for imp in ALL_IMPORTS
        if within(imp.module, ("events",))
        and imp.target.partition(".")[0] not in sys.stdlib_module_names
        and not within(imp.target, ("msgspec", "events"))
    ]
    assert outside == []


def test_nothing_below_the_cli_imports_it() -> None:
    assert violations(("arenad", "events"), ("cli",)) == []


# The event store is generic over events: it knows streams, versions and bytes, nothing of
# cells, their machine, their read model, or anything built on top of them.
STORE_MUST_NOT_IMPORT = (
    "arenad.cell",
    "arenad.daemon",
    "arenad.arms",
    "arenad.readmodels",
    "arenad.ledger",
    "arenad.home",
    "arenad.app",
    "events.cell",
    "events.specs",
)


def test_the_store_knows_nothing_of_cells() -> None:
    assert_governs_something(("arenad.store",))
    assert violations(("arenad.store",), STORE_MUST_NOT_IMPORT) == []


# The cell's pure half: its machine and its retry policy. Its writer appends through the
# EventStore interface (arenad.store.base) and nothing more concrete.
CELL_PURE = (
    "arenad.cell.machine",
    "arenad.cell.retry",
    "arenad.cell.overdue",
    "arenad.cell.supervisor_figures",
)


def test_the_cell_machine_knows_nothing_of_sql() -> None:
    assert_governs_something(CELL_PURE)
    sql = ("sqlite3", "aiosqlite", "arenad.store", "arenad.readmodels", "arenad.home")
    assert violations(CELL_PURE, sql) == []


def test_the_cell_writer_knows_only_the_store_interface() -> None:
    assert_governs_something(("arenad.cell.writer",))
    concrete = ("sqlite3", "aiosqlite", "arenad.store.sqlite", "arenad.readmodels", "arenad.home")
    assert violations(("arenad.cell.writer",), concrete) == []


# I/O, clocks, randomness and concurrency: what a pure fold or projection never touches
# (time arrives inside events; CONTRIBUTING.md, "Layering").
IMPURE = (
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "stat",
    "fcntl",
    "mmap",
    "time",
    "datetime",
    "random",
    "secrets",
    "subprocess",
    "socket",
    "signal",
    "threading",
    "asyncio",
    "sqlite3",
    "aiosqlite",
    "watchdog",
    "arenad.clock",
    "arenad.store",
    "arenad.home",
    "arenad.runs.commands",
    "arenad.daemon",
)


def test_the_cell_machine_is_pure() -> None:
    assert violations(CELL_PURE, IMPURE) == []


# Arms and ingestion produce events; the ledger consumes them. The recovery capture (the
# agent's own store) and the proposer capture (shot receipts, transcripts) are ingestion too.
PRODUCERS = ("arenad.arms", "arenad.ingest", "arenad.recovery", "arenad.proposer")


@pytest.mark.parametrize("producer", PRODUCERS)
def test_arms_and_ingestion_know_nothing_of_the_ledger(producer: str) -> None:
    assert_governs_something((producer,))
    assert violations((producer,), ("arenad.ledger",)) == []


# The ledger is a pure projection of the log (arenad/ledger/project.py: "no file, store,
# clock or random source") behind its I/O edges: service.py, which opens the store and
# writes the file, and workers.py, the processes that project batches side by side.
# batch.py, which reads a batch of cells' streams, has its own rule below.
LEDGER_IO_EDGES = ("arenad.ledger.service", "arenad.ledger.workers")
LEDGER_BATCH = "arenad.ledger.batch"
LEDGER_MODULES = [m for m in ALL_MODULES if m.startswith("arenad.ledger.")]
# Known violations, reported rather than allowed: each entry must really violate the rule
# (strict xfail), so it is removed the day the module is fixed.
LEDGER_KNOWN_IMPURE: dict[str, str] = {}


def ledger_params() -> list[object]:
    params: list[object] = []
    for module in LEDGER_MODULES:
        if module in LEDGER_IO_EDGES or module == LEDGER_BATCH:
            continue
        reason = LEDGER_KNOWN_IMPURE.get(module)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(module, marks=marks, id=module.rpartition(".")[2]))
    return params


def test_the_ledger_has_its_io_edge_and_pure_modules() -> None:
    assert set(LEDGER_IO_EDGES) <= set(LEDGER_MODULES)
    assert "arenad.ledger.project" in LEDGER_MODULES
    assert set(LEDGER_KNOWN_IMPURE) <= set(LEDGER_MODULES)


@pytest.mark.parametrize("module", ledger_params())
def test_the_ledger_projection_is_pure_outside_its_io_edge(module: str) -> None:
    assert violations((module,), IMPURE) == []


def test_a_ledger_batch_reads_through_the_store_interface_alone() -> None:
    # It awaits EventStore reads and decodes their rows; nothing else it may touch is
    # impure: no file, clock, process or concrete store.
    store_interface = ("arenad.store.base", "arenad.store.rows")
    concrete = tuple(
        m for m in ALL_MODULES if m.startswith("arenad.store.") and m not in store_interface
    )
    forbidden = (*(m for m in IMPURE if m != "arenad.store"), *concrete)
    assert LEDGER_BATCH in ALL_MODULES
    assert violations((LEDGER_BATCH,), forbidden) == []


def test_the_ledger_projection_loads_none_of_the_runtime() -> None:
    # Importing a module runs its package's __init__ first: a pure fold kept in a package
    # of I/O (arenad.arms registers every arm) made the projection load the daemon's
    # machinery, watchdog and the store with it (0.3 s at every start, and in every
    # worker process of a projection). The rule is checked on what Python really loads.
    code = "import sys, arenad.ledger.project; print(*sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    runtime = ("arenad.arms", "arenad.runs", "arenad.ingest", "arenad.daemon", "arenad.store")
    io = ("watchdog", "aiosqlite", "sqlite3", "asyncio", "subprocess")
    loaded = [m for m in done.stdout.split() if within(m, (*runtime, *io))]
    assert loaded == []


def test_the_ledger_does_not_reach_into_the_daemon() -> None:
    # The ledger replays a log any daemon (or none) wrote; it shares the cell's append rules
    # (arenad.cell.writer) with the daemon, not the daemon itself.
    assert violations(("arenad.ledger",), ("arenad.daemon",)) == []


# The report has the ledger's shape: pure statistics, projection and rendering (no file,
# store, clock or random source: its bootstrap brings its own PRNG) behind one I/O edge.
REPORT_IO_EDGE = "arenad.report.service"
REPORT_MODULES = [m for m in ALL_MODULES if within(m, ("arenad.report",))]


def test_the_report_has_its_io_edge_and_pure_modules() -> None:
    assert REPORT_IO_EDGE in REPORT_MODULES
    assert {"arenad.report.stats", "arenad.report.project", "arenad.report.render"} <= set(
        REPORT_MODULES
    )


@pytest.mark.parametrize("module", [m for m in REPORT_MODULES if m != REPORT_IO_EDGE])
def test_the_report_is_pure_outside_its_io_edge(module: str) -> None:
    # Matched exactly: the package's __init__ must not be excused by its edge's imports.
    impure = [
        str(imp) for imp in ALL_IMPORTS if imp.module == module and within(imp.target, IMPURE)
    ]
    assert impure == []


# The campaign folds: spend and its cap are projections of the log like the ledger's; their
# I/O half (reading the events they need) is arenad.readmodels.campaigns.
CAMPAIGN_FOLDS = ("arenad.budget.spend", "arenad.budget.cap")


def test_the_spend_and_budget_folds_are_pure() -> None:
    assert_governs_something(CAMPAIGN_FOLDS)
    assert violations(CAMPAIGN_FOLDS, IMPURE) == []


# The view too: a pure fold of a cell's streams, its diff lines and its pages (no file,
# store or clock) behind two I/O edges: the app (server.py: store reads, the follower)
# and the bind (service.py). The live progress fold and the run-cost rule are pure.
VIEW_IO_EDGES = ("arenad.view.server", "arenad.view.service")
VIEW_MODULES = [m for m in ALL_MODULES if within(m, ("arenad.view",))]
LIVE_FOLDS = ("arenad.readmodels.progress", "arenad.cell.spend")


def test_the_view_has_its_io_edges_and_pure_modules() -> None:
    assert set(VIEW_IO_EDGES) <= set(VIEW_MODULES)
    assert {"arenad.view.cell", "arenad.view.diff", "arenad.view.pages"} <= set(VIEW_MODULES)
    assert set(LIVE_FOLDS) <= set(ALL_MODULES)


@pytest.mark.parametrize(
    "module", [*(m for m in VIEW_MODULES if m not in VIEW_IO_EDGES), *LIVE_FOLDS]
)
def test_the_view_and_the_live_folds_are_pure(module: str) -> None:
    impure = [
        str(imp) for imp in ALL_IMPORTS if imp.module == module and within(imp.target, IMPURE)
    ]
    assert impure == []


# -- packages ------------------------------------------------------------------------------
# A module-level graph without cycles can still hide one between packages: a module of A
# imports B, one of B imports C, one of C imports A, each a different module. Packages are
# the units the layers are drawn in, so the same rule holds one level up, in every package:
# its direct children (sub-packages and modules) form no cycle.
PACKAGES = sorted(
    {"", *(m for m in ALL_MODULES if (REPO / m.replace(".", "/") / "__init__.py").exists())}
)


def child_of(package: str, module: str) -> str | None:
    """The direct child of ``package`` that holds ``module`` (None: outside it)."""
    if package and not within(module, (package,)):
        return None
    rest = module[len(package) + 1 :] if package else module
    if not rest:
        return None
    return f"{package}.{rest.split('.')[0]}" if package else rest.split(".")[0]


def package_arrows(package: str) -> dict[tuple[str, str], list[str]]:
    """Arrows between the direct children of ``package``, each with the imports that make it."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for imp in ALL_IMPORTS:
        target = _module_of(imp.target)
        if target is None:
            continue
        source, dest = child_of(package, imp.module), child_of(package, target)
        if source is None or dest is None or source == dest:
            continue
        arrows.setdefault((source, dest), []).append(str(imp))
    return arrows


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_package_cycle() -> None:
    # A guard on the finder: the knot issue 28 found (verdict -> materialize -> runs ->
    # verdict) must be reported, and a chain must not.
    knot = {"verdict": {"materialize"}, "materialize": {"runs"}, "runs": {"verdict"}, "x": set()}
    assert cycles_of(knot) == [["materialize", "runs", "verdict"]]
    assert cycles_of({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_package_scan_sees_the_top_level_packages() -> None:
    top = package_arrows("arenad")
    assert ("arenad.daemon", "arenad.cell") in top
    assert ("arenad.executors", "arenad.runs") in top
    assert ("arenad.executors.ray", "arenad.executors.local") not in package_arrows(
        "arenad.executors"
    )
    assert ("cli", "arenad") in package_arrows("")


@pytest.mark.parametrize("package", [p or "<top>" for p in PACKAGES])
def test_no_package_cycles(package: str) -> None:
    package = "" if package == "<top>" else package
    arrows = package_arrows(package)
    graph: dict[str, set[str]] = {}
    for source, dest in arrows:
        graph.setdefault(source, set()).add(dest)
        graph.setdefault(dest, set())
    report = []
    for component in cycles_of(graph):
        for source in component:
            for dest in component:
                for imp in arrows.get((source, dest), [])[:2]:
                    report.append(f"{source} -> {dest}: {imp}")
    assert not report, "a cycle between packages (move the shared type down):\n" + "\n".join(report)
