"""A user's request as frozen objects: checked once where they are made, built from keywords in one
place, and a keyword that disagrees with an object given beside it refused, never resolved."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import torch

import mhaaudit
from mhaaudit import pipeline
from mhaaudit.auditing import audit, capture_features
from mhaaudit.capacity import capacity_audit
from mhaaudit.errors import InputError
from mhaaudit.request import KEYWORDS, DataRequest, ModelRequest, Requests, build_requests
from mhaaudit.settings import Settings

pytest.importorskip("transformers")

ENTRY_POINTS = (audit, capacity_audit, capture_features)


@pytest.fixture()
def no_data_pass(monkeypatch):
    """Fail the test if any example reaches a model: the refusal must come first."""

    def refuse(*a, **k):
        raise AssertionError("the data pass started before the input was refused")

    monkeypatch.setattr(pipeline, "stream", refuse)


def test_objects_are_checked_and_normalised_where_they_are_made(tmp_path):
    assert DataRequest(limit="12", batch_size="8") == DataRequest(limit=12, batch_size=8)
    assert DataRequest(batch_size="auto").batch_size == "auto"
    with pytest.raises(InputError, match=r"^limit"):
        DataRequest(limit=0)
    with pytest.raises(InputError, match="must name a column"):
        DataRequest(text_column=" ")
    with pytest.raises(InputError, match="does not exist"):
        ModelRequest("vit-base", weights_path=str(tmp_path / "missing"))
    assert ModelRequest("x", context_length="16", query_index="-1") == ModelRequest(
        "x", context_length=16, query_index=-1
    )
    request = DataRequest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.limit = 5  # type: ignore[misc]
    assert pipeline.DataRequest is DataRequest and pipeline.ModelRequest is ModelRequest
    assert (
        mhaaudit.DataRequest is DataRequest and mhaaudit.ModelRequest is ModelRequest and mhaaudit.Settings is Settings
    )


def test_keywords_build_the_same_objects_as_the_objects_themselves():
    keywords = {
        "weights": None,
        "context_length": 16,
        "split": "test",
        "limit": 300,
        "batch_size": "auto",
        "seed": 3,
        "device": "cpu",
        "samples": 100,
        "stop_when_decided": True,
    }
    built = build_requests("bert-base", "docs.txt", None, keywords)
    assert built == Requests(
        ModelRequest("bert-base", context_length=16),
        DataRequest("docs.txt", split="test", limit=300, batch_size="auto"),
        Settings.resolve(device="cpu", seed=3, samples=100, stop_when_decided=True),
    )
    # the objects themselves pass through unchanged, and keywords that agree with them are accepted
    again = build_requests(built.model, built.data, built.settings, keywords)
    assert again == built and again.model is built.model and again.settings is built.settings
    with pytest.raises(TypeError, match="not a request keyword"):
        build_requests("bert-base", None, None, {"limt": 3})


@pytest.mark.parametrize(
    "keyword, value, objects",
    [
        ("limit", 2000, {"data": DataRequest(limit=500)}),  # the keyword's default, given explicitly, still disagrees
        ("batch_size", "auto", {"data": DataRequest(batch_size=8)}),
        ("seed", 2, {"settings": Settings.resolve(device="cpu", seed=1)}),
        ("progress", True, {"settings": Settings.resolve(device="cpu")}),
        ("context_length", 16, {"model": ModelRequest("vit-base")}),
    ],
)
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_a_keyword_that_disagrees_with_an_object_is_refused(no_data_pass, entry, keyword, value, objects):
    if keyword not in inspect.signature(entry).parameters:
        pytest.skip(f"{entry.__name__} has no {keyword} keyword")
    args = {"model": "vit-base", **objects, keyword: value}
    with pytest.raises(
        InputError, match=rf"^{keyword} = .* disagrees with the (DataRequest|Settings|ModelRequest) given"
    ):
        entry(args.pop("model"), **args)


def test_capture_features_no_longer_ignores_keywords_beside_settings(no_data_pass, vit_dir):
    """``capture_features(settings=...)`` once dropped the flat keywords silently."""
    with pytest.raises(InputError, match="seed = 5 disagrees"):
        capture_features(str(vit_dir), settings=Settings.resolve(device="cpu", seed=0), seed=5)
    # a keyword that says what the object says is no conflict: the run goes on to the limit check
    with pytest.raises(InputError, match="below n = 17"):
        capture_features(str(vit_dir), settings=Settings.resolve(device="cpu", seed=5), seed=5, limit=5)
    with pytest.raises(InputError, match="below n = 17"):
        audit(ModelRequest(str(vit_dir)), data=DataRequest(limit=5), settings=Settings.resolve(device="cpu"))


def test_capacity_refuses_a_query_index_it_would_not_read(no_data_pass, vit_dir):
    with pytest.raises(InputError, match="query_index: capacity reads the model's own query token"):
        capacity_audit(ModelRequest(str(vit_dir), query_index=3))


def test_entry_points_show_their_keywords_and_take_no_hidden_one():
    for entry in ENTRY_POINTS:
        params = inspect.signature(entry).parameters
        assert "given" not in params and {"model", "data", "settings"} <= set(params)
        with pytest.raises(TypeError, match="given"):
            entry("vit-base", given=frozenset())


def _a_value_unlike(name: str, tmp_path):
    """A value of the request keyword ``name`` other than the field's default (None: none can be made
    offline without a model of the hub: a revision, repository code)."""
    return {
        "weights": str(tmp_path),
        "weights_path": str(tmp_path),
        "query_index": 3,
        "backend": "timm",
        "context_length": 16,
        "split": "test",
        "limit": 7,
        "batch_size": 8,
        "keep_duplicates": True,
        "text_column": "body",
        "image_column": "picture",
        "convert_rgb": True,
        "samples": 7,
        "threshold": 0.5,
        "seed": 2,
        "rtol": 1e-3,
        "atol": 1e-3,
        "stop_when_decided": False,
        "progress": True,
        "weights_seed": 1,
        "data_seed": 1,
    }.get(name)


SERIES = __import__("mhaaudit.series", fromlist=["audit_series"]).audit_series


@pytest.mark.parametrize("entry", [*ENTRY_POINTS, SERIES], ids=lambda f: f.__name__)
def test_every_request_keyword_of_an_entry_point_reaches_the_builder(no_data_pass, tmp_path, entry):
    """Each request keyword written in an entry point's signature is handed to ``build_requests``: given
    beside the object it sets a field of, with another value, it is refused by the one rule."""
    objects = {
        "model": ModelRequest("vit-base"),
        "data": DataRequest(),
        "settings": Settings.resolve(device="cpu", stop_when_decided=True),
    }
    owner = {name: "model" for name in ("weights", "weights_path", "query_index", "backend", "context_length")}
    owner |= {name: "data" for name in DataRequest.__dataclass_fields__}
    tried = 0
    for name in inspect.signature(entry).parameters:
        value = _a_value_unlike(name, tmp_path)
        if name not in KEYWORDS or value is None:
            continue
        what = owner.get(name, "settings")
        with pytest.raises(InputError, match=rf"^{name} = .* disagrees with the \w+ given as {what}"):
            entry(objects["model"], data=objects["data"], settings=objects["settings"], **{name: value})
        tried += 1
    assert tried >= 17, tried


def _parameters(node: ast.FunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def _typer_command(node: ast.FunctionDef) -> bool:
    """A command of the CLI: it takes the ``typer.Context`` (then one parameter per option)."""
    return any(a.annotation is not None and ast.unparse(a.annotation) == "typer.Context" for a in node.args.args)


def _hands_options(rel: str, node: ast.FunctionDef) -> bool:
    """A function of ``cli/library.py`` that hands a command's options to the library: at most three
    positional parameters, then one keyword-only parameter per option, as the command names them."""
    return rel == "cli/library.py" and len(node.args.posonlyargs + node.args.args) <= 3 and bool(node.args.kwonlyargs)


#: the modules the 8-parameter rule holds (docs/development.md, code layout)
RULED = (
    "request.py",
    "auditing.py",
    "probes.py",
    "audit_result.py",
    "capture.py",
    "pipeline.py",
    "batches.py",
    "estimation.py",
    *(f"seeds/{p.name}" for p in sorted((Path(mhaaudit.__file__).parent / "seeds").glob("*.py"))),
    "render_seeds.py",
    *(f"memorize/{p.name}" for p in sorted((Path(mhaaudit.__file__).parent / "memorize").glob("*.py"))),
    "cli/memorize.py",
    *(f"reproduce/{p.name}" for p in sorted((Path(mhaaudit.__file__).parent / "reproduce").glob("*.py"))),
    "cli/reproduce.py",
    "cli/check.py",
    "cli/series.py",
    "cli/capacity.py",
    "cli/kruskal.py",
    "cli/options.py",
    "cli/given.py",
    "cli/library.py",
    "cli/output.py",
    "settings.py",
    *(
        str(p.relative_to(Path(mhaaudit.__file__).parent))
        for package in ("capacity", "kruskal", "models", "series")
        for p in sorted((Path(mhaaudit.__file__).parent / package).rglob("*.py"))
    ),
)

#: The public entry points: each writes its request keywords out in its signature (the fields of its
#: request objects, None: not given), so it takes more than 8 parameters.
ENTRY_POINT_NAMES = {
    "audit",
    "capture_features",
    "check_features",
    "capacity_audit",
    "audit_series",
    "estimate_kruskal_rank",
    "subset_test",
    "kruskal_sweep",
    "run_memorize_grid",
    "table1",
    "table3",
    "figure1",
}


def test_no_function_of_the_request_path_takes_more_than_8_parameters():
    """The rule of the code layout (docs/development.md): at most 8 parameters, except the public entry
    points, whose signatures write out the fields of their request objects, the CLI's commands
    (``typer.Context`` first), one parameter per option, and the functions of ``cli/library.py`` that hand
    those options on, one keyword each."""
    root = Path(mhaaudit.__file__).parent
    long = []
    for rel in RULED:
        for node in ast.walk(ast.parse((root / rel).read_text())):
            if not isinstance(node, ast.FunctionDef) or _parameters(node) <= 8 or _typer_command(node):
                continue
            if _hands_options(rel, node):
                continue
            if node.name not in ENTRY_POINT_NAMES:
                long.append(f"{rel}:{node.name} ({_parameters(node)})")
    assert long == [], long


def _library_sources():
    root = Path(mhaaudit.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] != "cli":
            yield path.relative_to(root), ast.parse(path.read_text())


def test_no_function_reads_its_own_locals_and_no_signature_is_rewritten():
    """Signatures are written in the code: no library function finds its arguments in ``locals()``, and
    none has its ``__signature__`` or ``__annotations__`` set."""
    found = []
    for rel, tree in _library_sources():
        for node in ast.walk(tree):
            # locals() or vars() without an argument: the caller's own names
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("locals", "vars") and not node.args:
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            stored = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            if stored and node.attr in ("__signature__", "__annotations__"):
                found.append(f"{rel}:{node.lineno} sets {node.attr}")
    assert found == [], found


def test_entry_points_are_written_out():
    """Every public entry point's signature is its own: no ``**kwargs`` and no hidden parameter
    (``reproduce_paper`` hands its ``options`` to the target's written-out signature)."""
    for name in sorted(ENTRY_POINT_NAMES):
        module = {
            "table1": "mhaaudit.reproduce.targets",
            "table3": "mhaaudit.reproduce.targets",
            "figure1": "mhaaudit.reproduce.targets",
            "audit_series": "mhaaudit.series",
            "run_memorize_grid": "mhaaudit.memorize",
            "subset_test": "mhaaudit.kruskal",
            "kruskal_sweep": "mhaaudit.kruskal",
        }.get(name, "mhaaudit")
        fn = getattr(__import__(module, fromlist=[name]), name)
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds and "given" not in inspect.signature(fn).parameters, name


def test_the_cli_builds_the_objects_once(monkeypatch, capsys):
    """``check`` hands audit() the objects it built, with no convenience keyword beside them."""
    from clitools import run

    import mhaaudit.auditing

    calls = []

    def stand_in(model, **kwargs):
        calls.append((model, kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(mhaaudit.auditing, "audit", stand_in)
    run(capsys, "check", "vit-base", "--limit", "300", "--seed", "4", "--device", "cpu")
    ((model, kwargs),) = calls
    assert isinstance(model, ModelRequest) and kwargs["data"].limit == 300 and kwargs["settings"].seed == 4
    assert kwargs["settings"].device == torch.device("cpu")
    assert not set(kwargs) & {"limit", "seed", "device", "samples", "backend", "weights", "split"}


def test_the_three_objects_build_what_the_keywords_build(vit_dir):
    """The object form the Python guide shows is the keyword call's own: the same settings (a test stops once
    decided in both), so the same records."""
    kw = audit(str(vit_dir), limit=40, samples=200, device="cpu", seed=1)
    objects = audit(
        ModelRequest(str(vit_dir)),
        data=DataRequest(limit=40),
        settings=Settings.resolve(samples=200, device="cpu", seed=1),
    )
    assert objects.meta()["stop_when_decided"] is kw.meta()["stop_when_decided"] is True
    assert objects.records() == kw.records()
    assert any((r.get("planned_samples") or 0) > r["samples"] for r in kw.records())  # a test that stopped
