"""mhaaudit.estimation: ``estimate_kruskal_rank`` is what ``mhaaudit kruskal`` runs, as a library call
with the command's option names, or with its request objects."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from clitools import run

import mhaaudit
from mhaaudit.errors import InputError
from mhaaudit.estimation import KruskalResult, estimate_kruskal_rank, kruskal_capture, kruskal_request
from mhaaudit.settings import Settings

CAPTURE = ["--limit", "40", "--samples", "50", "--batch-size", "16"]


def _untimed(text: str) -> str:
    """The report without its seconds and without its last line, the phases (the command's include its own)."""
    return re.sub(r"\b\d+(\.\d+)? s\b", "# s", text.split("\n  time: ")[0])


@pytest.fixture()
def npy(tmp_path):
    X = np.random.default_rng(0).standard_normal((30, 8))
    X[5] = X[1] + X[2]  # a dependent triple
    path = tmp_path / "x.npy"
    np.save(path, X)
    return path


def _json(capsys, *args) -> dict:
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


def test_a_file_gives_the_records_and_the_report_the_command_gives(npy, capsys):
    result = mhaaudit.estimate_kruskal_rank(npy, k=[3, 8], n=3, sweep=True, samples=200)
    assert isinstance(result, KruskalResult) and (result.T, result.d, result.n) == (30, 8, 3)
    doc = _json(capsys, "kruskal", npy, "--k", 3, "--k", 8, "--n", 3, "--sweep", "--samples", 200)
    assert result.records() == doc["records"] and result.sweep_rows() == doc["sweep"]
    assert [r["check"] for r in result.records()] == ["assumption_1", "general_position"]
    untimed = ("total_s", "timings_s", "phases_s", "peak_rss_bytes", "created", "result")  # result: with its times
    assert {k: v for k, v in result.meta().items() if k not in untimed} == {
        k: v for k, v in doc["meta"].items() if k not in untimed
    }
    # the command's JSON reads back as the library's result, but for the run's times
    untimed_result = {"timings": {}, "total_s": 0.0, "peak_rss_bytes": None, "phases": {}}
    assert replace(KruskalResult.from_json(doc), **untimed_result) == replace(result, **untimed_result)
    rc, out, err = run(capsys, "kruskal", npy, "--k", 3, "--k", 8, "--n", 3, "--sweep", "--samples", 200)
    assert rc == 0, err
    assert _untimed(str(result)) == _untimed(out)
    assert "30 vectors in R^8" in repr(result) and "assumption_1 k = 3" in repr(result)
    assert len(result.to_pandas()) == 2 + len(doc["sweep"])


def test_without_sizes_n_and_min_T_d_are_tested_and_without_n_the_sweep_runs(npy):
    at_n = estimate_kruskal_rank(npy, n=4, samples=100)
    assert [(t.check, t.k) for t in at_n.tests] == [("assumption_1", 4), ("general_position", 8)] and at_n.sweep is None
    swept = estimate_kruskal_rank(npy, samples=100)
    assert swept.tests == () and swept.sweep is not None


def test_the_request_objects_give_what_the_keywords_give(npy):
    by_keywords = estimate_kruskal_rank(npy, k=3, samples=100, seed=2)
    by_objects = estimate_kruskal_rank(
        request=kruskal_request(npy, k=[3]), settings=Settings.resolve(samples=100, seed=2, stop_when_decided=True)
    )
    assert by_keywords.records() == by_objects.records()


def test_a_model_capture_gives_what_the_command_gives(vit_dir, image_dir, capsys):
    result = estimate_kruskal_rank(
        model=str(vit_dir), variant="embedding", data=str(image_dir), limit=40, batch_size=16, samples=50, vectors="a3"
    )
    doc = _json(
        capsys,
        "kruskal",
        "--model",
        vit_dir,
        "--variants",
        "embedding",
        "--data",
        image_dir,
        *CAPTURE,
        "--vectors",
        "a3",
    )
    assert result.records() == doc["records"] and result.meta()["capture"] == doc["meta"]["capture"]
    assert result.meta()["inputs"] == doc["meta"]["inputs"] and result.records()[0]["check"] == "assumption_3"
    data = mhaaudit.DataRequest(str(image_dir), "train", 40, 16)
    captured = estimate_kruskal_rank(
        capture=kruskal_capture(str(vit_dir), variant="embedding", data=data), vectors="a3", samples=50
    )
    assert captured.records() == result.records()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda f: estimate_kruskal_rank(f, request=kruskal_request(f.with_name("other.npy"))),
            InputError,
            "features = ",
        ),
        (
            lambda f: estimate_kruskal_rank(request=kruskal_request(f), k=3),
            InputError,
            "k = 3 disagrees with the KruskalRequest given as request (ks = ())",
        ),
        (
            lambda f: estimate_kruskal_rank(f, settings=Settings.resolve(), samples=10),
            InputError,
            "samples = 10 disagrees with the Settings given as settings",
        ),
        (
            lambda f: estimate_kruskal_rank(capture=kruskal_capture(), limit=10),
            InputError,
            "limit = 10 disagrees with the DataRequest given",
        ),
        (
            lambda f: estimate_kruskal_rank(capture=kruskal_capture(), variant="trained"),
            InputError,
            "variant = 'trained' disagrees with the Capture given as capture",
        ),
        (lambda f: estimate_kruskal_rank(f, limit=10), InputError, "limit has no effect when features"),
        (lambda f: estimate_kruskal_rank(f, capture=kruskal_capture()), InputError, "capture has no effect"),
        (lambda f: estimate_kruskal_rank(f, vectors="keys"), InputError, "unknown vectors 'keys'"),
        (lambda f: estimate_kruskal_rank(f, k=0), InputError, "k must be at least 1"),
        (lambda f: estimate_kruskal_rank(f, k=31), InputError, "larger than the number of vectors T = 30"),
        (lambda f: estimate_kruskal_rank(f, sizes=3), TypeError, "unexpected keyword argument 'sizes'"),
        (lambda f: estimate_kruskal_rank(key="x"), InputError, "key has no effect without features"),
        (lambda f: estimate_kruskal_rank(variant="random,trained"), InputError, "one column at a time"),
        (lambda f: estimate_kruskal_rank(n=5, capture=kruskal_capture(n=7)), InputError, "in one place"),
    ],
)
def test_refused_arguments(npy, call, error, match):
    with pytest.raises(error, match=re.escape(match)):
        call(npy)


