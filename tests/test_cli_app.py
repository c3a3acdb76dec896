"""The application: help that reads like a standard CLI, and Ctrl-C at any phase.

Ctrl-C is tested the way a person causes it: SIGINT sent to a real ``python -m mhaaudit`` (or
console-script) process. The process reports on stderr which phase it is in (Python's
``-X importtime`` lines while it imports, the command's own status lines later), and the signal
is sent once a phase is reached, so each test interrupts the phase it names. Whatever the phase,
the answer is the same: one line "Error: interrupted", status 130, no file left behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from clitools import help_text, run, run_python
from conftest import tmp_leftovers

from mhaaudit.cli.app import main

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("check", "kruskal", "capacity", "memorize")

# What pip's generated console script for ``mhaaudit = "mhaaudit.cli.app:run"`` runs.
CONSOLE_SCRIPT = "import sys; from mhaaudit.cli.app import run; sys.argv[0] = 'mhaaudit'; sys.exit(run())"


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_dash_h_is_help(capsys, command):
    args = [command, "-h"] if command else ["-h"]
    rc, out, err = run(capsys, *args)
    assert rc == 0 and "Usage" in out and err == ""
    _rc2, out2, _ = run(capsys, *[a if a != "-h" else "--help" for a in args])
    assert out2 == out


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_show_no_value_type(capsys, command):
    text = help_text(capsys, command)
    assert "<bool>" not in text and "list[" not in text
    assert "-h" in text and "--help" in text


@pytest.mark.parametrize("command", (*COMMANDS, "reproduce"))
def test_docstring_sections_stay_out_of_the_help(capsys, command):
    """A command's docstring may end with a "Raises:" section for the code's readers, after a form feed
    (``\\f``): the help stops there."""
    text = help_text(capsys, command)
    assert "Raises:" not in text and "InputError" not in text


def test_defaults_of_optional_options_are_shown(capsys):
    text = help_text(capsys, "kruskal")
    assert "(default: queries)" in text and "(default: random)" in text and "(default: vit-base)" in text
    assert "(default 1 = after the first block" in help_text(capsys, "check")


def _help_words(capsys, monkeypatch, command: str, columns: int) -> set[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, err = run(capsys, *([command] if command else []), "--help")
    assert rc == 0, err
    assert max(len(line) for line in out.splitlines()) <= columns
    return set(re.sub(r"[\u2500-\u257f]", " ", out).split())


@pytest.mark.parametrize("columns", (80, 100, 132))
@pytest.mark.parametrize("command", ("", *COMMANDS, "reproduce"))
def test_help_never_breaks_inside_a_word(capsys, monkeypatch, command, columns):
    """Rendered at a terminal's width, the help holds the same words as at a very wide one: nothing
    is cut inside a word (a long list of choices is named in the type column and listed in the help)."""
    wide = _help_words(capsys, monkeypatch, command, 1000)
    narrow = _help_words(capsys, monkeypatch, command, columns)
    assert sorted(narrow - wide) == []


def _description(capsys, monkeypatch, command: str, columns: int) -> list[str]:
    """The help's lines between the summary paragraph and the first panel, stripped."""
    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, err = run(capsys, *([command] if command else []), "--help")
    assert rc == 0, err
    lines = [line.strip() for line in out.splitlines()]
    top = lines[: next(i for i, line in enumerate(lines) if line.startswith("\u256d"))]
    paragraphs = "\n".join(top).split("\n\n")
    body = [p for p in paragraphs if p.strip() and not p.strip().startswith("Usage")][1:]
    return [line for p in body for line in p.splitlines() if line]


@pytest.mark.parametrize("command", ("", *COMMANDS, "reproduce"))
def test_the_description_reads_the_same_in_an_80_column_terminal(capsys, monkeypatch, command):
    """Past its summary, a command's description keeps the docstring's lines: at 80 columns none of
    them is wrapped, which would leave a word or two alone on a line before the next one starts."""
    wide = _description(capsys, monkeypatch, command, 1000)
    assert _description(capsys, monkeypatch, command, 80) == wide


