"""Errors for library callers: built-in types, the library's parameter names, the CLI's flags.

A library caller catches a bad argument with ``except ValueError`` and reads the name of the
argument it passed (``samples``), never a command-line flag; the command line prints the same
error with its own flag (``--samples``), written from one table in ``mhaaudit.cli.app``.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from clitools import assert_one_error, run

from mhaaudit.cli.names import FLAGS, flag, with_flags
from mhaaudit.errors import (
    DataError,
    InputError,
    Message,
    MhaauditError,
    ModelError,
    OfflineError,
    OutputError,
    Param,
    printable,
)

PACKAGE = Path(__file__).resolve().parents[1] / "mhaaudit"
FLAG = re.compile(r"--[a-z]")


def test_each_error_is_the_builtin_it_means():
    for cls, builtin in (
        (InputError, ValueError),
        (ModelError, ValueError),
        (DataError, ValueError),
        (OfflineError, OSError),
        (OutputError, OSError),
    ):
        exc = cls(Param("samples") + " must be at least 1, got 0", value=0, allowed="at least 1")
        assert isinstance(exc, MhaauditError) and isinstance(exc, builtin)
        assert str(exc) == "samples must be at least 1, got 0" and exc.args == (str(exc),)
        assert exc.params == ("samples",) and exc.param == "samples"
        assert exc.value == 0 and exc.allowed == "at least 1"
        assert exc.message_for(flag) == "--samples must be at least 1, got 0"
        back = pickle.loads(pickle.dumps(exc))  # as another process of a job sends it
        assert type(back) is cls and back.message_for(flag) == exc.message_for(flag) and back.value == 0
    with pytest.raises(ValueError, match=r"^k must be at least 1"):
        raise InputError(Param("k") + " must be at least 1, got 0")


def test_a_check_of_one_value_carries_the_parameter_the_value_and_what_is_allowed():
    from mhaaudit import validate

    with pytest.raises(InputError) as info:
        validate.integer(Param("samples"), 0)
    exc = info.value
    assert (exc.param, exc.value, exc.allowed) == ("samples", 0, "at least 1")
    assert (
        exc.message_for(flag) == "--samples must be at least 1, got 0"
        and str(exc) == "samples must be at least 1, got 0"
    )
    with pytest.raises(InputError) as info:
        validate.choice(Param("vary"), "nothing", ("both", "weights", "data"))
    assert (info.value.param, info.value.value, info.value.allowed) == ("vary", "nothing", "one of both, weights, data")


def test_a_message_is_text_and_parameters():
    m = "give " + Param("from_path") + " or " + Param("k")
    assert isinstance(m, Message) and isinstance(m, str)
    assert m == "give from_path or k" and m.params == ("from_path", "k")
    assert m.named(flag) == "give --from or --k"
    assert (m + ".").named(flag) == "give --from or --k." and ("Note: " + m).named(flag) == "Note: give --from or --k"
    assert Message.from_json(m.to_json()) == m and Message.from_json(m.to_json()).named(flag) == m.named(flag)
    assert pickle.loads(pickle.dumps(m)).named(flag) == m.named(flag)
    with pytest.raises(TypeError):
        f"{Param('k')}"  # an f-string would drop the name an interface writes: join with +
    kept = {"notes": [m], "rows": ({"reason": "raise " + Param("limit")},)}
    assert with_flags(kept) == {"notes": ["give --from or --k"], "rows": ({"reason": "raise --limit"},)}


def test_one_table_names_the_flags_that_are_not_the_parameter_with_dashes():
    assert flag("text_column") == "--text-column" and flag("k") == "--k"
    assert flag("from_path") == "--from" and FLAGS["from_path"] == "--from"
    assert flag("X") == "FEATURES"  # the library's rows X are kruskal's argument, not a flag "--X"
    exc = InputError(Param("from_path") + " x.parquet: not a results file of " + Param("check_out"))
    assert str(exc) == "from_path x.parquet: not a results file of a parquet file of AuditResult.to_arrow()"
    assert exc.message_for(flag) == "--from x.parquet: not a results file of 'mhaaudit check --out'"


def _library_errors():
    """Each error path through the library's public functions (none loads a model or reads data)."""
    from mhaaudit import RankRule, capacity_audit, kruskal_sweep, run_memorize_grid, subset_test
    from mhaaudit.auditing import plan_probes
    from mhaaudit.models.load import check_revision
    from mhaaudit.settings import Settings

    X = torch.randn(6, 4, dtype=torch.float64)
    return [
        (lambda: subset_test(X, 0), "k must be at least 1"),
        (lambda: subset_test(X, 2, samples=0), "samples must be at least 1"),
        (lambda: subset_test(X, 2, threshold=1.5), "threshold must be"),
        (lambda: subset_test(X, 2, threshold=True), "threshold must be a number"),  # was read as 1.0
        *(  # was torch's TypeError (where long double is wider than float64)
            [(lambda: subset_test(X.numpy().astype(np.longdouble), 2), "extended precision")]
            if np.dtype(np.longdouble).itemsize > 8
            else []
        ),
        (lambda: kruskal_sweep(X, samples=0), "samples must be at least 1"),
        (lambda: Settings.resolve(device=""), "device is empty"),
        (lambda: Settings.resolve(seed=-1), "seed must be at least 0"),
        (lambda: RankRule.for_dtype(torch.float32, atol=float("nan")), "atol must be a finite number"),
        (
            lambda: plan_probes("image", ["random"], layers=[0, 1], layer=2),
            "layer has no effect with layers: layers names every depth",
        ),
        (lambda: check_revision(" "), "revision: give a branch"),
        (lambda: run_memorize_grid(vary="heads", sizes="16"), "vary heads needs values (e.g. values 1,2,4,8)"),
        (lambda: run_memorize_grid(sizes="16", seed=1, seeds="0-2"), None),
        (lambda: run_memorize_grid(sizes="16", memory_budget=-1), "memory_budget must be a positive number"),
        (
            lambda: capacity_audit("vit-base", from_path="x.parquet", samples=10),
            "samples and threshold have no effect with from_path",
        ),
        (lambda: capacity_audit("vit-base", block=0), "block must be at least 1"),
    ]


