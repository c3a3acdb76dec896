"""MkDocs hook: the generated parts of the pages, made from the files they describe at every build.

A page asks for a generated part with an HTML comment on a line of its own:

- ``<!-- schema: check,kruskal -->``: the rows of the output schema (``mhaaudit/columns.json``, through
  ``mhaaudit.tables.schema_markdown``) of the columns those commands write; ``<!-- schema -->``: all;
- ``<!-- benchmarks: cpu -->``: the table of the benchmark result files in ``benchmarks/results/``
  (``benchmarks/resultfiles.py``), each row stamped with its command, commit and machine;
- ``<!-- benchmarks: gpu -->``: the GPU table that ``benchmarks/gpu_report.py`` renders, from the records
  of its runs committed in ``benchmarks/results/gpu/`` (one table per GPU run);
- ``<!-- stamp: NAME -->``: which command, commit and machine made picture ``NAME`` of ``docs/images``
  (from ``docs/images/figures.json``, written by ``docs/gen_figures.py``);
- ``<!-- api: NAME [member,member,...] -->``: the mkdocstrings block of a public name (``audit``, or a
  dotted path such as ``mhaaudit.capacity.CapacityResult``) under the module that defines it, found by
  importing it: the reference follows the code when a name moves between modules.

The docstrings name other objects with Sphinx roles (``:class:`~mhaaudit.errors.InputError```), which
mkdocstrings shows as written: :func:`on_page_content` shows each as the code it names (the last part
of a ``~`` path).

A directive this hook does not know, a picture without a stamp or a missing result file stops the
build: nothing generated is left stale or half-filled.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
RESULTS = ROOT / "benchmarks" / "results"
DIRECTIVE = re.compile(r"^<!-- (schema|benchmarks|stamp|api)(?::\s*(.*?))? -->$", re.M)


def _module(name: str, path: Path):
    """A script of the repository (not a package) imported by path, once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def schema_table(commands: str | None) -> str:
    """The schema's rows of the columns that any of ``commands`` (comma-separated; None: all) writes."""
    from mhaaudit.tables import schema_markdown

    head, rule, *rows = schema_markdown().splitlines()
    if commands:
        wanted = {c.strip() for c in commands.split(",")}
        rows = [r for r in rows if wanted & {c.strip() for c in r.split(" | ")[2].split(",")}]
        if not rows:
            raise ValueError(f"schema: no column is written by {commands}")
    return "\n".join([head, rule, *rows])


def cpu_table() -> str:
    """The CPU benchmark table from the result files."""
    rf = _module("resultfiles", ROOT / "benchmarks" / "resultfiles.py")
    docs = rf.read_all(RESULTS)
    if not docs:
        raise ValueError(f"benchmarks: no result file in {RESULTS}")
    return rf.markdown(docs)


def gpu_tables() -> str:
    """One table per GPU run whose records are committed in ``benchmarks/results/gpu/``, rendered by
    ``gpu_report.table`` itself (every row ``unmeasured`` where that run measured nothing)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        g = _module("gpu_report", ROOT / "benchmarks" / "gpu_report.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    blocks = []
    for path in sorted((RESULTS / "gpu").glob("*.jsonl")):
        records = g.read_records(path)
        keys = {json.dumps(r["key"], sort_keys=True) for r in records if r.get("key") and r["part"] in g.PARTS}
        for key in sorted(keys):
            parts = g.latest(records, json.loads(key))
            stamp = next(r["stamp"] for r in reversed(records) if r.get("stamp") and r["part"] in parts)
            blocks.append(f"From `benchmarks/results/gpu/{path.name}`:\n\n" + g.table(parts, stamp))
    return "\n\n".join(blocks) if blocks else g.table({}, None)


@cache
def _stamps() -> dict:
    path = IMAGES / "figures.json"
    if not path.is_file():
        raise ValueError(f"stamp: {path} is missing (run python docs/gen_figures.py)")
    doc = json.loads(path.read_text())
    if doc.get("quick"):
        raise ValueError(f"stamp: {path} holds small-size pictures (--quick)")
    return doc["figures"]


def stamp(name: str) -> str:
    """The caption line of picture ``name``: the command, commit, date and machine that made it."""
    s = _stamps().get(name)
    if s is None or not (IMAGES / name).is_file():
        raise ValueError(f"stamp: no recorded picture {name} (run python docs/gen_figures.py)")
    m = s["machine"]
    gpu = m.get("gpu") or "no GPU"
    return (
        f'<p class="stamp"><small>Recorded by <code>docs/gen_figures.py</code> from <code>{s["command"]}</code> '
        f"({s['wall_s']} s wall clock at load average {s['load_average']}) at commit {s['commit']} on {s['date']}; "
        f"machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, {gpu}, Python {m['python']}, "
        f"torch {m['torch']}.</small></p>"
    )


def api_block(arg: str) -> str:
    """``::: where.it.is.defined`` for a public name, with the members to show (a class's: inherited too)."""
    import importlib
    import inspect

    name, *members = arg.split()
    path = name if name.startswith("mhaaudit") else f"mhaaudit.{name}"
    module, _, attr = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        obj = importlib.import_module(path)  # a module (mhaaudit.errors)
    where = obj.__name__ if inspect.ismodule(obj) else f"{obj.__module__}.{obj.__qualname__}"
    lines = [f"::: {where}"]
    if members:
        lines += ["    options:", f"      members: [{members[0].replace(',', ', ')}]"]
        if inspect.isclass(obj):
            lines.append("      inherited_members: true")
    return "\n".join(lines)


def render(kind: str, arg: str | None) -> str:
    """The text one directive stands for."""
    if kind == "schema":
        return schema_table(arg)
    if kind == "benchmarks" and arg in ("cpu", "gpu"):
        return cpu_table() if arg == "cpu" else gpu_tables()
    if kind == "stamp" and arg:
        return stamp(arg)
    if kind == "api" and arg:
        return api_block(arg)
    raise ValueError(f"unknown directive <!-- {kind}: {arg} -->")


def expand(markdown: str) -> str:
    """``markdown`` with each directive replaced by what it stands for."""
    return DIRECTIVE.sub(lambda m: render(m.group(1), m.group(2)), markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs' hook: the page's directives expanded; an error stops the build with the page's name."""
    try:
        return expand(markdown)
    except ValueError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from exc


#: A Sphinx role before the code it names, as the API pages render it: ``:class:<code>~a.b.C</code>``.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):<code>(~?)([^<]*)</code>")


def shown_roles(html: str) -> str:
    """``html`` with each Sphinx role shown as the code it names (``~a.b.C`` as ``C``)."""
    return ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)


def on_page_content(html: str, page, config, files) -> str:
    """MkDocs' hook: the page's HTML with the docstrings' Sphinx roles shown as code."""
    return shown_roles(html)