def test_long_choices_are_listed_in_the_help(capsys):
    text = help_text(capsys, "memorize")
    assert "--preset <preset>" in text and "One of: paper-fig2a, paper-fig2b, paper-fig2c, cpu." in text
    assert "<table|json|parquet>" in text  # a short list stays the type


def test_a_short_list_of_choices_reads_the_same_from_every_typer_release():
    """Before 0.27, Typer hands click a plain choice, which click shows as ``[table|json]``: the help
    still shows it as every other value type, ``<table|json>``."""
    import click

    from mhaaudit.cli.app import Command

    command = Command("c", params=[click.Option(["--format"], type=click.Choice(["table", "json"]))])
    ctx = click.Context(command)
    shown = [p.make_metavar(ctx) for p in command.get_params(ctx) if p.name == "format"]
    assert shown == ["<table|json>"]


def test_no_command_prints_help_on_stderr(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and out == "" and "Usage" in err


# --------------------------------------------------------------------------- a fast start

# The heavy libraries a command needs; help and the version must answer without any of them.
HEAVY = (
    "torch",
    "transformers",
    "timm",
    "numpy",
    "scipy",
    "mhaaudit.settings",
    "mhaaudit.audit",
    "mhaaudit.kruskal",
    "mhaaudit.memorize",
    "mhaaudit.capacity",
    "mhaaudit.reproduce",
)

# Runs the command line as an entry point does, then reports on stderr which modules were imported.
_REPORT_MODULES = """
import json, runpy, sys
sys.argv = ["mhaaudit", *json.loads(sys.argv[1])]
try:
    if sys.argv[1:2] == ["--entry=console"]:
        del sys.argv[1]
        from mhaaudit.cli.app import run
        run()
    else:
        runpy.run_module("mhaaudit", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("MODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


@pytest.mark.parametrize("entry", ["python -m mhaaudit", "console script"])
@pytest.mark.parametrize(
    "args",
    [["--help"], ["-h"], ["--version"], *([c, "--help"] for c in (*COMMANDS, "reproduce"))],
    ids=lambda a: " ".join(a),
)
def test_help_and_version_do_not_import_the_library(args, entry):
    """``--help`` and ``--version`` answer without importing torch or the library's modules."""
    import json

    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    argv = (["--entry=console"] if entry == "console script" else []) + args
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT_MODULES, json.dumps(argv)], env=env, capture_output=True, text=True, timeout=120
    )
    report = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")]
    assert report, proc.stderr
    seen = json.loads(report[-1][len("MODULES ") :])
    assert seen["code"] in (0, None), proc.stderr
    assert ("Usage" in proc.stdout) if args != ["--version"] else proc.stdout.startswith("mhaaudit ")
    imported = set(seen["modules"])
    assert "mhaaudit.cli.app" in imported  # the command line really ran in the child
    assert sorted(m for m in HEAVY if m in imported) == []


