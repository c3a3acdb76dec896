"""mhaaudit.stdio: stdout carries the data and nothing else, whatever a native library writes to file
descriptor 1 while a command works, and a stderr that cannot be written changes no exit status.

A native library's chatter is made as MKL's error handler makes it: the C library's ``write(1, ...)``
and ``printf``, called through ``ctypes`` from inside the work (``tests/chatter.py``). Every command,
in this process; every format to a pipe and to a file, with ``--out``, in a process of its own (under
torchrun: ``tests/test_distributed.py``). Then the error line: stderr closed, on a full device or a
pipe whose reader left; stdout closed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import chatter
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import tmp_leftovers

from mhaaudit.cli.app import main
from mhaaudit.stdio import command_streams, say

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 300  # a hang guard, not a speed requirement
KRUSKAL = ["kruskal", "m.npy", "--k", "3", "--k", "5", "--samples", "60"]


@pytest.fixture()
def folder(tmp_path):
    np.save(tmp_path / "m.npy", np.random.default_rng(0).standard_normal((40, 8)))
    return tmp_path


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    for var in ("MHAAUDIT_DEBUG", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    return env


def _command(args, chattering: bool = True) -> list[str]:
    head = [sys.executable, "-c", chatter.DRIVER] if chattering else [sys.executable, "-m", "mhaaudit"]
    return head + [str(a) for a in args]


def _data(fmt: str, raw: bytes):
    """The document stdout holds, read back as its format's reader reads it (which fails on anything else)."""
    if fmt == "json":
        return json.loads(raw)["records"]
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(raw)).to_pylist()
    text = raw.decode()
    assert text.startswith("mhaaudit kruskal: 40 vectors in R^8"), text[:200]
    return text


def _chatter_went_to_stderr(out: bytes, err: bytes) -> None:
    assert chatter.WRITE not in out and chatter.PRINTF not in out
    assert chatter.WRITE in err and chatter.PRINTF in err, err[-2000:]


# --------------------------------------------------------------------------- the arrangement itself


def test_descriptor_1_is_stderr_while_a_command_runs_and_is_restored(capfd):
    before = os.fstat(1)
    with command_streams():
        os.write(1, b"native\n")
        sys.stdout.write("data\n")
        print("more data")
        assert sys.stdout.fileno() != 1
    os.write(1, b"after\n")
    after = os.fstat(1)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    out, err = capfd.readouterr()
    assert out == "data\nmore data\nafter\n"
    assert err == "native\n"


def test_a_stderr_that_fails_drops_lines_and_raises_nothing(monkeypatch):
    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(sys, "stderr", Full())
    with command_streams():
        print("a note", file=sys.stderr)
        say("Error: a line")
    monkeypatch.setattr(sys, "stderr", None)  # closed: nothing is said, and nothing goes to stdout
    say("Error: a line")


# --------------------------------------------------------------------------- every command, in this process


@pytest.mark.parametrize(
    "command", ["kruskal-json", "kruskal-table", "kruskal-parquet", "check", "capacity", "memorize", "figure2"]
)
def test_every_command_keeps_native_chatter_off_stdout(capfdbinary, monkeypatch, folder, command, request):
    """A native library writes to descriptor 1 from inside the work: stdout still parses, and stderr has it."""
    fmt = command.partition("-")[2] or "json"
    if command.startswith("kruskal"):
        args = [*KRUSKAL[:1], folder / "m.npy", *KRUSKAL[2:]]
    elif command in ("check", "capacity"):
        model = request.getfixturevalue("vit_dir" if command == "check" else "vit4")
        data = request.getfixturevalue("image_dir")
        args = [command, model, "--data", data, "--limit", 40, "--samples", 100, "--batch-size", 8]
    elif command == "memorize":
        args = ["memorize", "--vary", "heads", "--values", "1,2", "--n", 4, "--head-dim", 8, "--sizes", 16]
        args += ["--max-steps", 6, "--seed", 2]
    else:
        args = ["reproduce", "figure2", "--values", "1,2", "--sizes", 16, "--max-steps", 6, "--device", "cpu"]
    calls = chatter.install()
    try:
        rc = main([str(a) for a in [*args, "--format", fmt]])
    finally:
        chatter.uninstall()
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()[-2000:]
    assert calls[0] > 0
    if command.startswith("kruskal"):
        records = _data(fmt, out)
        assert fmt == "table" or [r["k"] for r in records] == [3, 5]
    else:
        assert json.loads(out)
    _chatter_went_to_stderr(out, err)


