"""A notebook is a first-class client: examples/quickstart.ipynb runs offline and shows finished
progress bars, whole titles and unbroken prose; progress without ipywidgets is plain text."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from mhaaudit import notebook

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.ipynb"


def _stream(cell, name: str) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name)


def _results(cell) -> list[dict]:
    return [o.data for o in cell.outputs if o.output_type in ("execute_result", "display_data")]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(QUICKSTART, as_version=4)
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "MHAAUDIT_CACHE": str(tmp_path_factory.mktemp("cache")),
        "TMPDIR": str(tmp_path_factory.mktemp("tmp")),  # the notebook's own scratch folder lands here
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them: this checkout's mhaaudit, offline
    try:
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}}
        )
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [c for c in nb.cells if c.cell_type == "code"]


def test_quickstart_runs_offline_and_says_what_it_did(quickstart):
    setup, audit_cell, table_cell, refusal_cell, own_cell = quickstart
    for cell in quickstart:
        assert not [o for o in cell.outputs if o.output_type == "error"]
        err = _stream(cell, "stderr")
        assert "Warning" not in err and "No such comm" not in err and "IProgress" not in err, err
    import mhaaudit

    assert mhaaudit.__file__.startswith(str(ROOT))
    assert _stream(setup, "stdout").startswith(mhaaudit.__version__)

    # the audit: one finished bar per phase (capture, then 3 sampled checks per column), each at 100%
    err = _stream(audit_cell, "stderr")
    finals = [line.split("\r")[-1] for line in err.split("\n") if line.strip()]
    assert len(finals) == 7 and all(" 100%|" in f for f in finals), finals
    assert finals[0].startswith("random weights: capture") and "48/48" in finals[0]
    assert any("done: 0 of 200 needed" in f for f in finals)  # decided without sampling: still a finished bar
    [shown] = _results(audit_cell)
    html, text = shown["text/html"], shown["text/plain"]
    title = "tiny-vit: vit (hf), n = 17, d = 32, T = 48 examples"
    assert title in text.splitlines()[0] and title in html  # the title is one line, not wrapped to the table
    [line] = [ln for ln in text.splitlines() if "Clopper-Pearson" in ln]  # the legend: one line, however long
    assert len(line) > 120 and line.startswith("  Each cell gives the estimate") and line.endswith("are exact.")
    assert "white-space: pre-wrap" in html

    [frame] = _results(table_cell)
    assert frame["text/plain"].count("\n") == 8 and "general_position" in frame["text/plain"]

    refused = _stream(refusal_cell, "stdout")
    assert refused.startswith("refused before the forward pass:") and "only 10 usable images of 31" in refused
    assert "20 not RGB (e.g. cats/01.png: mode L)" in refused and "convert_rgb" in refused and "--" not in refused

    own = _stream(own_cell, "stdout")
    assert "T = 30" in own and "torchvision" in own and "'unreadable': {'count': 1" in own
    assert "100 examples were asked for" in own and "T = 30" in own


def test_text_progress_without_widgets_finishes_every_bar(monkeypatch):
    monkeypatch.setattr(notebook, "has_widgets", lambda: False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with notebook.notebook_task("decided without sampling", 300):
        pass
    with notebook.notebook_task("decided early", 300) as advance:
        advance(40)
    with notebook.notebook_task("all draws", 5) as advance:
        advance(5)
    with pytest.raises(KeyboardInterrupt), notebook.notebook_task("interrupted", 300) as advance:
        advance(7)
        raise KeyboardInterrupt
    finals = [line.split("\r")[-1] for line in err.getvalue().split("\n") if line.strip()]
    assert [f.split(":")[0] for f in finals] == [
        "decided without sampling",
        "decided early",
        "all draws",
        "interrupted",
    ]
    assert "100%" in finals[0] and "done: 0 of 300 needed" in finals[0]
    assert "100%" in finals[1] and "40/40" in finals[1] and "done after 40 of 300" in finals[1]
    assert "100%" in finals[2] and "5/5" in finals[2]
    assert "7/300" in finals[3] and "100%" not in finals[3]  # an interrupted phase is not shown as finished


def test_progress_goes_to_the_notebook_only_in_a_kernel(monkeypatch):
    from mhaaudit import progress

    assert not notebook.in_notebook()  # plain Python (pytest): the terminal path
    used = []
    monkeypatch.setattr(notebook, "in_notebook", lambda: True)
    monkeypatch.setattr(notebook, "notebook_task", lambda d, t: used.append((d, t)) or _null())
    with progress.task("phase", 10, True) as advance:
        advance(10)
    assert used == [("phase", 10)]


class _null:
    def __enter__(self):
        return lambda n=1: None

    def __exit__(self, *exc):
        return False


def test_a_widget_bar_is_finished_too():
    """tqdm.notebook's widget keeps its own maximum: finishing a phase early updates it as well."""

    class Widget:
        max, value = 300, 0

    class Bar:  # the attributes of a tqdm.notebook bar that finish() touches
        def __init__(self):
            self.n, self.total, self.postfix = 0, 300, ""
            self.container = type("Box", (), {"children": [None, Widget(), None]})()

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text

        def refresh(self):
            pass

    bar = Bar()
    notebook.finish(bar)
    progress = bar.container.children[1]
    assert (bar.n, bar.total, progress.value, progress.max) == (1, 1, 1, 1) and bar.postfix == "done: 0 of 300 needed"
    bar = Bar()
    bar.n = 40
    notebook.finish(bar)
    progress = bar.container.children[1]
    assert (bar.total, progress.value, progress.max) == (40, 40, 40) and bar.postfix == "done after 40 of 300"