def _complete(words: str, shell: str = "bash") -> subprocess.CompletedProcess:
    """What the completion script of ``mhaaudit --install-completion`` asks the program for ``words``."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HF_HUB_OFFLINE="1",
        _MHAAUDIT_COMPLETE=f"complete_{shell}",
        COMP_WORDS=words,
        COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    )
    return subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT], env=env, capture_output=True, text=True, timeout=120)


def test_shell_completion():
    """The script --show-completion prints calls the program back, which completes commands and choices.
    --show-completion names the shell it runs in (found among its parent processes), so the program runs as a
    child of bash (not exec'd by it): the test then holds in a test run with no shell among its parents too (one
    started by a service, or left running by the shell that started it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    script = subprocess.run(
        ["bash", "-c", '"$0" "$@"; exit $?', sys.executable, "-c", CONSOLE_SCRIPT, "--show-completion"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert script.returncode == 0, script.stderr
    assert "_MHAAUDIT_COMPLETE=complete_bash" in script.stdout and "complete " in script.stdout
    commands = _complete("mhaaudit ca")
    assert commands.returncode == 0 and commands.stdout.split() == ["capacity"], commands
    formats = _complete("mhaaudit check vit-base --format ")
    assert formats.returncode == 0 and formats.stdout.split() == ["table", "json", "parquet"], formats
    assert "--samples" in _complete("mhaaudit kruskal --sam").stdout.split()


# --------------------------------------------------------------------------- Ctrl-C


def _sigint_as_in_a_terminal() -> None:
    """In the child: SIGINT with its default disposition, as a program started from a terminal
    has it. A test run started in the background of a non-interactive shell (a CI job, ``cmd &``)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(argv: list[str], marker, cwd: Path, after: float = 0.0, timeout: float = 120.0) -> tuple[int, list[str]]:
    """Start ``python argv``; send SIGINT ``after`` seconds past the first stderr line ``marker``
    accepts. Returns (status, stderr lines without the ``-X importtime`` ones)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PYTHONPROFILEIMPORTTIME="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",  # SIGABRT prints every thread's stack: what a hang below shows
    )
    env.pop("MHAAUDIT_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_in_a_terminal,
    )
    lines: list[str] = []
    sent = threading.Event()

    def send() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            sent.set()

    def read() -> None:
        timer = None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if timer is None and marker(line):
                timer = threading.Timer(after, send)
                timer.start()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hang: fail with where each of its threads was
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=10)
        stacks = [ln for ln in lines if not ln.startswith("import time:")]
        said = "\n".join(stacks[-150:])
        pytest.fail(f"still running {timeout:.0f} s after it started (signal sent: {sent.is_set()}):\n{said}")
    finally:
        if proc.poll() is None:  # pragma: no cover - not even SIGABRT ended it
            proc.kill()
    reader.join(timeout=10)
    assert sent.is_set(), f"the process ended before the signal; stderr: {lines[-5:]}"
    return proc.returncode, [ln for ln in lines if not ln.startswith("import time:")]


def _assert_interrupted(rc: int, err: list[str], folder: Path) -> None:
    assert rc == 130, err
    assert err[-1:] == ["Error: interrupted"], err
    assert not any("Traceback" in ln or "KeyboardInterrupt" in ln for ln in err), err
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("out")) == []
    assert tmp_leftovers(folder) == []


def _imported(module: str):
    """A marker: the ``-X importtime`` line saying ``module`` finished importing."""
    pattern = re.compile(rf"^import time:.*\|\s+{re.escape(module)}$")
    return lambda line: pattern.match(line.rstrip()) is not None


@pytest.mark.parametrize("entry", ["python -m mhaaudit", "console script"])
def test_interrupt_while_importing(tmp_path, entry):
    """Ctrl-C while the libraries load, before main runs: the same one line."""
    np.save(tmp_path / "m.npy", np.random.default_rng(0).standard_normal((50, 8)))
    head = ["-m", "mhaaudit"] if entry.startswith("python") else ["-c", CONSOLE_SCRIPT]
    rc, err = _interrupt([*head, "kruskal", "m.npy", "--out", "out.parquet"], _imported("click"), tmp_path)
    _assert_interrupted(rc, err, tmp_path)


def test_interrupt_while_sampling(tmp_path):
    np.save(tmp_path / "m.npy", np.random.default_rng(0).standard_normal((3000, 200)).astype(np.float32))
    rc, err = _interrupt(
        [
            "-m",
            "mhaaudit",
            "kruskal",
            "m.npy",
            "--sweep",
            "--samples",
            "200000",
            "--out",
            "out.parquet",
            "--plot",
            "out.png",
        ],
        _imported("mhaaudit.kruskal"),
        tmp_path,
        after=2.0,
    )
    _assert_interrupted(rc, err, tmp_path)


