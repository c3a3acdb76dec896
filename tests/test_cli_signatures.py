"""Each command writes its options in its own signature, and a default shared with the library is stated once.

A command's signature is what Typer reads: no code builds or rewrites it. An option several
commands word the same way is one ``Annotated`` alias of :mod:`mhaaudit.cli.options`. A default
the library has too is named from :mod:`mhaaudit.defaults`, never written again in the command
line: the source of every command's defaults is read here (``ast``), and the values Typer shows
are compared with that module.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import typer.main

from mhaaudit import defaults
from mhaaudit.cli import options
from mhaaudit.cli.app import app

CLI = Path(options.__file__).parent
COMMANDS = {info.name: info.callback for info in app.registered_commands}

# Each option (its Python name) whose default the library has too -> the constant of mhaaudit.defaults.
LIBRARY_DEFAULTS = {
    "samples": "DEFAULT_SAMPLES",
    "threshold": "DEFAULT_THRESHOLD",
    "seed": "DEFAULT_SEED",
    "device": "DEFAULT_DEVICE",
    "split": "DEFAULT_SPLIT",
    "limit": "DEFAULT_LIMIT",
    "batch_size": "DEFAULT_BATCH_SIZE",
    "vary": "DEFAULT_SEEDS_VARY",
    "attention": "DEFAULT_ATTENTION",
    "task": "DEFAULT_MEMORIZE_TASK",
    "context": "DEFAULT_MEMORIZE_CONTEXT",
    "classes": "DEFAULT_CLASSES",
    "tolerance": "DEFAULT_TOLERANCE",
    "lr": "DEFAULT_LR",
    "check_every": "DEFAULT_CHECK_EVERY",
}
# Where a command's option of that name is another setting: its constant, or None (no default), and why.
OWN = {
    ("memorize", "batch_size"): "DEFAULT_TRAINING_BATCH_SIZE",  # examples per training step, not per forward pass
    ("memorize", "vary"): None,  # the parameter a grid varies, not which seed does
    ("reproduce", "limit"): None,  # each target's own, the paper's
}


def test_every_command_is_registered():
    assert set(COMMANDS) == {"check", "kruskal", "capacity", "memorize", "reproduce"}


# --------------------------------------------------------------------------- signatures written out


def _cli_sources() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(CLI.glob("*.py"))}


def test_no_signature_is_built_or_rewritten():
    """No ``__signature__`` or ``__annotations__`` assigned, no TypedDict of options, no ``**options`` or
    ``locals()``: what a command takes is what its ``def`` says."""
    found = []
    for name, tree in _cli_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("__signature__", "__annotations__"):
                found.append(f"{name}: {ast.unparse(node)}")
            elif isinstance(node, (ast.ImportFrom, ast.Import)) and any(
                a.name in ("TypedDict", "Unpack") for a in node.names
            ):
                found.append(f"{name}: imports {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "locals":
                found.append(f"{name}: locals()")
    for command, callback in COMMANDS.items():
        kinds = {p.kind for p in inspect.signature(callback).parameters.values()}
        if inspect.Parameter.VAR_KEYWORD in kinds or inspect.Parameter.VAR_POSITIONAL in kinds:
            found.append(f"{command}: takes *args or **kwargs")
    assert not found


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_typer_reads_the_signature_as_written(command):
    """The options of ``--help``, in its order, are the parameters of the function, in theirs."""
    callback = COMMANDS[command]
    written = [n for n, p in inspect.signature(callback).parameters.items() if p.annotation != "typer.Context"]
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    assert [p.name for p in click_command.params] == written


def test_an_option_worded_alike_is_one_alias():
    """Two commands whose option has the same flags and help type it by the same alias of ``options``."""
    aliases = {id(v) for v in vars(options).values()}
    worded: dict[tuple, list[tuple[str, object]]] = {}
    group = typer.main.get_command(app)
    for command, callback in COMMANDS.items():
        hints = {n: p.annotation for n, p in inspect.signature(callback, eval_str=True).parameters.items()}
        for param in group.commands[command].params:  # type: ignore[attr-defined]
            worded.setdefault((tuple(param.opts), getattr(param, "help", None)), []).append(
                (command, hints[param.name])
            )
    twice = {key: uses for key, uses in worded.items() if len(uses) > 1}
    assert twice, "no option is shared"
    apart = {key[0]: [c for c, hint in uses if id(hint) not in aliases] for key, uses in twice.items()}
    assert not {flags: where for flags, where in apart.items() if where}, "write these as one alias of options.py"


def test_the_choices_of_an_option_are_the_librarys_own():
    """An enum option offers the tuple the library validates against, each value once, in its order; so does
    the help of memorize's --vary (a word the library reads, its aliases with it)."""
    import typer.main

    from mhaaudit.capacity.audit import ATTENTION
    from mhaaudit.cli.app import app
    from mhaaudit.cli.capacity import Attention
    from mhaaudit.cli.kruskal import Vectors
    from mhaaudit.cli.memorize import Context, Preset, Task
    from mhaaudit.estimation import VECTORS
    from mhaaudit.memorize import CONTEXTS, PRESETS, TASKS, VARY
    from mhaaudit.seeds import VARY as SEEDS_VARY

    offered = {
        options.Backend: defaults.BACKENDS,
        options.Vary: SEEDS_VARY,
        Attention: ATTENTION,
        Vectors: VECTORS,
        Task: TASKS,
        Context: CONTEXTS,
        Preset: tuple(PRESETS),
    }
    for enum, choices in offered.items():
        assert tuple(member.value for member in enum) == tuple(choices), enum
    (vary,) = [p for p in typer.main.get_command(app).commands["memorize"].params if p.name == "vary"]
    assert vary.metavar == "<" + "|".join(VARY) + ">"


