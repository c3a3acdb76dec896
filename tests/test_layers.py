"""The package's import graph: no cycle, no upward import, imports at module top.

Built from the source (``ast``), with every import a module makes, inside functions too:
``from .x import y`` is an edge to ``mhaaudit.x`` (or to ``mhaaudit.x.y`` where that is a
module), and a module outside a package that imports one of its modules also runs the package's
``__init__`` (an edge to the package). Imports under ``if TYPE_CHECKING:`` are annotations only
and never run. The package root ``mhaaudit/__init__.py`` is the front door (its exports are
imported on first use) and is left out; the docs' "Code layout" (docs/development.md) says why the layers are these.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mhaaudit"

# Bottom to top: a module imports only modules of its own layer or of layers below it.
LAYERS: list[tuple[str, ...]] = [
    (
        "_version",
        "errors",
        "defaults",
        "validate",
        "hostmem",
        "staging",
        "stdio",
        "console",
        "notebook",
        "progress",
        "hub",
        "theory",
        "places",
        "native_names",
        "files",
        "phases",
        "workers",
        "ending",
        "imports",
        "keywords",
        "provenance",
        "runtime",
        "notes",
        "check_words",
        "load_sharing",
        "sizes",
        "render_kruskal",
    ),
    ("numerics",),
    (
        "settings",
        "display",
        "documents",
        "tables",
        "as_stored",
        "feature_parquet",
        "tensor_values",
        "mapped",
        "feature_files",
        "io",
        "collectives",
        "distributed",
        "facts",
    ),
    ("kruskal",),
    ("checks", "contexts", "features"),
    ("models", "sources", "batching", "request", "batches", "pipeline", "readings"),
    ("render", "plot", "render_seeds", "render_memorize", "seeds"),
    ("probes", "audit_result", "capture", "auditing", "estimation", "series"),
    ("capacity",),
    ("memorize", "reproduce"),
    ("cli", "__main__"),
]

# Where an import may wait until a function runs: the command line defers the library until a
# command runs (``mhaaudit --help`` imports no torch), and these heavy optional dependencies are
# imported where they are used, in the modules DEFERRED lists (docs/development.md, "Code layout", says why;
# torch too, where a module must stay light: distributed.py, which `python -m mhaaudit` imports
# before it knows the command).
DEFERRING = ("mhaaudit.cli", "mhaaudit.__main__")
HEAVY = {
    "datasets",
    "fsspec",
    "huggingface_hub",
    "ipywidgets",
    "IPython",
    "matplotlib",
    "PIL",
    "pyarrow",
    "safetensors",
    "scipy",
    "timm",
    "transformers",
    "torchvision",
    "tokenizers",
    "nbformat",
    "tqdm",
    "torch",
}
# The modules that import a heavy dependency inside a function, and which ones.
DEFERRED = {
    "mhaaudit.batching": {"PIL"},
    "mhaaudit.capacity.certificate": {"scipy"},
    "mhaaudit.capacity.oracle": {"scipy"},
    "mhaaudit.collectives": {"torch"},
    "mhaaudit.distributed": {"torch"},
    "mhaaudit.features": {"safetensors"},
    "mhaaudit.files": {"pyarrow"},
    "mhaaudit.imports": {"transformers"},
    "mhaaudit.feature_files": {"pyarrow", "safetensors"},
    "mhaaudit.feature_parquet": {"pyarrow"},
    "mhaaudit.io": {"pyarrow"},
    "mhaaudit.kruskal.results": {"scipy"},
    "mhaaudit.kruskal.witness": {"scipy"},
    "mhaaudit.memorize.results": {"pyarrow"},
    "mhaaudit.memorize.resume": {"pyarrow"},
    "mhaaudit.models.checkpoints": {"safetensors", "torch"},
    "mhaaudit.models.hf": {"PIL", "huggingface_hub", "transformers"},
    "mhaaudit.models.hf_config": {"huggingface_hub", "transformers"},
    "mhaaudit.models.hf_inputs": {"PIL", "transformers"},
    "mhaaudit.models.hf_weights": {"transformers"},
    "mhaaudit.models.load": {"huggingface_hub", "transformers"},
    "mhaaudit.models.probe": {"PIL"},
    "mhaaudit.models.random_init": {"timm", "transformers"},
    "mhaaudit.models.resolution": {"timm", "transformers"},
    "mhaaudit.models.shards": {"huggingface_hub", "safetensors", "transformers"},
    "mhaaudit.models.timm_backend": {"safetensors", "timm"},
    "mhaaudit.notebook": {"ipywidgets", "tqdm"},
    "mhaaudit.numerics.checked": {"scipy"},
    "mhaaudit.numerics.lapack": {"scipy"},
    "mhaaudit.numerics.stream": {"scipy"},
    "mhaaudit.plot": {"matplotlib"},
    "mhaaudit.readings": {"PIL"},
    "mhaaudit.reproduce.figures": {"matplotlib"},
    "mhaaudit.series.plot": {"matplotlib"},
    "mhaaudit.sources._common": {"datasets"},
    "mhaaudit.sources.containers": {"datasets", "pyarrow"},
    "mhaaudit.sources.examples": {"transformers"},
    "mhaaudit.sources.folder_checks": {"datasets", "fsspec"},
    "mhaaudit.sources.images": {"datasets"},
    "mhaaudit.sources.mosaics": {"PIL"},
    "mhaaudit.sources.shard_checks": {"datasets", "fsspec"},
    "mhaaudit.sources.tokenizers": {"transformers"},
    "mhaaudit.tables": {"pyarrow"},
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path):
    """(target, in_function, line) for every import of ``name``, TYPE_CHECKING blocks left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for alt in child.orelse:
                    yield from visit(alt, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, inner, child.lineno
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                for alias in child.names:
                    sub = f"{module}.{alias.name}"
                    yield (sub if sub in MODULES else module), inner, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, False)


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        if name == "mhaaudit":
            continue
        for target, _, _ in _imports(name, path):
            if target not in MODULES or target in ("mhaaudit", name):
                continue
            edges[name].add(target)
            # Importing a.b.c from outside a.b runs a.b's __init__ first.
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in MODULES and not (name + ".").startswith(parent + "."):
                    edges[name].add(parent)
    return edges