# A run that ends by a signal while a helper thread waits for ever on a lock the interrupted main thread kept
# (mhaaudit.workers says how Ctrl-C leaves one): the interpreter's own end would wait for that thread. It is
# not run at all (its atexit hooks are part of it): a signal that stopped an import half way can leave native
# state whose teardown aborts the process.
_STUCK_HELPER = """
import atexit, sys, threading
from mhaaudit.cli import app
atexit.register(lambda: sys.stderr.write("teardown\\n"))
kept = threading.Lock()
kept.acquire()
threading.Thread(target=kept.acquire, name="stuck").start()  # not a daemon: the interpreter's end joins it
def main(argv=None):
    sys.stdout.write("data so far\\n")
    return {status}
app.main = main
app.run([])
"""


@pytest.mark.parametrize("status", [130, 143, 129])
def test_after_a_signal_the_process_ends_whatever_a_helper_waits_on(status):
    proc = run_python(_STUCK_HELPER.format(status=status))
    assert proc.returncode == status, proc.stderr
    assert proc.stdout == "data so far\n"  # flushed before the end
    assert "teardown" not in proc.stderr  # ended without the interpreter's teardown


# A run whose main thread never ends its unwinding after a signal (here it waits for ever in a finally block),
# with one output staged and one half written: the end comes a bounded time after the signal all the same.
_STUCK_UNWINDING = """
import os, signal, sys, threading
from mhaaudit import ending
from mhaaudit.cli import app
from mhaaudit.staging import atomic_path, staged_outputs
app.SIGNAL_END_LIMIT_S = 4.0  # the end comes 1 s after the signal (3 s are kept for the end itself)
def main(argv=None):
    app._handle_signals()
    with staged_outputs():
        with atomic_path("whole.txt") as tmp:
            tmp.write_text("whole")
        with atomic_path("half.txt") as tmp:
            tmp.write_text("half")
            sys.stdout.write("data so far\\n")
            sys.stdout.flush()
            try:
                os.kill(os.getpid(), {signum})
                threading.Event().wait(30)  # the signal's exception is raised here
            except BaseException:
                if {settled} == 2:  # the run said its line and settled on a failure, then stuck
                    sys.stderr.write("Error: said by the run\\n")
                    ending.settle(2, said=True)
                elif {settled} == 0:  # the run went on as if it had succeeded, then stuck
                    ending.settle(0, said=False)
                raise
            finally:
                threading.Event().wait()  # an unwinding that never ends
app.main = main
app.run([])
"""


def _signals_as_in_a_terminal() -> None:
    """In the child: SIGINT, SIGTERM and SIGHUP with their default dispositions (see
    :func:`_sigint_as_in_a_terminal`; ``nohup`` ignores SIGHUP)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("settled", [None, 0, 2])
@pytest.mark.parametrize(
    "signum, line",
    [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated (SIGTERM)"), (signal.SIGHUP, "hung up (SIGHUP)")],
)
def test_after_a_signal_the_process_ends_whatever_its_main_thread_waits_on(tmp_path, signum, line, settled):
    script = _STUCK_UNWINDING.format(signum=int(signum), settled=settled)
    proc = run_python(script, cwd=tmp_path, preexec_fn=_signals_as_in_a_terminal)
    # the status and the one line the run settled on when it failed, or else the signal's
    assert proc.returncode == (2 if settled == 2 else 128 + int(signum)), proc.stderr
    assert proc.stdout == "data so far\n"
    assert proc.stderr.splitlines() == ["Error: said by the run" if settled == 2 else f"Error: {line}"]
    assert sorted(os.listdir(tmp_path)) == []  # the staged output and the half-written one are gone


# A signal that came while the libraries loaded, whose exception was lost: a library swallowed it (a bare except),
# or the handler raised it where Python cannot raise it (a finaliser, or the weakref callback an import's module
# lock has), where Python would print "Exception ignored ..." and a traceback and go on, which the command line's own
# process does not print. The handler noted the signal, so the run never starts and ends on it with its one line.
_LOST_WHILE_IMPORTING = """
import signal, sys
from mhaaudit import ending
{lose}
def main(argv=None):
    sys.stdout.write("the run started\\n")
    return 0