# --------------------------------------------------------------------------- each default once


def _from_defaults(tree: ast.Module) -> set[str]:
    """The names a module imports from mhaaudit.defaults."""
    return {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module, node.level) in (("defaults", 2), ("mhaaudit.defaults", 0))
        for a in node.names
    }


def _stated_here(node: ast.expr, named: set[str]) -> list[str]:
    """The parts of a default that state a value rather than name one of ``named`` (mhaaudit.defaults').

    A default may be None or False (not given, off), a constant of mhaaudit.defaults, ``str()`` of
    one (a text option that also takes words, as --batch-size auto), an enum's member of that name
    (``Vary[DEFAULT_SEEDS_VARY]``) or a member of ``Format`` (the output format: the library has none).
    """
    if isinstance(node, ast.Constant):
        return [] if node.value is None or node.value is False else [ast.unparse(node)]
    if isinstance(node, ast.Name):
        return [] if node.id in named else [node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Format":
        return []
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "str" and len(node.args) == 1 and not node.keywords:
        return _stated_here(node.args[0], named)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return _stated_here(node.slice, named)
    return [ast.unparse(node)]


def _defaults_of(function: ast.FunctionDef) -> list[tuple[str, ast.expr]]:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return [(a.arg, d) for a, d in pairs]


def _stated_defaults(tree: ast.Module, function_name: str) -> dict[str, list[str]]:
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function_name)
    named = _from_defaults(tree)
    stated = {name: _stated_here(default, named) for name, default in _defaults_of(function)}
    return {name: parts for name, parts in stated.items() if parts}


def test_the_check_of_stated_defaults_finds_them():
    """What the next test refuses: a number or word written as a default, or a name not from mhaaudit.defaults."""
    tree = ast.parse(
        "from ..defaults import DEFAULT_SPLIT, DEFAULT_BATCH_SIZE\n"
        "LIMIT = 2000\n"
        "def command(ctx, limit=2000, cap=LIMIT, vary=Vary['both'], device='auto', size=str(32), flag=True,\n"
        "            split=DEFAULT_SPLIT, batch_size=str(DEFAULT_BATCH_SIZE), out=None, quiet=False,\n"
        "            fmt=Format.table, *, seed=0): ...\n"
    )
    assert _stated_defaults(tree, "command") == {
        "limit": ["2000"],
        "cap": ["LIMIT"],
        "vary": ["'both'"],
        "device": ["'auto'"],
        "size": ["32"],
        "flag": ["True"],
        "seed": ["0"],
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_names_its_defaults_from_the_defaults_module(command):
    """Every default in a command's signature is None, False, or named from mhaaudit.defaults (or the
    output format): no number or word the library might state again."""
    callback = COMMANDS[command]
    tree = ast.parse(Path(inspect.getsourcefile(callback)).read_text())
    assert _stated_defaults(tree, callback.__name__) == {}


def _library_values() -> dict[str, object]:
    """The library's default values (a bool aside: a flag's True or False names no number or word)."""
    return {
        name: value
        for name in defaults.__all__
        if name.startswith("DEFAULT_") and not isinstance(value := getattr(defaults, name), bool)
    }


def test_no_function_of_the_command_line_writes_a_library_default():
    """No parameter of any function in mhaaudit/cli defaults to a value of mhaaudit.defaults written out
    (``limit=2000``, ``device="auto"``), and no module of it keeps a DEFAULT_ constant of its own."""
    values = _library_values()
    found = []
    for name, tree in _cli_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg, default in _defaults_of(node):
                    if isinstance(default, ast.Constant) and any(
                        type(default.value) is type(v) and default.value == v for v in values.values()
                    ):
                        found.append(f"{name}: {node.name}({arg}={ast.unparse(default)})")
            elif isinstance(node, ast.Assign):
                found += [f"{name}: {t.id} =" for t in node.targets if isinstance(t, ast.Name) and "DEFAULT" in t.id]
    assert not found


def _shown(default) -> str:
    return str(getattr(default, "value", default))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_default_the_library_shares_is_the_defaults_modules(command):
    """The default Typer gives each option the library has too is the constant of mhaaudit.defaults."""
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    compared = 0
    for param in click_command.params:
        if param.name not in LIBRARY_DEFAULTS:
            continue
        constant = OWN.get((command, param.name), LIBRARY_DEFAULTS[param.name])
        if constant is None:
            assert param.default is None, param.name
            continue
        assert _shown(param.default) == str(getattr(defaults, constant)), (param.name, constant)
        compared += 1
    assert compared >= 2  # every command takes --seed and --device at least


def test_every_shared_default_is_used_and_documented():
    """Each constant of the table names a default of mhaaudit.defaults, documented with ``#:``."""
    lines = Path(defaults.__file__).read_text().splitlines()
    constants = {*LIBRARY_DEFAULTS.values(), *(c for c in OWN.values() if c)}
    assert constants <= set(_library_values())
    for name in _library_values():
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{name} = "))
        assert lines[at - 1].startswith("#: "), f"{name} has no #: line above it"
