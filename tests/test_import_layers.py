"""The import graph of pysrc/naiad, read with ast (nothing is imported): no module
imports itself back through others, and a worker process imports nothing of the
frontend. Imports inside functions count as much as those at the top; only those
under `if TYPE_CHECKING:` (type hints, never run) are left out."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pysrc" / "naiad"

# The frontend's modules and packages: what serves clients, owns the models and the
# repository. A worker reaches none of them.
FRONTEND = (
    "naiad.check",
    "naiad.cli",
    "naiad.flags.cli_triton",
    "naiad.grpc",
    "naiad.http",
    "naiad.inprocess",
    "naiad.observability.metrics",
    "naiad.openai",
    "naiad.repository",
    "naiad.scheduling",
    "naiad.server",
    "naiad.memory.shm",
    "naiad.tracing",
)


def _modules() -> dict:
    """Module name -> (its file, or None for an extension; whether it is a package)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    for path in ROOT.rglob("*.pyx"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules[".".join(parts)] = (None, False)
    return modules


def _type_checking_only(tree: ast.AST) -> set:
    """The import nodes under `if TYPE_CHECKING:`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(ast.walk(inner))
    return skipped


def _imports(name: str, modules: dict) -> set:
    """The project modules `name` imports, anywhere in its code."""
    path, package = modules[name]
    if path is None:
        return set()
    here = name if package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    found = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    found.add(target)
                elif base in modules:
                    found.add(base)
    found.discard(name)
    return found


def _graph() -> dict:
    modules = _modules()
    graph = {name: _imports(name, modules) for name in modules}
    # `import naiad` gives the package's version; its __getattr__ loads naiad.inprocess
    # only for a user's `naiad.Server`, never for the project's own modules.
    graph["naiad"] = set()
    return graph


def _circles(graph: dict) -> list:
    """The groups of modules that import each other (Tarjan's strongly connected
    components of more than one module)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    circles = []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _reached(graph: dict, start: list) -> dict:
    """Every module the `start` modules import, directly or not: module -> the module
    that imports it on the way."""
    via = {name: None for name in start}
    todo = list(start)
    while todo:
        name = todo.pop()
        for target in graph[name]:
            if target not in via:
                via[target] = name
                todo.append(target)
    return via


def _is_frontend(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in FRONTEND)


def test_no_module_imports_itself_back():
    assert _circles(_graph()) == []


def test_a_worker_imports_nothing_of_the_frontend():
    graph = _graph()
    via = _reached(graph, [name for name in graph if name.startswith("naiad.worker")])
    paths = []
    for name in sorted(via):
        if _is_frontend(name):
            path = [name]
            while via[path[-1]] is not None:
                path.append(via[path[-1]])
            paths.append(" <- ".join(path))
    assert paths == []


def test_the_walk_sees_function_local_imports_and_circles():
    graph = _graph()
    assert "naiad.worker.bls" in graph["naiad.triton_python_backend_utils"]
    # Imported inside Server's methods; and under TYPE_CHECKING only, not counted.
    assert "naiad.server" in graph["naiad.inprocess.server"]
    assert "naiad.inprocess.server" not in graph["naiad.inprocess.model"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _is_frontend("naiad.scheduling.manager") and not _is_frontend(
        "naiad.sequence_parameters"
    )