@pytest.mark.parametrize("case", range(len(_library_errors())))
def test_a_library_caller_reads_parameters_never_flags(case, tmp_path):
    call, match = _library_errors()[case]
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, MhaauditError)
    assert "--" not in str(info.value) and "Param(" not in str(info.value), str(info.value)
    if match is not None:
        assert match in str(info.value)


def test_files_and_the_network_are_os_errors(tmp_path):
    from mhaaudit.io import read_array
    from mhaaudit.models.checkpoints import offline_weights_error

    np.save(tmp_path / "x.npy", np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"^key has no effect on") as info:
        read_array(tmp_path / "x.npy", key="queries")
    assert "--" not in str(info.value)
    exc = offline_weights_error("vit-base", "google/vit-base-patch16-224")
    assert isinstance(exc, OSError) and "pass weights PATH" in str(exc) and "--" not in str(exc)
    assert "pass --weights PATH" in exc.message_for(flag)


@pytest.mark.parametrize(
    "args, flag_line",
    [
        ("kruskal {x} --k 0", "--k must be at least 1"),
        ("kruskal {x} --k 2 --samples 0", "--samples must be at least 1"),
        ("memorize --vary heads --sizes 16", "--vary heads needs --values (e.g. --values 1,2,4,8)"),
        ("memorize --sizes 0", "--sizes values must be at least 1, got 0"),
        ("capacity vit-base --from {x}.parquet", "--from {x}.parquet: no such file"),
        ("capacity vit-base --block 0", "--block must be at least 1"),
    ],
)
def test_the_command_line_prints_its_flags(capsys, tmp_path, args, flag_line):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((6, 4)))
    rc, _out, err = run(capsys, *args.format(x=tmp_path / "x.npy").split())
    assert_one_error(rc, err, flag_line.format(x=tmp_path / "x.npy"))


_ERRORS = {"InputError", "ModelError", "DataError", "OfflineError", "OutputError", "MhaauditError", "RankFailed"}
_CHECKS = {
    "integer",
    "int_list",
    "int_ranges",
    "choice",
    "fraction",
    "tolerance",
    "head_counts",
    "layers",
    "_positive",
    "_check_keys",
    "_as_int",
}


