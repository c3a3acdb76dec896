"""The command line as a person meets it: in a real terminal (a pseudo-terminal from Python's
``pty`` module) and through pipes.

Progress goes on stderr whenever stderr is a terminal, whatever ``--format`` is, and nowhere else;
``--quiet`` silences it; ``NO_COLOR`` removes colours; reports fit the terminal's width, or
``COLUMNS`` when stdout is redirected; every combination of ``--format`` and ``--out`` works on a
terminal and through a pipe.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clitools import run
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
COLOUR = re.compile(rb"\x1b\[(?:[0-9]+;)*(?:3[0-79]|9[0-7]|38;[0-9;]+)m")  # a foreground colour


def _terminal(columns: int):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    return master, slave


def _drain(source, into: dict, key: str) -> None:
    """Read a pty master (an int) or a pipe until the child closes it."""
    chunks = []
    while True:
        try:
            chunk = os.read(source, 65536) if isinstance(source, int) else source.read(65536)
        except OSError:  # EIO: the child closed its end of the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    into[key] = b"".join(chunks)


def in_terminal(
    args, *, stdout_tty: bool, stderr_tty: bool, columns: int = 100, env: dict | None = None, cwd: Path | None = None
) -> tuple[int, bytes, bytes]:
    """Run ``python -m mhaaudit ARGS`` with stdout and/or stderr on a pseudo-terminal ``columns`` wide
    (the others on pipes). Returns (status, stdout bytes, stderr bytes) as the terminal or pipe got them."""
    full_env = dict(
        os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TERM="xterm-256color"
    )
    for var in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "MHAAUDIT_DEBUG"):
        full_env.pop(var, None)
    full_env.update(env or {})
    ends = {}
    if stdout_tty:
        ends["out"] = _terminal(columns)
    if stderr_tty:
        ends["err"] = _terminal(columns)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mhaaudit", *map(str, args)],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=ends["out"][1] if stdout_tty else subprocess.PIPE,
        stderr=ends["err"][1] if stderr_tty else subprocess.PIPE,
    )
    for _, slave in ends.values():
        os.close(slave)
    got: dict = {}
    readers = [
        threading.Thread(target=_drain, args=(ends["out"][0] if stdout_tty else proc.stdout, got, "out")),
        threading.Thread(target=_drain, args=(ends["err"][0] if stderr_tty else proc.stderr, got, "err")),
    ]
    for r in readers:
        r.start()
    try:
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:  # pragma: no cover - a hang is the failure
            proc.kill()
    for r in readers:
        r.join(timeout=30)
    for master, _ in ends.values():
        os.close(master)
    out, err = got["out"], got["err"]
    if stdout_tty:
        out = out.replace(b"\r\n", b"\n")  # the terminal's line discipline turns \n into \r\n
    return rc, out, err


_TOKEN = re.compile(rb"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\r|\n|[^\x1b\r\n]+")


def visible_lines(raw: bytes) -> list[str]:
    """The lines a terminal shows once ``raw`` is written to it: carriage returns, erased lines and
    cursor moves up (how progress bars redraw and remove themselves) applied, escapes dropped."""
    screen: list[list[str]] = [[]]
    row = col = 0
    for m in _TOKEN.finditer(raw):
        tok = m.group(0)
        if tok == b"\n":
            row, col = row + 1, 0
        elif tok == b"\r":
            col = 0
        elif m.group(2) == b"K":  # erase in line: 2 = all of it, else from the cursor on
            screen[row][:] = [] if m.group(1) == b"2" else screen[row][:col]
        elif m.group(2) == b"A":
            row = max(0, row - int(m.group(1) or 1))
        elif m.group(2) is None and not tok.startswith(b"\x1b"):
            for ch in tok.decode("utf-8", "replace"):
                line = screen[row]
                line.extend(" " * (col - len(line)))
                line[col : col + 1] = [ch]
                col += 1
        while len(screen) <= row:
            screen.append([])
    lines = ["".join(line).rstrip() for line in screen]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.fixture(scope="module")
def npy(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vectors") / "m.npy"
    np.save(path, np.random.default_rng(0).standard_normal((60, 12)))
    return path


KRUSKAL = ["--k", "5", "--k", "12", "--samples", "300"]


# --------------------------------------------------------------------------- progress


@pytest.mark.parametrize("fmt", ["table", "json", "parquet"])
def test_progress_on_a_terminal_whatever_the_format(npy, tmp_path, fmt):
    """stderr on a terminal: the start, each test's bar, whatever --format (stdout here is a pipe)."""
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL, "--format", fmt], stdout_tty=False, stderr_tty=True)
    assert rc == 0, err
    shown = b" ".join(ANSI.sub(b"", err).split())
    assert b"Starting: importing torch" in shown and b"k = 5" in shown and b"k = 12" in shown, err
    if fmt == "json":
        assert json.loads(out)["records"][0]["k"] == 5
    elif fmt == "parquet":
        assert pq.read_table(io.BytesIO(out)).num_rows == 2
    else:
        assert b"Kruskal-rank tests" in out


