"""The public names of ``import mhaaudit``: each is what the docs say it is (the function, not a
module of the same name, however the package was imported), its defaults are the CLI's, and every
result object prints as its command prints and shows one short line as its ``repr``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from clitools import run

import mhaaudit
from mhaaudit.cli.names import with_flags
from mhaaudit.kruskal.proofs import shared_proofs
from mhaaudit.numerics import RankRule
from mhaaudit.render import capacity_report, print_report
from mhaaudit.settings import DEFAULT_SAMPLES, DEFAULT_THRESHOLD, resolve_device


def _field_defaults() -> dict:
    """What a keyword left at None stands for: the default of the request field of its name (the rule
    of ``mhaaudit.request``), and for the settings an entry point builds, a test that stops once decided."""
    import dataclasses

    from mhaaudit.defaults import DEFAULT_DEVICE, DEFAULT_STOP_WHEN_DECIDED
    from mhaaudit.kruskal import Sampling
    from mhaaudit.request import DataRequest, ModelRequest
    from mhaaudit.settings import Settings

    out = {}
    for cls in (ModelRequest, DataRequest, Settings, Sampling):
        out |= {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    return out | {"device": DEFAULT_DEVICE, "stop_when_decided": DEFAULT_STOP_WHEN_DECIDED, "weights": None}


def _all_submodules() -> list[str]:
    return [
        m.name
        for m in pkgutil.walk_packages(mhaaudit.__path__, "mhaaudit.")
        if not m.name.startswith("mhaaudit.cli") and m.name != "mhaaudit.__main__"
    ]


def test_public_names_are_not_modules_even_after_every_submodule_is_imported():
    first = {name: getattr(mhaaudit, name) for name in mhaaudit.__all__}
    for name in _all_submodules():  # importing a submodule binds its name on the package
        importlib.import_module(name)
    for name in mhaaudit.__all__:
        obj = getattr(mhaaudit, name)
        assert not isinstance(obj, types.ModuleType), f"mhaaudit.{name} is a module"
        assert obj is first[name] or name == "__version__", f"mhaaudit.{name} changed on second access"
    from mhaaudit import audit

    assert callable(audit) and audit.__name__ == "audit"
    assert "model" in inspect.signature(audit).parameters


# --------------------------------------------------------------------------- defaults: library == CLI


class _Recorded(Exception):
    """Raised by a recording stand-in once it has the arguments the CLI passed."""


def _recorder(monkeypatch, module, name: str, calls: list, call_through: bool = False):
    real = getattr(module, name)
    sig = inspect.signature(real)

    def stand_in(*args, **kwargs):
        calls.append((sig, sig.bind(*args, **kwargs).arguments))
        if call_through:
            return real(*args, **kwargs)
        raise _Recorded

    monkeypatch.setattr(module, name, stand_in)
    return sig


# Parameters the CLI passes a value for that is not an option's default but a computed equivalent,
# each with the reason it equals the library's default.
EQUIVALENT = {
    "on_note": "the CLI prints each note on stderr as it comes; the library keeps them in result.notes",
    "progress": "the CLI passes its progress bar's callback (a no-op without a terminal); None draws no bar",
    "stats": "the CLI computes the whole set's statistics once for every size; None computes them",
    "check": "the CLI names the check after the size (n, min(T, d)); the library's default is a plain test",
}


def _same(name: str, lib, cli, X=None) -> bool:
    if name in EQUIVALENT:
        return True
    if lib is None and cli is not None and name in _field_defaults():  # None: not given, the field's default
        lib = _field_defaults()[name]
    if name == "device":  # every command's --device defaults to auto (the CLI may pass it resolved)
        return lib == "auto" and resolve_device(lib) == resolve_device(cli)
    if name in ("model", "weights", "context_length") and lib is None and cli == {}:
        return True  # reproduce's per-model options: None and {} both override nothing
    if name == "rule":
        return lib is None and cli == RankRule.for_dtype(X.dtype)
    if name in ("samples", "threshold") and lib is None:  # capacity_audit: None is the default, refused with --from
        return cli == {"samples": DEFAULT_SAMPLES, "threshold": DEFAULT_THRESHOLD}[name]
    if isinstance(lib, (int, float)) and not isinstance(lib, bool) and isinstance(cli, str):
        return str(lib) == cli  # --batch-size is text (an integer or auto)
    return lib == cli and type(lib) is type(cli) if isinstance(lib, bool) else lib == cli


def _compare(sig, passed: dict, library_only: set, X=None) -> None:
    """Every argument the CLI passed with no option given equals the library's default; every library
    parameter the CLI does not pass is one the library alone has (``library_only``)."""
    wrong = {}
    for name, value in passed.items():
        p = sig.parameters[name]
        if p.default is inspect.Parameter.empty:
            continue  # required (the model name, the matrix): no default to compare
        if not _same(name, p.default, value, X):
            wrong[name] = (p.default, value)
    assert not wrong, f"library default != CLI default (library, CLI): {wrong}"
    not_passed = {n for n, p in sig.parameters.items() if n not in passed and p.default is not inspect.Parameter.empty}
    assert not_passed == library_only, f"parameters the CLI does not pass: {sorted(not_passed)}"


def _compare_requests(sig, passed: dict, library_only: set, fixed: dict | None = None) -> None:
    """The CLI passes the request objects it built once (model, data, settings): they equal the
    objects the library builds from its own keyword defaults (``fixed``: settings the library sets
    itself); every other argument is compared as :func:`_compare` does."""
    from mhaaudit.request import KEYWORDS, build_requests

    passed = dict(passed)
    given = {k: passed.pop(k) for k in ("model", "data", "settings")}
    defaults = {n: p.default for n, p in sig.parameters.items() if n in KEYWORDS}
    defaults.update(
        {
            n: {"samples": DEFAULT_SAMPLES, "threshold": DEFAULT_THRESHOLD}[n]  # capacity_audit: None
            for n in ("samples", "threshold")
            if n in defaults and defaults[n] is None
        }
    )
    built = build_requests(given["model"].model, sig.parameters["data"].default, None, {**defaults, **(fixed or {})})
    assert built == (given["model"], given["data"], given["settings"])
    _compare(sig, passed, library_only=library_only | set(defaults) | {"data", "settings"})


def test_audit_defaults_are_check_defaults(monkeypatch, capsys):
    import mhaaudit.auditing

    calls: list = []
    _recorder(monkeypatch, mhaaudit.auditing, "audit", calls)
    run(capsys, "check", "vit-base")
    ((sig, passed),) = calls
    _compare_requests(sig, passed, library_only=set())
    assert passed["settings"].stop_when_decided is True and sig.parameters["stop_when_decided"].default is None


def test_check_features_defaults_are_check_defaults(monkeypatch, capsys):
    """check_features has no command of its own: it is what check runs on a captured feature set."""
    import mhaaudit.auditing

    calls: list = []
    _recorder(monkeypatch, mhaaudit.auditing, "audit", calls)
    run(capsys, "check", "vit-base")
    ((_, passed),) = calls
    sig = inspect.signature(mhaaudit.check_features)
    settings = passed.pop("settings")  # the CLI passes the Settings it built; check_features takes their parts
    passed = {
        **passed,
        "samples": settings.samples,
        "threshold": settings.threshold,
        "seed": settings.seed,
        "rtol": settings.rtol,
        "atol": settings.atol,
        "device": settings.device,
        "progress": settings.progress,
        "stop_when_decided": settings.stop_when_decided,
    }
    shared = {n: passed[n] for n in sig.parameters if n in passed}
    assert set(shared) == {
        "samples",
        "threshold",
        "seed",
        "rtol",
        "atol",
        "device",
        "sweep",
        "progress",
        "stop_when_decided",
    }
    _compare(sig, shared, library_only={"label", "settings"})


def test_capacity_audit_defaults_are_capacity_defaults(monkeypatch, capsys):
    import mhaaudit.capacity

    calls: list = []
    _recorder(monkeypatch, mhaaudit.capacity, "capacity_audit", calls)
    run(capsys, "capacity", "vit-base")
    ((sig, passed),) = calls
    _compare_requests(
        sig, passed, library_only={"layer"}, fixed={"stop_when_decided": True}
    )  # layer: the deprecated name of block, folded in by the CLI


def test_run_memorize_grid_defaults_are_memorize_defaults(monkeypatch, capsys):
    import mhaaudit.memorize

    calls: list = []
    _recorder(monkeypatch, mhaaudit.memorize, "run_memorize_grid", calls)
    run(capsys, "memorize", "--sizes", "10")
    ((sig, passed),) = calls
    # The CLI builds the request once; it is the one the library's keyword defaults build (memory_budget
    # and max_group, which shape how points are grouped for training, not what is trained, included).
    (request,) = passed.values()
    defaults = {n: p.default for n, p in sig.parameters.items() if n != "request"}
    assert set(defaults.values()) == {None}  # every keyword left at None: the request's field default
    assert EQUIVALENT["progress"] and request == mhaaudit.memorize.MemorizeRequest(
        sizes="10", progress=request.progress
    )


@pytest.mark.parametrize("target", ["table1", "table3", "figure1", "figure2"])
def test_reproduce_defaults_are_the_targets_defaults(monkeypatch, capsys, target):
    import mhaaudit.reproduce
    from mhaaudit.reproduce.targets import TARGET_FUNCTIONS

    calls: list = []

    def stand_in(name, **options):
        calls.append(options)
        raise _Recorded

    monkeypatch.setattr(mhaaudit.reproduce, "reproduce_paper", stand_in)
    run(capsys, "reproduce", target)
    (options,) = calls
    # seeds and vary are reproduce_paper's own (no seeds: one run); the others go to the target
    assert options.pop("seeds") is None and options.pop("vary") == "both"
    sig = inspect.signature(TARGET_FUNCTIONS[target])
    _compare(sig, options, library_only={"request"} if target != "figure2" else set())


def test_kruskal_defaults_are_the_estimators_defaults(monkeypatch, capsys, tmp_path):
    import mhaaudit.kruskal

    X = np.random.default_rng(0).standard_normal((40, 6))
    np.save(tmp_path / "x.npy", X)
    tests: list = []
    sweeps: list = []
    _recorder(monkeypatch, mhaaudit.kruskal, "subset_test", tests, call_through=True)
    _recorder(monkeypatch, mhaaudit.kruskal, "kruskal_sweep", sweeps, call_through=True)
    rc, _out, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", 3, "--sweep")
    assert rc == 0, err
    ((sig, passed),) = tests
    Xt = torch.from_numpy(X)
    # histogram_limit: how many draws' ranks are kept for the histogram (the CLI keeps the default)
    _compare(sig, passed, library_only={"histogram_limit", "sampling"}, X=Xt)
    # kruskal stops a decided test, as the library does (None: the Sampling's default)
    assert sig.parameters["stop_when_decided"].default is None and mhaaudit.kruskal.Sampling().stop_when_decided
    ((sig, passed),) = sweeps
    _compare(sig, passed, library_only={"kmax", "sampling"}, X=Xt)


def test_kruskal_command_defaults_are_estimate_kruskal_rank_defaults(monkeypatch, capsys):
    """``kruskal`` with no option asks for what ``estimate_kruskal_rank()`` builds from no keyword: the
    same request, capture (vit-base, random column, built-in data) and settings."""
    import dataclasses

    import mhaaudit.estimation as estimation
    from mhaaudit.settings import Settings

    calls: list = []

    def stand_in(features=None, **kwargs):
        calls.append(kwargs)
        raise _Recorded

    monkeypatch.setattr(estimation, "estimate_kruskal_rank", stand_in)
    run(capsys, "kruskal")
    (passed,) = calls
    assert passed["request"] == estimation.kruskal_request()
    assert passed["capture"] == estimation.kruskal_capture()
    default_data = estimation.DataRequest(None, "train", 2000, 32)
    assert passed["capture"].data == estimation.kruskal_capture().data == default_data
    # progress: the CLI shows bars only to a terminal, the library only when asked
    assert dataclasses.replace(passed["settings"], progress=False) == Settings.resolve(stop_when_decided=True)
    library = estimation._objects(None, None, None, None, {})
    assert library == (passed["request"], passed["capture"], dataclasses.replace(passed["settings"], progress=False))


#: The command options a library call spells otherwise: (command, flag) -> what docs/guides/python.md says it is.
_SPELT_OTHERWISE = {
    ("check", "--all-draws"): "`--all-draws` is\n`stop_when_decided=False`",
    ("kruskal", "--all-draws"): "`--all-draws` is\n`stop_when_decided=False`",
    ("reproduce", "--all-draws"): "`--all-draws` is\n`stop_when_decided=False`",
    ("capacity", "--from"): "`capacity --from` is `from_path=`",
    ("kruskal", "--variants"): "`kruskal --variants` is `variant=`",
    ("check", "--checkpoints"): "`audit_series` is `check --checkpoints`",
}
#: The options of how a command writes its results (the result objects' methods do that in Python).
_OUTPUT_OPTIONS = {"--format", "--out", "--plot", "--quiet", "--save-features", "--fail-on"}


def test_every_option_is_a_keyword_of_the_same_name_or_python_md_says_how_it_is_spelt():
    """docs/guides/python.md says the library takes the command's options under their names but those it
    lists; ``kruskal --variants`` (``variant=``) and ``check --checkpoints`` (``audit_series``) were not listed."""
    import typer.main

    from mhaaudit.cli.app import app
    from mhaaudit.reproduce import TARGET_FUNCTIONS

    functions = {
        "check": [mhaaudit.audit],
        "capacity": [mhaaudit.capacity_audit],
        "memorize": [mhaaudit.run_memorize_grid],
        "kruskal": [mhaaudit.estimate_kruskal_rank],
        "reproduce": [mhaaudit.reproduce_paper, mhaaudit.reproduce.reproduce_seeds, *TARGET_FUNCTIONS.values()],
    }
    page = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "python.md").read_text(encoding="utf-8")
    renamed = []
    for command, cmd in typer.main.get_command(app).commands.items():
        keywords = {name for fn in functions[command] for name in inspect.signature(fn).parameters}
        for param in cmd.params:
            flags = [o for o in param.opts if o.startswith("--")]
            if not flags or set(flags) & (_OUTPUT_OPTIONS | {"--help"}):
                continue
            if any(f.removeprefix("--").replace("-", "_") in keywords for f in flags):
                continue  # one of its spellings (kruskal's --n and --context-length: n=) is the keyword
            renamed.append((command, flags[0]))
    assert sorted(renamed) == sorted(_SPELT_OTHERWISE)
    for said in set(_SPELT_OTHERWISE.values()):
        assert " ".join(said.split()) in " ".join(page.split()), f"docs/guides/python.md should say {said!r}"


# --------------------------------------------------------------------------- print() and repr()


def _untimed(text: str) -> str:
    """The report with its timings masked (they differ from run to run); the run's ``time:`` line
    whole, since the command adds its own phases (its imports and its output) to the library's."""
    text = re.sub(r"time:.*?(?=\n    \S)", "time: #", text, flags=re.DOTALL)
    return re.sub(r"\b\d+(\.\d+)? s\b", "# s", text)