def _layer(name: str) -> int:
    top = name.split(".")[1]
    for i, layer in enumerate(LAYERS):
        if top in layer:
            return i
    raise AssertionError(f"{name} is in no layer: add it to LAYERS (and to the code layout, docs/development.md)")


def test_every_module_has_a_layer():
    for name in MODULES:
        if name != "mhaaudit":
            _layer(name)


def test_no_import_goes_up_a_layer():
    up = [
        f"{a} ({_layer(a)}) imports {b} ({_layer(b)})"
        for a, targets in _graph().items()
        for b in targets
        if _layer(b) > _layer(a)
    ]
    assert not up, "\n".join(sorted(up))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    assert not _cycles(_graph())


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_imports_sit_at_module_top():
    """Outside the command line, a function imports nothing of the package, of the standard
    library or of the light dependencies; only the heavy ones (HEAVY), in the modules DEFERRED
    lists, and DEFERRED lists each such module with the heavy imports it defers."""
    late = []
    deferred = {}
    for name, path in MODULES.items():
        if name.startswith(DEFERRING):
            continue
        for target, in_function, line in _imports(name, path):
            if not in_function:
                continue
            if target.split(".")[0] in HEAVY:
                deferred.setdefault(name, set()).add(target.split(".")[0])
                continue
            late.append(f"{name}:{line} imports {target}")
    for name in sorted(deferred.keys() | DEFERRED.keys()):
        if deferred.get(name) != DEFERRED.get(name):
            late.append(
                f"{name} defers {sorted(deferred.get(name, ()))}; DEFERRED says {sorted(DEFERRED.get(name, ()))}"
            )
    assert not late, "\n".join(late)


def test_the_math_loads_no_model_code():
    """``import mhaaudit.kruskal`` (and the rank rule under it) loads no module of the data path:
    the estimator is usable, and testable, without the model stack."""
    import subprocess

    code = "import sys, mhaaudit.kruskal; print(' '.join(sorted(m for m in sys.modules if m.startswith('mhaaudit'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "mhaaudit.kruskal" in loaded and "mhaaudit.numerics" in loaded
    above = ("models", "sources", "batching", "request", "pipeline", "cli")
    assert [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in above] == []


def _module_level_graph() -> dict[str, set[str]]:
    """The imports that run when a module is imported (those inside functions left out)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        if name == "mhaaudit":
            continue
        for target, in_function, _ in _imports(name, path):
            if in_function or target not in MODULES or target in ("mhaaudit", name):
                continue
            edges[name].add(target)
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in MODULES and not (name + ".").startswith(parent + "."):
                    edges[name].add(parent)
    return edges


def _longest_chain(edges: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports a -> b -> c ... in an acyclic graph, as the modules on it."""
    longest: dict[str, list[str]] = {}

    def chain(v: str) -> list[str]:
        if v not in longest:
            longest[v] = [v, *max((chain(w) for w in sorted(edges.get(v, ()))), key=len, default=[])]
        return longest[v]

    return max((chain(v) for v in sorted(edges)), key=len, default=[])


def test_the_chain_finder_finds_the_longest():
    assert _longest_chain({"a": {"b", "d"}, "b": {"c"}, "d": set(), "e": {"a"}}) == ["e", "a", "b", "c"]
    assert _longest_chain({}) == []


# The longest chain of module-level imports today, counted in modules (a package's __init__ counts as
# one): no change may make it longer.
LONGEST_CHAIN = 15


def test_the_import_chains_are_short():
    chain = _longest_chain(_module_level_graph())
    assert len(chain) <= LONGEST_CHAIN, " -> ".join(chain)