app.main = main
app.run([])
"""
_LOSES = {
    "swallowed": """
from mhaaudit.cli import app
ending.note({signum})  # what the handler does before it raises
signal.signal({signum}, signal.SIG_IGN)  # and what it leaves behind
""",
    "raised-in-a-finaliser": """
ending.own_the_process()
from mhaaudit.cli import app
class Finalised:
    def __del__(self):
        ending.note({signum})
        signal.signal({signum}, signal.SIG_IGN)
        raise app.{ending}()
Finalised()
""",
}


@pytest.mark.parametrize("how", list(_LOSES))
@pytest.mark.parametrize(
    "signum, ending, line",
    [(signal.SIGTERM, "Terminated", "terminated (SIGTERM)"), (signal.SIGHUP, "HungUp", "hung up (SIGHUP)")],
)
def test_a_signal_lost_while_importing_still_ends_the_run_with_one_line(how, signum, ending, line):
    lose = _LOSES[how].format(signum=int(signum), ending=ending)
    proc = run_python(_LOST_WHILE_IMPORTING.format(lose=lose))
    assert proc.returncode == 128 + int(signum), proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"Error: {line}"]


# The same, once the run is under way: the handler raised the signal's exception in a finaliser, so nothing unwinds
# the run; the watch ends it at once (mhaaudit.ending.hasten), not after its delay of seconds, with the signal's
# one line and status. The run goes on for 5 s after the finaliser, then says so: an end after it is too late.
_LOST_MID_RUN = """
import os, sys, time
from mhaaudit import ending
ending.own_the_process()
from mhaaudit.cli import app
class Finalised:
    def __del__(self):
        os.kill(os.getpid(), {signum})
        for _ in range(1000000):  # the handler runs here, in the finaliser
            pass
def command(args=None, prog_name=None, standalone_mode=True):
    Finalised()
    time.sleep(5)
    sys.stdout.write("the run went on\\n")
    sys.stdout.flush()
    time.sleep(30)
    return 0
app.app = command  # the command line's own handlers, streams and staged outputs around it
app.run(["a-command"])
"""


@pytest.mark.parametrize(
    "signum, line",
    [
        (signal.SIGTERM, "terminated (SIGTERM)"),
        (signal.SIGHUP, "hung up (SIGHUP)"),
        (signal.SIGINT, "interrupted"),
    ],
)
def test_a_signal_lost_in_a_finaliser_mid_run_ends_the_run_at_once(signum, line):
    proc = run_python(_LOST_MID_RUN.format(signum=int(signum)))
    assert proc.returncode == 128 + int(signum), proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"Error: {line}"]


def test_a_watch_started_after_a_signal_counts_from_its_start():
    """:func:`mhaaudit.ending.watch` started after a signal was noted ends the process all the same."""
    script = (
        "import sys, threading\n"
        "from mhaaudit import ending\n"
        "ending.note(15)\n"
        "def end(s):\n"
        "    sys.stderr.write(f'ended by {s}\\n'); sys.stderr.flush(); __import__('os')._exit(7)\n"
        "ending.watch(0.2, end, [15])\n"
        "threading.Event().wait(30)\n"
    )
    proc = run_python(script)
    assert proc.returncode == 7 and proc.stderr == "ended by 15\n", proc.stderr


# Ctrl-C while the command line's libraries load (here: raised as typer is imported). Where SIGINT has Python's
# default handler, the app's own handler takes it: one line and status 130; in the command line's own process
# (here the console script's name in sys.argv[0]) without the interpreter's teardown, in a host that imports the
# library (a notebook kernel sets Python's default handler for each cell) as SystemExit, which the host may
# catch. Where a host handles SIGINT itself, the KeyboardInterrupt is the host's: it goes on.
_CTRL_C_WHILE_IMPORTING = """
import atexit, signal, sys
class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Stop())
atexit.register(lambda: sys.stderr.write("teardown\\n"))
if {cli}:
    sys.argv[0] = "/usr/local/bin/mhaaudit"