# --------------------------------------------------------------------------- a process of its own


@pytest.mark.parametrize(
    "fmt, to, with_out",
    [
        ("table", "pipe", False),
        ("json", "pipe", False),
        ("parquet", "pipe", False),
        ("table", "file", True),
        ("json", "file", False),
        ("parquet", "file", True),
    ],
)
def test_stdout_holds_only_the_data_whatever_native_code_prints(folder, fmt, to, with_out):
    args = [*KRUSKAL, "--format", fmt] + (["--out", "res.parquet"] if with_out else [])
    if to == "file":
        with open(folder / "stdout.bin", "wb") as sink:
            p = subprocess.run(
                _command(args), cwd=folder, env=_env(), stdout=sink, stderr=subprocess.PIPE, timeout=LIMIT_S
            )
        out = (folder / "stdout.bin").read_bytes()
    else:
        p = subprocess.run(_command(args), cwd=folder, env=_env(), capture_output=True, timeout=LIMIT_S)
        out = p.stdout
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    _data(fmt, out)
    _chatter_went_to_stderr(out, p.stderr)
    if with_out:
        assert [r["k"] for r in pq.read_table(folder / "res.parquet").to_pylist()] == [3, 5]
    assert tmp_leftovers(folder) == []


# --------------------------------------------------------------------------- the error line


def _close(*fds: int):
    def close() -> None:  # in the child, before it runs: as the shell's `>&-` and `2>&-`
        for fd in fds:
            os.close(fd)

    return close


def test_with_stderr_closed_the_error_goes_nowhere_and_the_status_stays(folder):
    bad = subprocess.run(
        _command(["kruskal", "nope.npy", "--k", 3], chattering=False),
        cwd=folder,
        env=_env(),
        stdout=subprocess.PIPE,
        preexec_fn=_close(2),
        timeout=LIMIT_S,
    )
    assert (bad.returncode, bad.stdout) == (2, b"")  # the line is not sent to stdout instead
    good = subprocess.run(
        _command([*KRUSKAL, "--format", "json"]),
        cwd=folder,
        env=_env(),
        stdout=subprocess.PIPE,
        preexec_fn=_close(2),
        timeout=LIMIT_S,
    )
    assert good.returncode == 0
    assert [r["k"] for r in _data("json", good.stdout)] == [3, 5]  # the chatter went nowhere either


@pytest.mark.parametrize("sink", ["full", "reader-gone"])
@pytest.mark.parametrize("case, status", [("bad-input", 2), ("usage", 2), ("ran", 0)])
def test_a_stderr_that_cannot_be_written_keeps_the_status_the_run_earned(folder, sink, case, status):
    """stderr on /dev/full, or a pipe whose reader left: the line is lost, the status is not (never 1)."""
    args = {
        "bad-input": ["kruskal", "nope.npy", "--k", 3],
        "usage": ["kruskal", "m.npy", "--k", "three"],
        "ran": [*KRUSKAL, "--format", "json"],
    }[case]
    if sink == "full":
        with open("/dev/full", "wb") as full:
            p = subprocess.Popen(_command(args), cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=full)
    else:
        p = subprocess.Popen(_command(args), cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stderr.close()  # the reader leaves before anything is written
    out = p.stdout.read()
    p.stdout.close()
    assert p.wait(timeout=LIMIT_S) == status
    if status == 0:
        assert [r["k"] for r in _data("json", out)] == [3, 5]
    else:
        assert out == b""


@pytest.mark.parametrize("stderr_too", [False, True])
def test_a_closed_stdout_is_refused_in_one_line_before_any_work(folder, stderr_too):
    p = subprocess.run(
        _command([*KRUSKAL, "--out", "res.parquet"], chattering=False),
        cwd=folder,
        env=_env(),
        stderr=subprocess.PIPE,
        preexec_fn=_close(1, 2) if stderr_too else _close(1),
        timeout=LIMIT_S,
    )
    assert p.returncode == 2
    if stderr_too:
        assert p.stderr == b""
    else:
        lines = p.stderr.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: stdout is closed"), p.stderr
    assert sorted(os.listdir(folder)) == ["m.npy"]  # no output, no temporary