def _one_line(obj, cls: str) -> str:
    text = repr(obj)
    assert text.startswith(f"<{cls} ") and text.endswith(">") and "\n" not in text, text
    assert len(text) <= 240 and "tensor(" not in text and "array(" not in text, text
    return text


def test_audit_prints_as_check_prints(vit_dir, image_dir, capsys):
    small = dict(data=str(image_dir), limit=40, samples=50, batch_size=16)
    result = mhaaudit.audit(str(vit_dir), variants=["embedding", "random"], **small)
    as_command = str(with_flags(result))  # as the command writes it: its flags where the library names parameters
    rc, out, err = run(
        capsys,
        "check",
        vit_dir,
        "--data",
        image_dir,
        "--limit",
        40,
        "--samples",
        50,
        "--batch-size",
        16,
        "--variants",
        "embedding",
        "--variants",
        "random",
    )
    assert rc == 0, err
    assert _untimed(as_command) == _untimed(out)
    print(result)
    assert capsys.readouterr().out == str(result) + "\n"
    line = _one_line(result, "AuditResult")
    assert "embedding, random" in line and "T = 40" in line
    assert sum(int(w) for w in re.findall(r"(\d+) (?:holds|fails)", line)) == 8
    col = _one_line(result.column("random"), "Column")
    assert "random (layer 1, T = 40)" in col
    fs = _one_line(result.column("random").features, "FeatureSet")
    assert "T = 40" in fs and "d = 32" in fs