if {host}:
    signal.signal(signal.SIGINT, lambda *a: None)  # the host's own handler
try:
    import mhaaudit.cli.app
except KeyboardInterrupt:
    print("the host goes on")
"""


@pytest.mark.parametrize("host, cli", [(False, True), (False, False), (True, False)])
def test_ctrl_c_while_importing_is_the_app_s_or_its_host_s(host, cli):
    proc = run_python(_CTRL_C_WHILE_IMPORTING.format(host=host, cli=cli))
    if host:
        assert proc.returncode == 0 and proc.stdout == "the host goes on\n", proc.stderr
        assert proc.stderr.splitlines() == ["teardown"]
    else:
        assert proc.returncode == 130 and proc.stdout == "", proc.stderr
        # the command line's own process ends at once; a host's goes through its own end (SystemExit)
        assert proc.stderr.splitlines() == ["Error: interrupted", *([] if cli else ["teardown"])]


_SLOW_HELPER = """
import atexit, sys, threading, time
from mhaaudit.cli import app
atexit.register(lambda: sys.stderr.write("teardown\\n"))
def helper():
    time.sleep(1.5)
    sys.stderr.write("helper done\\n")
threading.Thread(target=helper).start()
app.main = lambda argv=None: {status}
app.run([])
"""


@pytest.mark.parametrize("status", [0, 2, 3])
def test_a_run_that_ends_without_a_signal_waits_for_its_helpers(status):
    proc = run_python(_SLOW_HELPER.format(status=status))
    assert proc.returncode == status, proc.stderr
    assert proc.stderr.endswith("helper done\nteardown\n")  # not cut short: only a signal's end skips them


@pytest.mark.slow
@pytest.mark.parametrize("phase, after", [("model loading", 0.0), ("forward pass", 1.5), ("checks", 6.0)])
def test_interrupt_check(tmp_path, vit_dir, image_dir, phase, after):
    """Ctrl-C while check loads the model, runs it, or samples: one line, nothing written."""
    rc, err = _interrupt(
        [
            "-m",
            "mhaaudit",
            "check",
            str(vit_dir),
            "--data",
            str(image_dir),
            "--limit",
            "60",
            "--batch-size",
            "4",
            "--samples",
            "200000",
            "--sweep",
            "--out",
            "out.parquet",
            "--save-features",
            "out-features",
        ],
        _imported("mhaaudit.models"),
        tmp_path,
        after=after,
    )
    _assert_interrupted(rc, err, tmp_path)


@pytest.mark.slow
def test_interrupt_memorize_training(tmp_path):
    rc, err = _interrupt(
        [
            "-m",
            "mhaaudit",
            "memorize",
            "--heads",
            "1,2",
            "--n",
            "4",
            "--head-dim",
            "8",
            "--sizes",
            "4000",
            "--max-steps",
            "100000",
            "--device",
            "cpu",
            "--out",
            "out.parquet",
        ],
        _imported("mhaaudit.cli.app"),
        tmp_path,
        after=3.0,
    )
    _assert_interrupted(rc, err, tmp_path)


def test_ctrl_c_after_an_output_was_staged_keeps_no_output(tmp_path, capsys, monkeypatch):
    """Typer turns Ctrl-C into status 130 without raising: the outputs staged before it are still
    discarded, and an earlier file at an output path is left as it was."""
    import numpy as np

    from mhaaudit import io

    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((40, 6)))
    (tmp_path / "r.parquet").write_bytes(b"earlier")
    real = io.write_parquet

    def then_interrupt(*a, **k):
        real(*a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(io, "write_parquet", then_interrupt)
    rc = main(
        [
            str(a)
            for a in (
                "kruskal",
                tmp_path / "X.npy",
                "--k",
                "3",
                "--samples",
                "64",
                "--out",
                tmp_path / "r.parquet",
                "--plot",
                tmp_path / "p.png",
                "--format",
                "json",
            )
        ]
    )
    err = capsys.readouterr().err
    assert rc == 130 and err.strip() == "Error: interrupted", err
    assert (tmp_path / "r.parquet").read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.npy", "r.parquet"]


def _raise_while_a_class_is_made(signal_error: BaseException) -> None:
    """Raise ``signal_error`` where Python before 3.12 wraps it (in a RuntimeError: a ``__set_name__`` fails)."""

    class Raises:
        def __set_name__(self, owner, name):
            raise signal_error

    class Made:  # made for its __set_name__
        field = Raises()


def _raise_from_a_cleanup(signal_error: BaseException) -> None:
    """An error of a cleanup that runs while ``signal_error`` unwinds the run, replacing it."""
    try:
        raise signal_error
    finally:
        raise OSError("cleanup failed")


@pytest.mark.parametrize("how", [_raise_while_a_class_is_made, _raise_from_a_cleanup])
@pytest.mark.parametrize("signal_name", ["interrupt", "terminate"])
def test_a_signal_wrapped_or_replaced_by_another_error_is_still_the_signal(
    tmp_path, capsys, monkeypatch, how, signal_name
):
    """Ctrl-C (or SIGTERM) during the import of a module that makes classes, or while a cleanup fails, ends
    the run with the signal's line and status, not as an internal error."""
    from mhaaudit import io
    from mhaaudit.cli.app import Terminated

    error, line, status = {
        "interrupt": (KeyboardInterrupt(), "Error: interrupted", 130),
        "terminate": (Terminated(), "Error: terminated (SIGTERM)", 143),
    }[signal_name]
    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((40, 6)))
    monkeypatch.setattr(io, "write_parquet", lambda *a, **k: how(error))
    args = ["kruskal", tmp_path / "X.npy", "--k", "3", "--samples", "64", "--out", tmp_path / "r.parquet"]
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert (rc, err.strip()) == (status, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.npy"]


def test_a_signal_during_the_commit_of_outputs_is_delivered_after_it(tmp_path):
    """The renames that put a run's outputs in place are not cut by Ctrl-C: the signal is held
    back, every output is in place, and the signal is delivered right after."""
    import signal

    import mhaaudit.staging as staging_module
    from mhaaudit.io import atomic_path
    from mhaaudit.staging import staged_outputs

    # Python's own Ctrl-C handler, as in a terminal: a process started in the background of a
    # non-interactive shell inherits SIGINT ignored, and an ignored signal is not held back.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _commit_interrupted(tmp_path, staging_module, atomic_path, staged_outputs)
    finally:
        signal.signal(signal.SIGINT, previous)


def _commit_interrupted(tmp_path, staging_module, atomic_path, staged_outputs):
    """Stage two outputs and send SIGINT between the two renames of their commit."""
    import signal

    with pytest.raises(KeyboardInterrupt), staged_outputs() as staged:
        for name in ("a.txt", "b.txt"):
            with atomic_path(tmp_path / name) as tmp:
                tmp.write_text(name)
        real = staged.files.copy()

        def replace_then_interrupt(src, dst, _real=os.replace):
            _real(src, dst)
            signal.raise_signal(signal.SIGINT)  # arrives between the two renames

        staging_module.os = type("os_proxy", (), {"replace": staticmethod(replace_then_interrupt)})
        try:
            staged.commit()
        finally:
            staging_module.os = os
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"] and len(real) == 2


def test_the_security_page_states_the_bounds_of_the_end_after_a_signal():
    from mhaaudit.cli import app

    text = " ".join((ROOT / "docs" / "security.md").read_text().split())
    assert f"at most {app.SIGNAL_END_LIMIT_S:g} seconds after the signal" in text