def test_keywords_that_agree_with_the_objects_are_accepted(npy):
    """The rule of mhaaudit.request: a keyword beside an object is refused only when it says otherwise."""
    alone = estimate_kruskal_rank(request=kruskal_request(npy, k=[3]), samples=50, seed=2)
    both = estimate_kruskal_rank(
        npy, request=kruskal_request(npy, k=[3]), k=3, settings=Settings.resolve(samples=50, seed=2), seed=2
    )
    assert both.records() == alone.records()


def test_a_conflicting_keyword_is_refused_the_same_way_by_audit_and_kruskal(npy):
    """One rule for a keyword beside an object (mhaaudit.request.refuse_disagreement), for audit()
    and estimate_kruskal_rank() alike, before any model or data is read."""
    settings = Settings.resolve(device="cpu", seed=1)
    with pytest.raises(InputError) as by_audit:
        mhaaudit.audit("vit-base", settings=settings, seed=2)
    with pytest.raises(InputError) as by_kruskal:
        estimate_kruskal_rank(npy, settings=settings, seed=2)
    assert str(by_audit.value) == str(by_kruskal.value)
    assert "seed = 2 disagrees with the Settings given as settings (seed = 1)" in str(by_kruskal.value)
    data = mhaaudit.DataRequest(limit=500)
    with pytest.raises(InputError) as by_audit:
        mhaaudit.audit("vit-base", data=data, limit=300)
    with pytest.raises(InputError) as by_kruskal:
        estimate_kruskal_rank(capture=kruskal_capture(data=data), limit=300)
    assert str(by_audit.value) == str(by_kruskal.value)
