"""benchmarks/stack_sampler.py: each sample is charged to the phase the run's own ``timings_s`` charge that moment to,
the command line's own phases (``imports``, ``render``) included."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from conftest import load_script

from mhaaudit import phases
from mhaaudit.cli import output

ROOT = Path(__file__).resolve().parents[1]


s = load_script(ROOT / "benchmarks" / "stack_sampler.py", "stack_sampler")


def test_the_command_lines_own_phases_are_named_as_its_timings_name_them(monkeypatch):
    """The library's import and the outputs are timed by the command line's clock, outside any recording: its
    ``timings_s`` give them as ``imports`` and ``render``, and so do the samples, not as ``other``."""
    monkeypatch.setattr(output.CommandClock, "__init__", output.CommandClock.__init__)  # undone after the test
    monkeypatch.setattr(s, "_COMMANDS", [])
    s.watch_commands()
    me = threading.get_ident()
    clock = output.CommandClock()
    assert s._phase(me, sys._getframe()) == "imports"  # the library not yet imported
    clock.imported = clock.begun + 1.0
    assert s._phase(me, sys._getframe()) == "other"
    with phases.recording():
        assert s._phase(me, sys._getframe()) == "other"
        with phases.phase("forward"):
            assert s._phase(me, sys._getframe()) == "forward"
    clock.render_begins()
    assert s._phase(me, sys._getframe()) == "render"


def test_before_any_command_clock_an_import_is_imports(monkeypatch, tmp_path):
    """Before the command line makes its clock (its start-up, which ``timings_s`` counts as ``imports``), a sample
    taken while a module is imported is ``imports``; one outside an import ``other``."""
    monkeypatch.setattr(s, "_COMMANDS", [])
    (tmp_path / "sampled_while_imported.py").write_text(
        "import sys, threading\nimport stack_sampler\n"
        "SEEN = stack_sampler._phase(threading.get_ident(), sys._getframe())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sampled_while_imported", raising=False)
    import sampled_while_imported  # the import is what is sampled

    assert sampled_while_imported.SEEN == "imports"
    assert s._phase(threading.get_ident(), sys._getframe()) == "other"