def test_capacity_prints_as_capacity_prints(vit_dir, image_dir, capsys):
    small = dict(data=str(image_dir), limit=40, samples=50, batch_size=16)
    result = mhaaudit.capacity_audit(str(vit_dir), variants=["random"], heads="1-2", **small)
    # as the command writes it: its flags where the library or a line of the report names parameters
    print_report(with_flags(capacity_report(with_flags(result))))
    as_command = capsys.readouterr().out
    rc, out, err = run(
        capsys,
        "capacity",
        vit_dir,
        "--data",
        image_dir,
        "--limit",
        40,
        "--samples",
        50,
        "--batch-size",
        16,
        "--variants",
        "random",
        "--heads",
        "1-2",
    )
    assert rc == 0, err
    assert _untimed(as_command) == _untimed(out)
    line = _one_line(result, "CapacityResult")
    top = max(result.columns[0].certificates, key=lambda c: c.heads)
    assert f"rank Z = {top.rank} with 2 heads" in line


def test_kruskal_results_print_as_kruskal_prints(tmp_path, capsys):
    X = np.random.default_rng(1).standard_normal((40, 6))
    X[7] = X[3]  # a dependent pair: a witness in the report
    np.save(tmp_path / "x.npy", X)
    t = mhaaudit.subset_test(torch.from_numpy(X), 3, samples=200)
    sw = mhaaudit.kruskal_sweep(torch.from_numpy(X), samples=200)
    rc, out, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", 3, "--samples", 200, "--sweep")
    assert rc == 0, err
    assert t.exact_status == "undecided"  # alone, no draw of the test found the pair; the sweep did:
    (t,), sw = shared_proofs([t], sw, torch.from_numpy(X))  # the command's tests share their proofs (kruskal.proofs)
    assert t.exact_status == "fails" and len(t.witness.indices) == 2
    assert str(t) in out and str(sw) in out  # the command adds a title line and the run's facts
    assert str(t).count("\n") >= 3 and "Kruskal-rank sweep" in str(sw)
    assert "holds" in _one_line(t, "SubsetTest") or "fails" in repr(t)
    assert f"estimate {sw.estimate}" in _one_line(sw, "Sweep")


def test_memorize_grid_prints_as_memorize_prints(capsys):
    from mhaaudit.render import render_memorize

    grid = mhaaudit.run_memorize_grid(
        vary="heads", values="1,2", sizes=[16], max_steps=8, n=4, head_dim=8, device="cpu"
    )
    render_memorize(grid)  # what the command prints for this grid
    assert str(grid) == capsys.readouterr().out
    line = _one_line(grid, "MemorizeGrid")
    assert "2 points" in line and "heads in 1,2" in line


def test_reproduction_prints_as_reproduce_prints(vit_dir, image_dir, capsys):
    from mhaaudit.render import render_reproduction

    r = mhaaudit.reproduce_paper(
        "table1", model={"vit": str(vit_dir)}, data=str(image_dir), limit=20, samples=40, device="cpu"
    )
    render_reproduction(r)
    assert str(r) == capsys.readouterr().out
    assert "published values" in _one_line(r, "Reproduction")
