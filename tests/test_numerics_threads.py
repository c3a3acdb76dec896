"""The one context that changes the CPU kernels' thread count for a while, and its restoring."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_info

import mhaaudit
from mhaaudit.numerics.threads import intra_op_threads


def _openmp() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp"}


def _blas() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.fixture()
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_sets_torch_and_openmp_and_threads_started_inside_then_restores(two_threads):
    import numpy as np

    np.linalg.eigvalsh(np.eye(2))  # NumPy's BLAS loaded: it is limited too
    seen = []
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
        assert _openmp() <= {1} and _blas() <= {1}
        worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        worker.start()
        worker.join()
    assert seen == [1]  # a thread started inside the block takes the count
    assert torch.get_num_threads() == 2


def test_restores_on_error_and_none_changes_nothing(two_threads):
    with pytest.raises(KeyError), intra_op_threads(1):
        raise KeyError("x")
    assert torch.get_num_threads() == 2
    with intra_op_threads(None):
        assert torch.get_num_threads() == 2
    with pytest.raises(ValueError, match="at least 1"), intra_op_threads(0):
        pass
    assert torch.get_num_threads() == 2


def test_the_rank_setting_and_the_memorize_groups_use_it(two_threads):
    from mhaaudit.memorize.training import intra_op_threads as groups
    from mhaaudit.numerics import numerics

    with numerics(threads=1):
        assert torch.get_num_threads() == 1
    with groups(torch.device("cpu"), 1):
        assert torch.get_num_threads() == 1
    with groups(torch.device("cpu"), None):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 2


def test_no_other_module_sets_the_thread_count():
    root = Path(mhaaudit.__file__).parent
    setters = [
        f"{p.relative_to(root)}:{i}"
        for p in sorted(root.rglob("*.py"))
        if p.name != "threads.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bset_num_threads\(", line)
    ]
    assert not setters, setters


def test_libraries_loaded_later_are_limited_too(monkeypatch):
    """The loaded libraries are inspected again once more modules were imported (SciPy's LAPACK, say,
    brings its own BLAS): a library loaded after the first use is limited as well."""
    import types

    from mhaaudit.numerics import threads

    first = threads._controller()
    assert threads._controller() is first  # nothing imported since: the inspection is kept
    monkeypatch.setitem(sys.modules, "mhaaudit_test_newly_imported", types.ModuleType("x"))
    assert threads._controller() is not first