def _strings(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n


def test_no_library_error_is_written_with_a_flag():
    """Every message the library (all of it but mhaaudit/cli) builds an error from, and every name
    it gives an argument check, names parameters as Param parts: none spells a flag."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith("mhaaudit/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _ERRORS:
                found += [f"{rel}:{s.lineno}" for a in node.args for s in _strings(a) if FLAG.search(s.value)]
            elif name in _CHECKS:
                found += [f"{rel}:{s.lineno}" for a in node.args[:2] for s in _strings(a) if FLAG.search(s.value)]
    assert not found, found


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, kinds)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }


def test_no_library_message_names_a_flag():
    """Not only errors: every string the library (all but mhaaudit/cli) writes into a result, a note,
    a hint, a log line or a column description names parameters as Param parts, so a library caller
    never reads a flag (``--limit``), and the command line still prints its own. Docstrings are
    documentation and may name a command's options."""
    flag = re.compile(r"(?<![\w-])--[a-z]")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith("mhaaudit/cli/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        found += [
            f"{rel}:{n.lineno}: {n.value[:60]!r}" for n in _strings(tree) if id(n) not in docs and flag.search(n.value)
        ]
    assert not found, found


def test_a_kept_message_names_the_parameter_in_the_library_and_the_flag_on_the_command_line(capsys):
    """One message kept in a result, made both ways: the library's names outside the command line,
    its flags inside a command's run."""
    from mhaaudit.kruskal.fixed import _whole_set_note

    note = _whole_set_note("assumption_1", 7, 7, 8)
    assert "(raise limit above k = 7; from a file, give more than 7 rows)" in note
    assert (
        "(raise --limit above k = 7; from a file, give more than 7 rows)"
        in with_flags({"reason": "r" + note})["reason"]
    )


def test_no_library_module_writes_a_placeholder_or_a_parameter_into_an_f_string():
    """A message names a parameter as a Param part joined with +: no {param:...} text, no Param in an f-string."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        found += [f"{rel}: {m.group()}" for m in re.finditer(r"\{\{?param:|\{Param\(|ContextVar\[Callable", text)]
    assert not found, found


@pytest.mark.parametrize(
    "text, shown",
    [
        ("plain name.npy", "plain name.npy"),
        ("x\x1b]0;PWNED\x07\x1b[2J", "x\\x1b]0;PWNED\\x07\\x1b[2J"),  # retitle a window, clear the screen
        ("a\x9b2Jb\x7f", "a\\x9b2Jb\\x7f"),  # the 8-bit CSI, DEL
        ("cod\u202egnp.exe", "cod\\u202egnp.exe"),  # a right-to-left override reordering what is shown
        ("bytes \udcff", "bytes \\udcff"),  # an undecodable byte of a file name
        ("two\nlines\tand a tab", "two\\x0alines\\x09and a tab"),
        ("é 中 ✓", "é 中 ✓"),  # printable characters of any script stay
    ],
)
def test_printable_shows_control_characters_escaped(text, shown):
    assert printable(text) == shown
    assert printable(shown) == shown  # escaping what is shown changes nothing
    assert printable("a\nb\x1b", keep="\n") == "a\nb\\x1b"


def test_another_ranks_failure_names_the_flags_on_rank_0():
    """A rank's failure travels through the job's store as the message's parts, so rank 0's command
    line writes its flags in it as in its own errors."""
    from mhaaudit.collectives import RankFailed, Session

    class Store(dict):
        def set(self, key, value):
            self[key] = value.encode()

        def check(self, keys):
            return all(k in self for k in keys)

        def get(self, key):
            return self[key]

    store = Store()
    other = Session(rank=1, world_size=2, local_rank=1, backend="gloo", store=store)
    other.note(InputError(Param("limit") + " 10 is below   n = 197;\nraise " + Param("limit")))
    lost = Session(rank=0, world_size=2, local_rank=0, backend="gloo", store=store)._lost(None)
    assert isinstance(lost, RankFailed)
    assert str(lost) == "rank 1 of 2 failed: limit 10 is below n = 197; raise limit"
    assert lost.message_for(flag) == "rank 1 of 2 failed: --limit 10 is below n = 197; raise --limit"


def test_an_os_error_about_a_path_is_the_user_s_to_fix():
    import errno

    from mhaaudit.errors import path_problem

    assert path_problem(PermissionError(errno.EACCES, "Permission denied", "x/y.npy")) == "x/y.npy: Permission denied"
    assert path_problem(OSError(errno.ENAMETOOLONG, "File name too long", "a" * 300)).endswith("File name too long")
    assert path_problem(OSError(errno.ENOSPC, "No space left on device", "out.parquet")) is not None
    assert path_problem(PermissionError(errno.EACCES, "Permission denied")) is None  # no path named: not known
    assert path_problem(FileNotFoundError(errno.ENOENT, "No such file", "x")) is None  # a file that went: a bug's
    assert path_problem(ValueError("x")) is None


def test_what_ends_a_rank_as_the_user_s_to_fix_is_what_the_command_line_maps_to_2():
    """The rule a job's ranks apply (:func:`users_to_fix`) and the command line's rules agree: each
    exception is exit 2 in both, or a bug (3) in both."""
    import errno

    from mhaaudit.cli.app import ERRORS
    from mhaaudit.errors import DataError, InputError, users_to_fix

    cases = [
        InputError("bad"),
        DataError("bad"),
        PermissionError(errno.EACCES, "Permission denied", "x/y.npy"),
        PermissionError(errno.EACCES, "Permission denied"),
        FileNotFoundError(errno.ENOENT, "No such file", "x"),
        ValueError("x"),
        RuntimeError("x"),
    ]
    for exc in cases:
        status = next(rule.code for rule in ERRORS if rule.matches(exc))
        assert status == (2 if users_to_fix(exc) else 3), exc
    assert [users_to_fix(exc) for exc in cases] == [True, True, True, False, False, False, False]
