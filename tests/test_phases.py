"""mhaaudit.phases: exclusive phases of the main thread's wall time, on a clock the tests move."""

from __future__ import annotations

import threading

import pytest

from mhaaudit import phases


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(phases.time, "perf_counter", lambda: now[0])
    return now


def test_phases_are_exclusive_and_add_up_to_the_total_with_other(clock):
    with phases.recording() as rec:
        clock[0] += 1.0  # no phase: other
        with phases.phase("data"):
            clock[0] += 2.0
            with phases.phase("forward"):  # pauses data
                clock[0] += 5.0
            clock[0] += 1.0
        with phases.phase("data"):  # phases add up over their visits
            clock[0] += 0.5
    assert rec.spent == {"data": 3.5, "forward": 5.0}
    t = phases.timings(rec.spent, clock[0])
    assert list(t) == ["data", "forward", "other", "total"]  # the order of PHASES, then other and total
    assert t == {"data": 3.5, "forward": 5.0, "other": 1.0, "total": 9.5}
    assert phases.timings({"draws": 2.0}, 1.5)["other"] == 0.0  # never negative


def test_without_a_recording_or_on_another_thread_nothing_is_charged(clock):
    with phases.phase("forward"):  # no recording open: a no-op
        clock[0] += 1.0
    with phases.recording() as rec:
        seen = []

        def helper():
            with phases.phase("draws"):
                seen.append(True)

        t = threading.Thread(target=helper)
        t.start()
        t.join()
        with phases.phase("witness", device="cpu"):  # a CPU device has nothing to wait for
            clock[0] += 2.0
    assert seen and rec.spent == {"witness": 2.0}


def test_a_recording_inside_another_is_charged_to_it_once(clock):
    with phases.recording() as outer, phases.phase("model build"):
        clock[0] += 1.0
        with phases.recording() as inner, phases.phase("forward"):  # e.g. one audit of several: outer pauses
            clock[0] += 4.0
        clock[0] += 1.0
    assert inner.spent == {"forward": 4.0}
    assert outer.spent == {"model build": 2.0, "forward": 4.0}


def test_a_phase_left_open_by_an_error_is_closed(clock):
    with pytest.raises(RuntimeError), phases.recording() as rec, phases.phase("reduction"):
        clock[0] += 3.0
        raise RuntimeError("boom")
    assert rec.spent == {"reduction": 3.0}


def test_the_process_start_up_is_counted_once_and_only_for_the_command_line(monkeypatch):
    assert phases.process_seconds() > 0
    monkeypatch.setattr(phases, "_STARTUP_TAKEN", False)
    monkeypatch.setattr(phases.sys, "argv", ["/usr/bin/pytest", "-q"])
    assert phases.startup_seconds() == 0.0  # a command run inside another program
    monkeypatch.setattr(phases, "_STARTUP_TAKEN", False)
    monkeypatch.setattr(phases.sys, "argv", ["/venv/bin/mhaaudit", "check", "vit-base"])
    assert phases.startup_seconds() > 0
    assert phases.startup_seconds() == 0.0  # the next command of the same process
    monkeypatch.setattr(phases, "_STARTUP_TAKEN", False)
    monkeypatch.setattr(phases.sys, "argv", ["/src/mhaaudit/__main__.py", "check"])
    assert phases.startup_seconds() > 0


def test_a_phase_in_a_generator_closed_after_its_recording_ended_changes_nothing(clock):
    """Ctrl-C can end a recording while a generator is suspended inside one of its phases: the recording
    closes that phase, and the generator, closed later, finds it closed (no error at its collection)."""

    def batches():
        with phases.phase("data"):
            yield 1
            yield 2

    with pytest.raises(KeyboardInterrupt), phases.recording() as rec:
        gen = batches()
        next(gen)
        clock[0] += 2.0
        raise KeyboardInterrupt
    gen.close()
    assert rec.spent == {"data": 2.0}


def test_the_light_imports_window_and_the_libraries_are_imports_not_model_build(vit_dir, monkeypatch):
    """The light-imports window imports transformers' utilities as it opens: its time, and the libraries', is
    charged to ``imports``; ``model build`` holds the build itself."""
    import contextlib

    from mhaaudit import imports
    from mhaaudit.models import hf, load_model

    seen = []
    real_light, real_libraries = imports.light, hf.import_libraries

    @contextlib.contextmanager
    def light(*a, **kw):
        seen.append(("light", phases._current()._stack[-1]))
        with real_light(*a, **kw):
            yield

    def libraries():
        seen.append(("libraries", phases._current()._stack[-1]))
        real_libraries()

    monkeypatch.setattr(imports, "light", light)
    monkeypatch.setattr(hf, "import_libraries", libraries)
    with phases.recording() as clock, phases.phase("model build"):
        load_model(str(vit_dir), weights="random", device="cpu")
    assert seen == [("light", "imports"), ("libraries", "imports")]
    assert set(clock.spent) >= {"imports", "model build"}