@pytest.mark.parametrize("fmt", ["table", "json", "parquet"])
def test_no_progress_when_stderr_is_not_a_terminal(npy, fmt):
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL, "--format", fmt], stdout_tty=False, stderr_tty=False)
    assert rc == 0 and err == b"", err
    assert out


def test_quiet_silences_progress(npy):
    rc, out, err = in_terminal(
        ["kruskal", npy, *KRUSKAL, "--format", "json", "--quiet"], stdout_tty=False, stderr_tty=True
    )
    assert rc == 0 and ANSI.sub(b"", err).strip() == b"", err
    assert json.loads(out)["records"]


def test_colours_on_a_terminal_and_never_with_no_color(npy):
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL], stdout_tty=True, stderr_tty=True)
    assert rc == 0 and COLOUR.search(out) and COLOUR.search(err)  # the verdicts and the bars are coloured
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL], stdout_tty=True, stderr_tty=True, env={"NO_COLOR": "1"})
    assert rc == 0 and b"Kruskal-rank tests" in out and b"k = 5" in ANSI.sub(b"", err)
    assert not COLOUR.search(out) and not COLOUR.search(err)


def test_kruskal_describes_the_data_once(npy):
    """On a terminal (stdout and stderr both watched), the table says what the vectors are; stderr does not
    repeat it."""
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL], stdout_tty=True, stderr_tty=True)
    assert rc == 0
    assert (out + err).count(b"vectors in R^12") == 1
    # with JSON on stdout, the person at the terminal still learns what is being tested, on stderr
    rc, out, err = in_terminal(["kruskal", npy, *KRUSKAL, "--format", "json"], stdout_tty=False, stderr_tty=True)
    assert rc == 0 and ANSI.sub(b"", err).count(b"vectors in R^12") == 1 and b"vectors in R^12" not in out


# --------------------------------------------------------------------------- names from files

HOSTILE = "x\x1b]0;PWNED\x07\x1b[2J"  # a name that retitles the window and clears the screen, shown raw
SHOWN = rb"x\x1b]0;PWNED\x07\x1b[2J"  # the same name with its control characters escaped


def _raw_escapes(data: bytes) -> list[bytes]:
    return [seq for seq in (b"\x1b]0;PWNED", b"\x1b[2J", b"\x07") if seq in data]


def test_names_read_from_files_reach_the_terminal_escaped(tmp_path, vit_dir):
    """A file name and column names read from a file holding escape sequences are shown escaped in the
    report, in the progress lines and in the error line; the report's own colours stay."""
    np.save(tmp_path / f"{HOSTILE}.npy", np.random.default_rng(0).standard_normal((30, 6)))
    pq.write_table(pa.table({HOSTILE: ["a", "b"], "n": [1, 2]}), tmp_path / "cols.parquet")
    run_in = dict(stdout_tty=True, stderr_tty=True, cwd=tmp_path)
    rc, out, err = in_terminal(["kruskal", f"{HOSTILE}.npy", "--k", 3, "--samples", 50], **run_in)
    assert rc == 0, err
    assert _raw_escapes(out) == [] and _raw_escapes(err) == []
    assert SHOWN + b".npy" in out and COLOUR.search(out)
    rc, out, err = in_terminal(
        ["kruskal", f"{HOSTILE}.npy", "--k", 3, "--samples", 50, "--format", "json"], **run_in | {"stdout_tty": False}
    )
    assert rc == 0 and json.loads(out)["records"]
    assert _raw_escapes(err) == [] and SHOWN + b".npy" in err  # the progress line naming the data
    for args in (["kruskal", f"{HOSTILE}-missing.npy", "--k", 3], ["check", vit_dir, "--data", "cols.parquet"]):
        rc, out, err = in_terminal(args, **run_in)
        assert rc == 2 and out == b"", err
        assert _raw_escapes(err) == [] and SHOWN in err and err.count(b"Error: ") == 1, err


def test_a_name_cannot_start_a_line_of_the_report_or_style_it(capsys, monkeypatch, tmp_path, vit_dir, image_dir):
    """A model folder or a features file whose name holds a line break and rich markup is shown as written, on
    one line: in the table's title, the weights line and the kruskal report; nothing it holds starts a line."""
    name = "m[bold]x\nGeneral Position: holds everywhere"
    shutil.copytree(vit_dir, tmp_path / name)
    np.save(tmp_path / f"{name}.npy", np.random.default_rng(0).standard_normal((30, 6)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    shown = "m[bold]x\\x0aGeneral Position: holds everywhere"
    for args in (
        ["check", name, "--data", image_dir, "--limit", 24, "--samples", 20, "--variants", "trained"],
        ["kruskal", f"{name}.npy", "--k", 3, "--samples", 20],
    ):
        rc, out, err = run(capsys, *args)
        assert rc == 0, err
        assert not [x for x in out.splitlines() if x.lstrip(" │").startswith("General Position: holds")], out
        said = [x for x in out.splitlines() if shown in x]
        assert len(said) >= (2 if args[0] == "check" else 1), out  # the title and the weights line
    assert out.splitlines()[0].startswith(f"mhaaudit kruskal: 30 vectors in R^6 (float64) from {shown}.npy")


# --------------------------------------------------------------------------- --format x --out


@pytest.mark.parametrize("stdout_tty", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("with_out", [False, True], ids=["stdout", "out"])
@pytest.mark.parametrize("fmt", ["table", "json", "parquet"])
def test_every_format_and_out_on_a_terminal_and_a_pipe(npy, tmp_path, fmt, with_out, stdout_tty):
    target = tmp_path / "res.parquet"
    args = ["kruskal", npy, *KRUSKAL, "--format", fmt] + (["--out", target] if with_out else [])
    rc, out, err = in_terminal(args, stdout_tty=stdout_tty, stderr_tty=True, cwd=tmp_path)
    if fmt == "parquet" and stdout_tty and not with_out:  # binary data to a terminal: refused, before any work
        lines = visible_lines(err)
        assert rc == 2 and len(lines) == 1, lines  # the start spinner is gone: one line remains
        assert lines[0].startswith("Error: --format parquet") and "--out" in lines[0]
        assert out == b"" and not target.exists()
        return
    assert rc == 0, err
    if with_out:
        assert pq.read_table(target).num_rows == 2
    else:
        assert not target.exists()
    if fmt == "json":
        assert [r["k"] for r in json.loads(out)["records"]] == [5, 12]
    elif fmt == "parquet" and not stdout_tty:
        assert pq.read_table(io.BytesIO(out)).num_rows == 2
    elif fmt == "parquet":  # a terminal: the records are in --out, and stderr says so
        assert out == b"" and f"Wrote {target}".encode() in b" ".join(ANSI.sub(b"", err).split())
    else:
        assert b"Kruskal-rank tests" in out


# --------------------------------------------------------------------------- widths


@pytest.mark.parametrize("columns", [80, 120])
def test_tables_fit_the_terminal(npy, columns):
    rc, out, err = in_terminal(
        ["kruskal", npy, *KRUSKAL, "--sweep"], stdout_tty=True, stderr_tty=False, columns=columns
    )
    assert rc == 0, err
    lines = visible_lines(out)
    assert "Kruskal-rank tests" in lines[1] or "Kruskal-rank tests" in "\n".join(lines)
    assert max(cell_len(line) for line in lines) <= columns


@pytest.mark.parametrize("columns", [None, "72", "100", "160"])
def test_redirected_reports_respect_columns(capsys, monkeypatch, vit_dir, image_dir, columns):
    """stdout to a file or pipe: reports are laid out for COLUMNS, or 100 columns when it is not set."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    rc, out, err = run(
        capsys,
        "check",
        vit_dir,
        "--data",
        image_dir,
        "--limit",
        "24",
        "--samples",
        "50",
        "--variants",
        "embedding,random",
    )
    assert rc == 0, err
    widths = [cell_len(line) for line in out.splitlines()]
    assert max(widths) <= int(columns or 100)
    assert max(widths) >= int(columns or 100) - 2  # the long lines use the width they are given


def test_reproduce_table1_fits_100_columns_and_prints_the_papers_values(capsys, monkeypatch, vit_dir, image_dir):
    monkeypatch.setenv("COLUMNS", "100")
    rc, out, err = run(
        capsys,
        "reproduce",
        "table1",
        "--model",
        f"vit={vit_dir}",
        "--data",
        image_dir,
        "--limit",
        "24",
        "--samples",
        "50",
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert max(cell_len(line) for line in lines) <= 100
    table = [ln for ln in lines if ln.startswith("│")]
    assert any("holds 0.9982" in ln for ln in table)  # the trained column's A1 fraction, as printed
    assert any("fails 0.0 " in ln for ln in table) and not any(re.search(r"(fails|holds) 0 ", ln) for ln in table)
    assert all(ln.count("random-attention") in (0, 1) for ln in table) and any("random-attention" in ln for ln in table)


def test_unavailable_columns_are_named_once_per_reason():
    """The trained columns at every depth share one reason: one line names them all."""
    from mhaaudit.render import audit_lines

    reason = "trained weights for m are not on this machine and the hub cannot be reached"
    cols = [
        SimpleNamespace(
            status="unavailable",
            reason=reason,
            probe=SimpleNamespace(variant=v),
            sweep=None,
            features=None,
            timings={},
            tests={},
        )
        for v in ("trained-L0", "trained-L1")
    ]
    result = SimpleNamespace(
        columns=cols,
        info=SimpleNamespace(n=197, query_index=0, d=768),  # the attributes of a facts.ModelFacts the report reads
        data="d",
        skipped=0,
        notes=[],
        timings={"total": 1.0},
        T=None,
        settings=SimpleNamespace(  # those of a facts.AuditSettings
            samples=10,
            threshold=0.99,
            seed=0,
            device="cpu",
            tolerance=SimpleNamespace(rule="r"),
            batch_size=None,
            batch_size_choice=None,
        ),
    )
    text = "\n".join(audit_lines(result))
    assert text.count(reason) == 1 and "trained-L0, trained-L1 unavailable" in text
