"""Data-parallel runs: 2 gloo processes on the CPU, started here with torchrun's environment.

Each multi-process test starts the ranks as ``python -m mhaaudit ...`` (or a small driver that
breaks one rank on purpose) with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set, one thread each, and a time limit. The single-process run it is compared
with has the same thread settings.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import chatter
import pytest
import torch
from clitools import assert_one_error
from conftest import tmp_leftovers

from mhaaudit import distributed
from mhaaudit.errors import DataError, InputError
from mhaaudit.facts import JobFacts
from mhaaudit.kruskal import KruskalResult

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 240  # a hang guard for the whole job, not a speed requirement

# A driver that breaks rank FAIL_RANK when it prepares its first batch, then runs the command line.
DRIVER = textwrap.dedent("""
    import os, signal, sys
    from mhaaudit import pipeline
    from mhaaudit.errors import DataError, InputError

    if os.environ.get("RANK") == os.environ.get("FAIL_RANK"):
        mode = os.environ["FAIL_MODE"]

        def broken(pm, raw):
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "data":
                raise DataError("batch unreadable on purpose")
            raise ValueError("a bug on purpose")

        pipeline._prepare = broken
    from mhaaudit.__main__ import entry
    entry(sys.argv[1:])
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        MHAAUDIT_DIST_TIMEOUT="60",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MHAAUDIT_DEBUG"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(args, world: int = 2, cwds=None, driver: Path | None = None, **extra) -> list[tuple[int, str, str]]:
    """Run ``args`` as a job of ``world`` processes; (exit status, stdout, stderr) by rank."""
    port = _free_port()
    cmd = [sys.executable, str(driver)] if driver else [sys.executable, "-m", "mhaaudit"]
    procs = []
    for r in range(world):
        env = _env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **extra)
        procs.append(
            subprocess.Popen(
                cmd + [str(a) for a in args],
                env=env,
                cwd=(cwds or [None] * world)[r],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=LIMIT_S)
            out.append((p.returncode, o.decode(), e.decode()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def single(args, cwd=None) -> tuple[int, str, str]:
    p = subprocess.run(
        [sys.executable, "-m", "mhaaudit"] + [str(a) for a in args],
        env=_env(),
        cwd=cwd,
        capture_output=True,
        timeout=LIMIT_S,
    )
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _check_args(vit_dir, image_dir, *more):
    return [
        "check",
        vit_dir,
        "--data",
        image_dir,
        "--limit",
        30,
        "--batch-size",
        4,
        "--samples",
        100,
        "--device",
        "cpu",
        "--format",
        "json",
        *more,
    ]


# --------------------------------------------------------------------------- one process


def test_one_process_works_through_a_session_of_one(monkeypatch):
    """One process goes through the same session interface as a job (every collective the
    identity), so no code branches on whether a job was launched."""
    import inspect
    import re

    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    one = distributed.current()
    assert isinstance(one, distributed.SingleProcess) and (one.rank, one.world_size) == (0, 1)
    assert distributed.lockstep() is one
    interface = {n for n, v in vars(distributed.Session).items() if not n.startswith("_") and callable(v)}
    assert interface == {n for n, v in vars(distributed.SingleProcess).items() if not n.startswith("_") and callable(v)}
    for name in interface:  # the same parameters, so a caller cannot tell which it holds
        assert (
            inspect.signature(getattr(distributed.Session, name)).parameters.keys()
            == inspect.signature(getattr(distributed.SingleProcess, name)).parameters.keys()
        ), name
    assert one.all_gather(3) == [3] and one.all_gather_tensors("t") == ["t"] and one.broadcast("x") == "x"
    assert list(one.deal(iter(["a", "b"]))) == [(0, "a"), (1, "b")] and list(one.deal(None)) == []
    rows = {"Z": torch.ones(2, 2)}
    assert one.gather_rows(rows, "h", [(0, 2)], [[(0, 2)]]) == (rows, "h")
    one.same(1, "anything")
    one.publish("k", 1)
    one.send("m")
    with pytest.raises(LookupError):
        one.fetch("k")
    with pytest.raises(LookupError):
        one.receive()
    import mhaaudit

    root = Path(mhaaudit.__file__).parent
    branches = [
        f"{p.relative_to(root)}:{i}"
        for p in sorted(root.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\b(shard|session\(\)) is (not )?None", line)
    ]
    assert not branches, branches


def test_one_process_has_no_session(monkeypatch):
    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    assert not distributed.launched() and distributed.session() is None and distributed.describe() == {}
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not distributed.launched() and distributed.session() is None

    @distributed.shared
    def entry(x, *, progress=True, on_note=None):
        return x, progress, on_note

    assert entry(1, on_note=print) == (1, True, print)  # one process: a plain call
    assert distributed._portable({"progress": True, "on_note": print, "limit": 3}) == {
        "progress": False,
        "on_note": None,
        "limit": 3,
    }
    from mhaaudit.settings import Settings

    bars = Settings.resolve(device="cpu", seed=3, progress=True)
    assert distributed._portable({"settings": bars}) == {
        "settings": bars.with_(progress=False)
    }  # the followers draw none


def test_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(distributed.TIMEOUT_ENV, raising=False)
    assert distributed.timeout_s() == distributed.DEFAULT_TIMEOUT_S
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "12.5")
    assert distributed.timeout_s() == 12.5
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "soon")
    with pytest.raises(Exception, match="positive number of seconds"):
        distributed.timeout_s()
    for beyond in ("inf", "1e300", "nan", "-1", "0", str(distributed.MAX_TIMEOUT_S * 2)):
        monkeypatch.setenv(distributed.TIMEOUT_ENV, beyond)
        with pytest.raises(InputError, match="positive number of seconds, at most 604800"):
            distributed.timeout_s()


@pytest.mark.parametrize(
    "env, words",
    [
        ({"LOCAL_RANK": "abc"}, "LOCAL_RANK is 'abc'"),
        ({"RANK": "5", distributed.TIMEOUT_ENV: "3"}, "WORLD_SIZE = 2 but RANK is 5"),  # no rank 0 would say it
        ({"RANK": "-1", distributed.TIMEOUT_ENV: "3"}, "WORLD_SIZE = 2 but RANK is -1"),
        ({"RANK": "one", distributed.TIMEOUT_ENV: "3"}, "RANK is 'one'"),
        ({"LOCAL_RANK": "-1", distributed.TIMEOUT_ENV: "3"}, "LOCAL_RANK is -1"),
        ({distributed.TIMEOUT_ENV: "inf"}, "MHAAUDIT_DIST_TIMEOUT='inf'"),
        ({distributed.TIMEOUT_ENV: "1e300"}, "MHAAUDIT_DIST_TIMEOUT='1e300'"),
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE is 'abc', not a number of processes"),  # was: one process, silently
        ({"RANK": "1", distributed.TIMEOUT_ENV: "3"}, "cannot join the distributed job at 127.0.0.1"),  # no rank 0
    ],
)
def test_a_bad_launch_environment_is_one_line_and_exit_2(tmp_path, env, words):
    """Values torchrun's environment could hold but mhaaudit cannot use end the process before it joins
    a job (nobody else needs to be started): one line, exit 2, no traceback."""
    import numpy as np

    np.save(tmp_path / "X.npy", np.eye(4))
    full = _env(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0, MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())
    full.update(env)
    p = subprocess.run(
        [sys.executable, "-m", "mhaaudit", "kruskal", str(tmp_path / "X.npy"), "--k", "2", "--format", "json"],
        env={k: str(v) for k, v in full.items()},
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith("Error: ") and words in p.stderr
    assert p.stdout == ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_rank_removes_its_scratch_folders_as_it_leaves_and_a_forked_child_removes_none(tmp_path):
    """A rank ends with ``os._exit`` (:func:`distributed.leave`), so its exit hooks do not run: the scratch
    folders it made (the cache's stand-in, one still in use) are removed as it leaves. A forked child that
    leaves removes none of its parent's."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = textwrap.dedent(
        """
        import os, sys
        from mhaaudit import distributed, staging
        cache = staging.process_scratch_folder("mhaaudit-corpus-")
        (cache / "docstrings.json.gz").write_text("c")
        using = staging.scratch_folder("mhaaudit-weights-")
        folder = using.__enter__()
        (folder / "config.json").write_text("{}")
        pid = os.fork()
        if pid == 0:
            distributed.leave(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sorted(os.listdir(os.environ["TMPDIR"])) == sorted([cache.name, folder.name])
        distributed.leave(7)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=_env(TMPDIR=scratch), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 7, done.stderr
    assert os.listdir(scratch) == []


def test_after_a_signal_rank_0_leaves_with_its_status_before_the_watch_would_end_it():
    """Rank 0 waits up to ``LEAVE_WAIT_S`` for the other ranks to leave; after a signal it stops waiting just
    before the watch's end (``ending.deadline``), so it ends with the status it settled on, itself. Here the
    other rank never leaves, and the watch would end the process with 99 five seconds after the signal, where
    rank 0 waits ten."""
    script = textwrap.dedent(
        """
        import os, signal, types
        from mhaaudit import distributed, ending
        store = types.SimpleNamespace(check=lambda keys: False)
        distributed._SESSION = types.SimpleNamespace(rank=0, world_size=2, store=store, _dead_ranks=lambda: [])
        distributed.LEAVE_BEFORE_WATCH_S = 2.0  # (a margin a loaded machine keeps)
        ending.watch(5.0, lambda signum: os._exit(99), [signal.SIGTERM])
        assert ending.deadline() is None
        ending.note(signal.SIGTERM)
        assert ending.deadline() is not None  # from the note, whether the watch's thread woke yet or not
        distributed.leave(2)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr


class _Leaving:
    """A job of two where rank 1 leaves its note that a signal ended it, then ends, between rank 0's looks."""

    rank, world_size, store = 0, 2, object()

    def __init__(self):
        self.notes: dict = {}

    def _notes(self) -> dict:
        return dict(self.notes)

    def _dead_ranks(self) -> list[int]:
        self.notes[1] = (143, "ended by SIGTERM")  # the note comes before the end: gone now, noted already
        return [1]


def test_rank_0_reads_who_is_gone_before_their_notes(monkeypatch):
    """The line rank 0 says after SIGTERM (``lost_rank_line``) looks for the ranks that are gone before it reads
    their notes, so a rank that noted a signal and ended between the two looks is no rank that "stopped without
    reporting an error": rank 0 was signalled as it was, and says so itself. Read the other way, it was one."""
    monkeypatch.setattr(distributed, "_SESSION", _Leaving())
    assert distributed.lost_rank_line() is None


def test_read_ahead_keeps_order_and_raises_in_place():
    from mhaaudit.pipeline import _read_ahead

    assert list(_read_ahead(iter(range(50)), 3)) == list(range(50))

    def failing():
        yield 1
        raise DataError("source broke")

    got = _read_ahead(failing(), 2)
    assert next(got) == 1
    with pytest.raises(DataError, match="source broke"):
        next(got)


def test_rows_gathered_in_single_process_order():
    """Rank r fed batches r, r + N, ...: the gathered rows are those of one process."""

    class FakeSession(distributed.Session):
        def all_gather(self, obj):
            return parts

    rows = torch.arange(20).reshape(10, 2).float()
    sizes = [3, 3, 3, 1]  # batches 0..3; rank 0 fed 0 and 2, rank 1 fed 1 and 3
    chunks = torch.split(rows, sizes)
    fed = [[(0, 3), (2, 3)], [(1, 3), (3, 1)]]
    parts = [({"x": torch.cat([chunks[0], chunks[2]])}, ("n", 0)), ({"x": torch.cat([chunks[1], chunks[3]])}, ("n", 1))]
    s = FakeSession(rank=1, world_size=2, local_rank=1, backend="gloo")
    got, header = s.gather_rows({"x": torch.zeros(4, 2)}, ("n", 1), fed[1], fed)
    assert torch.equal(got["x"], rows) and header == ("n", 0)
    parts = [None, parts[1]]  # a rank with no batch
    got, header = s.gather_rows(None, None, [], [[], fed[1]])
    assert torch.equal(got["x"], torch.cat([chunks[1], chunks[3]])) and header == ("n", 1)


# --------------------------------------------------------------------------- two processes


def test_two_ranks_give_the_records_of_one_process(vit_dir, image_dir, tmp_path):
    """Same seed, data, batch size and threads: 2 ranks give the records (verdicts, fractions,
    intervals, witnesses, sweep) of one process, with the same duplicate images dropped (some
    repeat an image another rank ran); only rank 0 prints and writes."""
    import shutil

    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for c in cwds:
        c.mkdir()
    data = tmp_path / "images"
    data.mkdir()
    for i, src in enumerate(sorted(image_dir.iterdir())[:26]):
        shutil.copy(src, data / src.name)
        if i in (1, 4, 5, 22):  # batches of 4: repeats of images of batches 0, 1, 5 in batches 6 and 7
            shutil.copy(src, data / f"zz_{src.name}")
    args = _check_args(vit_dir, data, "--sweep", "--out", "out.parquet")
    rc, one, err = single(args, cwd=tmp_path)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args, cwds=cwds)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b["sweep"] == a["sweep"]
    assert b["meta"]["distributed"] == {"world_size": 2, "backend": "gloo"} and "distributed" not in a["meta"]
    assert (b["meta"]["data"], b["meta"]["skipped"]) == (a["meta"]["data"], a["meta"]["skipped"])
    assert b["meta"]["duplicates"] == a["meta"]["duplicates"] and a["meta"]["duplicates"]["dropped"] == 4
    assert b["meta"]["notes"] == a["meta"]["notes"]
    assert out1 == "" and err1 == ""
    assert (cwds[0] / "out.parquet").is_file() and os.listdir(cwds[1]) == [] and tmp_leftovers(cwds[0]) == []


def test_kruskal_on_a_file_splits_its_draws(tmp_path):
    """``kruskal FILE``: rank 0 reads the file and the other rank joins each test and the sweep."""
    import numpy as np

    g = np.random.default_rng(0)
    X = g.standard_normal((200, 24))
    X[:, 18:] = X[:, :6] @ g.standard_normal((6, 6)) * 1e-3
    X[5] = 2 * X[7]
    np.save(tmp_path / "X.npy", X)
    args = [
        "kruskal",
        tmp_path / "X.npy",
        "--k",
        8,
        "--k",
        20,
        "--sweep",
        "--samples",
        300,
        "--device",
        "cpu",
        "--format",
        "json",
    ]
    rc, one, err = single(args)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b["sweep"] == a["sweep"]
    assert b["meta"]["sweep_summary"] == a["meta"]["sweep_summary"] and out1 == ""
    # the job is named in the meta, as check's is, and read back with the result; one process names none
    assert b["meta"]["distributed"] == {"world_size": 2, "backend": "gloo"} and "distributed" not in a["meta"]
    assert KruskalResult.from_json(out0).distributed == JobFacts(world_size=2, backend="gloo")


# A driver in which rank 0 takes SLOW_S seconds: over its checks before its first shared call (SLOW_AT=checks),
# or before its first collective inside a shared call (SLOW_AT=call).
SLOW_DRIVER = textwrap.dedent("""
    import os, sys, time
    from mhaaudit import collectives
    from mhaaudit.cli import output

    if os.environ.get("RANK") == "0":
        if os.environ["SLOW_AT"] == "checks":
            real = output.prepare_outputs

            def slow(*args, **kwargs):
                time.sleep(float(os.environ["SLOW_S"]))
                return real(*args, **kwargs)

            output.prepare_outputs = slow
        else:
            gather = collectives.Session.all_gather

            def slow_gather(self, obj):
                if not getattr(self, "slept", False):
                    self.slept = True
                    time.sleep(float(os.environ["SLOW_S"]))
                return gather(self, obj)

            collectives.Session.all_gather = slow_gather
    from mhaaudit.__main__ import entry
    entry(sys.argv[1:])
""")


def test_a_rank_that_waits_past_the_timeout_is_named_as_waiting_not_as_killed(tmp_path):
    """Inside a shared call, rank 1 waits for rank 0 at a collective longer than ``MHAAUDIT_DIST_TIMEOUT`` and ends
    over it: rank 0 says that it waited past the timeout, not that it stopped without reporting an error (killed,
    out of memory)."""
    import numpy as np

    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((40, 8)))
    driver = tmp_path / "slow.py"
    driver.write_text(SLOW_DRIVER)
    args = ["kruskal", tmp_path / "X.npy", "--k", 4, "--samples", 50, "--device", "cpu", "--plot", tmp_path / "k.png"]
    (r0, out0, err0), (r1, out1, err1) = launch(args, driver=driver, SLOW_S=4, SLOW_AT="call", MHAAUDIT_DIST_TIMEOUT=1)
    lines = err0.strip().splitlines()
    assert (r0, r1) == (2, 2) and len(lines) == 1, err0
    assert lines[0].startswith("Error: rank 1 of 2 failed: no answer from the other processes within 1 s"), lines[0]
    assert "MHAAUDIT_DIST_TIMEOUT" in lines[0] and "killed" not in lines[0]
    assert out0 == out1 == err1 == "" and not (tmp_path / "k.png").exists() and tmp_leftovers(tmp_path) == []


def test_the_other_ranks_wait_for_rank_0_s_work_alone_past_the_timeout(tmp_path):
    """Between shared calls the other ranks wait for rank 0 however long it works alone (its checks before the first
    call here; ``memorize``, which shares no call, for its whole run): no timeout applies there. They waited in a
    collective, and ended the job once ``MHAAUDIT_DIST_TIMEOUT`` passed."""
    import numpy as np

    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((40, 8)))
    driver = tmp_path / "slow.py"
    driver.write_text(SLOW_DRIVER)
    args = ["kruskal", tmp_path / "X.npy", "--k", 4, "--samples", 50, "--device", "cpu", "--format", "json"]
    slow = dict(SLOW_S=6, SLOW_AT="checks", MHAAUDIT_DIST_TIMEOUT=2)  # 2 s: the shared calls' margin on a busy machine
    (r0, out0, err0), (r1, out1, err1) = launch(args, driver=driver, **slow)
    assert (r0, r1, out1, err1) == (0, 0, "", ""), err0 + err1
    assert [r["k"] for r in json.loads(out0)["records"]] == [4]


# A driver that notes, on each rank that follows rank 0, the type of the data each shared call received.
SPY_DRIVER = textwrap.dedent("""
    import os, sys
    from mhaaudit import distributed

    real = distributed._shared_call

    def spy(key):
        fn = real(key)

        def call(*args, **kwargs):
            with open(os.environ["SEEN"] + os.environ["RANK"], "a") as fh:
                fh.write(f"{key} {type(args[0]).__name__ if args else '-'}\\n")
            return fn(*args, **kwargs)

        return call

    distributed._shared_call = spy
    from mhaaudit.__main__ import entry
    entry(sys.argv[1:])
""")


def test_ranks_map_the_same_file(tmp_path):
    """``kruskal FILE`` on a .npy file: rank 0 sends the other ranks the file's description, not
    its rows, and each of them maps the same file."""
    import numpy as np

    X = np.random.default_rng(1).standard_normal((300, 16)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    driver = tmp_path / "spy.py"
    driver.write_text(SPY_DRIVER)
    args = ["kruskal", tmp_path / "X.npy", "--k", 8, "--samples", 200, "--device", "cpu", "--format", "json"]
    rc, one, err = single(args)
    assert rc == 0, err
    (r0, out0, err0), (r1, _, err1) = launch(args, driver=driver, SEEN=str(tmp_path / "seen"))
    assert (r0, r1) == (0, 0), err0 + err1
    seen = (tmp_path / "seen1").read_text().split("\n")
    assert "mhaaudit.kruskal.fixed:subset_test MappedArray" in seen
    assert json.loads(out0)["records"] == json.loads(one)["records"]


# A driver whose ranks other than 0 leave a mark as they start rank 0's first shared call (both ranks are at work).
MARK_DRIVER = textwrap.dedent("""
    import os, sys
    from mhaaudit import distributed

    real = distributed._shared_call

    def marked(key):
        open(os.environ["MARK"], "w").close()
        return real(key)

    distributed._shared_call = marked
    from mhaaudit.__main__ import entry
    entry(sys.argv[1:])
""")


def _signalled(tmp_path, source: str, sig: int, to: tuple[int, ...]) -> list[tuple[int, str, str]]:
    """Two ranks of ``kruskal`` (a long one) through the driver ``source``, which makes the file ``MARK`` once the
    work is under way; a second later ``sig`` goes to the ranks ``to``. Each rank's status, stdout and stderr."""
    import numpy as np

    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((3000, 64)).astype(np.float32))
    driver, mark = tmp_path / "mark.py", tmp_path / "started"
    driver.write_text(source)
    args = ["kruskal", tmp_path / "X.npy", "--k", 40, "--samples", 10**8, "--all-draws", "--device", "cpu"]
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(driver), *map(str, args)],
            env=_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, MARK=mark),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for r in range(2)
    ]
    try:
        deadline = time.monotonic() + LIMIT_S
        while not mark.exists() and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.1)
        assert mark.exists(), [p.poll() for p in procs]
        time.sleep(1.0)
        for r in to:
            procs[r].send_signal(sig)
        ends = [(p.wait(timeout=LIMIT_S), *(s.decode() for s in p.communicate())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return ends


@pytest.mark.parametrize(
    "sig, to, codes, line",
    [
        (signal.SIGTERM, (0, 1), (143, 143), "Error: terminated (SIGTERM)"),
        (signal.SIGINT, (0, 1), (130, 130), "Error: interrupted"),
        (signal.SIGTERM, (1,), (2, 143), "Error: rank 1 of 2 failed: ended by SIGTERM"),
    ],
)
def test_a_signal_ends_every_rank_with_its_status_and_one_line_from_rank_0(tmp_path, sig, to, codes, line):
    """SIGTERM or Ctrl-C sent to every rank (as torchrun and a terminal do) ends each with the signal's status and
    rank 0 alone says so, in one line; a rank the signal reached alone is named by rank 0 as ended by it. The
    ranks other than 0 had no handler (SIGTERM killed them, and rank 0 said one "stopped without reporting an
    error", status 2) and each said "interrupted" after Ctrl-C."""
    (r0, out0, err0), (r1, out1, err1) = _signalled(tmp_path, MARK_DRIVER, sig, to)
    assert (r0, r1) == codes, err0 + err1
    assert err0.strip().splitlines() == [line] and (out0, out1, err1) == ("", "", ""), err0 + err1


# A driver whose rank 1, at its first shared call, spends its time in a finaliser: a signal's exception raised there
# is lost (Python cannot raise it), and the watch of mhaaudit.ending ends the rank.
LOST_DRIVER = textwrap.dedent("""
    import os, sys, time
    from mhaaudit import distributed

    real = distributed._shared_call

    class Lingers:
        def __del__(self):
            time.sleep(0.2)

    def stuck(*args, **kwargs):
        open(os.environ["MARK"], "w").close()
        while True:
            Lingers()

    def marked(key):
        return stuck if os.environ["RANK"] == "1" else real(key)

    distributed._shared_call = marked
    from mhaaudit.__main__ import entry
    entry(sys.argv[1:])
""")


@pytest.mark.parametrize(
    "to, codes, line",
    [
        ((1,), (2, 143), "Error: rank 1 of 2 failed: ended by SIGTERM"),
        ((0, 1), (143, 143), "Error: terminated (SIGTERM)"),
    ],
)
def test_a_rank_whose_signal_the_watch_ends_leaves_its_note_for_rank_0(tmp_path, to, codes, line):
    """SIGTERM reaching rank 1 while it runs a finaliser (its exception lost there, so the watch of
    :mod:`mhaaudit.ending` ends it) still lets rank 0 say why: rank 1 ended by SIGTERM, or, where both ranks had
    it, "terminated". Rank 1 left no note that way, and rank 0 said it "stopped without reporting an error"."""
    (r0, out0, err0), (r1, out1, err1) = _signalled(tmp_path, LOST_DRIVER, signal.SIGTERM, to)
    assert (r0, r1) == codes, err0 + err1
    assert err0.strip().splitlines() == [line] and (out0, out1, err1) == ("", "", ""), err0 + err1


def test_a_features_file_that_differs_or_is_missing_on_a_node_is_refused_in_one_line(tmp_path):
    """``kruskal FILE`` where each rank reads its own folder: a rank whose file of that name holds other vectors,
    or has none, ends the job in one line naming the file (status 2); it mapped whatever its file held (other
    vectors, silently; a missing file was an internal error, exit 3)."""
    import numpy as np

    g = np.random.default_rng(2)
    nodes = [tmp_path / "n0", tmp_path / "n1"]
    for node in nodes:
        node.mkdir()
        np.save(node / "X.npy", g.standard_normal((60, 8)).astype(np.float32))
    args = ["kruskal", "X.npy", "--k", 4, "--samples", 100, "--device", "cpu", "--format", "json"]
    (r0, out0, err0), (r1, out1, err1) = launch(args, cwds=nodes)
    assert (r0, r1, out0, out1, err1) == (2, 2, "", "", ""), err0 + err1
    assert_one_error(2, err0, "rank 1 of 2 failed: X.npy on this node differs from rank 0's (SHA-256")
    (nodes[1] / "X.npy").unlink()
    (r0, out0, err0), (r1, _, err1) = launch(args, cwds=nodes)
    assert (r0, r1, out0) == (2, 2, ""), err0 + err1
    assert_one_error(2, err0, "rank 1 of 2 failed: cannot read X.npy on this node")
    (nodes[1] / "X.npy").write_bytes((nodes[0] / "X.npy").read_bytes())  # the same bytes: read as one process
    (r0, out0, err0), (r1, _, err1) = launch(args, cwds=nodes)
    rc, one, err = single(args, cwd=nodes[0])
    assert (r0, r1, rc) == (0, 0, 0), err0 + err1 + err
    assert json.loads(out0)["records"] == json.loads(one)["records"]


def test_every_rank_ends_with_rank_0_s_status(vit_dir, image_dir, tmp_path):
    """The ranks that follow rank 0 end with its status: 1 where ``--fail-on`` fails, 2 where rank 0 refuses an
    input outside a shared call (they ended with 0 whatever rank 0's status was, once it said it was done)."""
    rc, _, err = single(_check_args(vit_dir, image_dir, "--fail-on", "any"))
    assert rc == 1, err
    (r0, out0, err0), (r1, out1, err1) = launch(_check_args(vit_dir, image_dir, "--fail-on", "any"))
    assert (r0, r1, out1) == (1, 1, ""), err0 + err1
    assert json.loads(out0)["records"]
    (r0, out0, err0), (r1, out1, err1) = launch(["kruskal", tmp_path / "none.npy", "--k", 4, "--device", "cpu"])
    assert (r0, r1, out0, out1, err1) == (2, 2, "", "", ""), err0 + err1
    assert_one_error(2, err0, "none.npy")


@pytest.mark.slow
def test_two_ranks_give_the_capacity_of_one_process(bert_dir, tmp_path):
    """Text data, the Z builder and Proposition 2's shared context (rank 0's first example on every rank)."""
    args = [
        "capacity",
        bert_dir,
        "--context-length",
        16,
        "--limit",
        26,
        "--batch-size",
        4,
        "--samples",
        100,
        "--variants",
        "random",
        "--shared-context",
        "--device",
        "cpu",
        "--format",
        "json",
    ]
    rc, one, err = single(args)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b["meta"]["notes"] == a["meta"]["notes"]
    assert b["meta"]["distributed"]["world_size"] == 2 and out1 == ""


def test_two_ranks_spread_a_series_and_give_the_records_of_one_process(vit_dir, image_dir, tmp_path):
    """``check --checkpoints``: the reference audited by both ranks together, then the checkpoints spread
    over the ranks in rounds (a repeat decided across the ranks: checkpoint 3 on rank 1 repeats
    checkpoint 2 on rank 0); rank 0 writes the records of one process, rank 1 nothing, and asks nothing of the
    results file's folder (here, as on another node, rank 1 has none)."""
    import shutil

    from conftest import save_tiny_vit

    runs = tmp_path / "runs"
    for step, seed in ((100, 1), (200, 2), (300, 3)):
        save_tiny_vit(runs / f"ckpt-{step}", seed=seed)
    shutil.copytree(runs / "ckpt-300", runs / "ckpt-400")
    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for c in cwds:
        c.mkdir()
    for c in (tmp_path, cwds[0]):
        (c / "results").mkdir()
    args = _check_args(vit_dir, image_dir, "--sweep", "--checkpoints", f"{runs}/ckpt-*", "--out", "results/s.parquet")
    rc, one, err = single(args, cwd=tmp_path)
    assert rc == 0, err
    (r0, out0, err0), (r1, out1, err1) = launch(args, cwds=cwds)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(one), json.loads(out0)
    assert b["records"] == a["records"] and b["sweep"] == a["sweep"]
    statuses = [c["status"] for c in b["meta"]["series"]["checkpoints"]]
    assert (
        statuses
        == ["audited", "audited", "audited", "identical"]
        == [c["status"] for c in a["meta"]["series"]["checkpoints"]]
    )
    assert out1 == "" and err1 == "" and os.listdir(cwds[1]) == []
    assert (cwds[0] / "results" / "s.parquet").is_file() and tmp_leftovers(cwds[0] / "results") == []


@pytest.mark.parametrize(
    "command",
    ["kruskal", pytest.param("check", marks=pytest.mark.slow)],
)
def test_native_chatter_stays_off_stdout_on_every_rank(vit_dir, image_dir, tmp_path, command):
    """A native library writes to descriptor 1 from inside the work on both ranks (as NCCL or MKL
    would): rank 0's stdout is still the document alone, rank 1's is empty, and each rank's stderr
    has what was written."""
    import numpy as np

    np.save(tmp_path / "X.npy", np.random.default_rng(0).standard_normal((120, 16)))
    driver = tmp_path / "chatty.py"
    driver.write_text(chatter.DRIVER)
    if command == "kruskal":
        args = ["kruskal", tmp_path / "X.npy", "--k", 8, "--sweep", "--samples", 300, "--device", "cpu"]
        args += ["--format", "json"]
    else:
        args = [*_check_args(vit_dir, image_dir)[:-2], "--format", "table"]
    (r0, out0, err0), (r1, out1, err1) = launch(args, driver=driver)
    assert (r0, r1) == (0, 0), err0 + err1
    if command == "kruskal":
        assert [r["k"] for r in json.loads(out0)["records"]] == [8]
    else:
        # rich wraps the header at the terminal's width; a long temporary path breaks it anywhere
        head = f"{vit_dir}: vit (hf), n = 17, d = 32, T = 30 examples"
        assert "".join(out0.split()).startswith("".join(head.split())), out0[:300]
    assert out1 == ""
    for err in (err0, err1):
        assert chatter.WRITE.decode() in err and chatter.PRINTF.decode() in err, err[-2000:]
    assert chatter.WRITE.decode() not in out0 and chatter.PRINTF.decode() not in out0


@pytest.mark.parametrize(
    "rank, mode, code, words",
    [
        (1, "kill", 2, "rank 1 of 2 stopped without reporting an error"),
        pytest.param(1, "data", 2, "rank 1 of 2 failed: batch unreadable on purpose", marks=pytest.mark.slow),
        pytest.param(1, "bug", 3, "rank 1 of 2 failed: ValueError: a bug on purpose", marks=pytest.mark.slow),
        (0, "data", 2, "Error: batch unreadable on purpose"),
        pytest.param(0, "bug", 3, "ValueError: a bug on purpose", marks=pytest.mark.slow),
    ],
)
def test_a_failing_rank_ends_the_job_with_one_line(vit_dir, image_dir, tmp_path, rank, mode, code, words):
    """Rank 0 says the one line, and the other rank nothing. When rank 0 failed on its first batch, rank 1 waited
    inside a collective rank 0 would never join; rank 0, which holds the job's store, waited for rank 1 to leave,
    then left, and rank 1 met the closed store: some 26 KB of the store's warnings on its stderr. Every rank now
    counts itself in at a collective through the store, reading the others' failure notes as it waits, so rank
    1 hears rank 0's failure at once and leaves first, quietly."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out.parquet"
    (r0, out0, err0), (r1, _, err1) = launch(
        _check_args(vit_dir, image_dir, "--out", out), driver=driver, FAIL_RANK=rank, FAIL_MODE=mode
    )
    lines = err0.strip().splitlines()
    assert r0 == code and len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], err0
    assert "Traceback" not in err0 and out0 == ""
    assert r1 != 0 and err1 == ""
    assert not out.exists() and tmp_leftovers(tmp_path) == []


def test_ranks_that_built_other_models_refuse_before_any_batch(image_dir, tmp_path):
    """Batches dealt by rank 0, but every rank builds the model from its own node's files: a node whose
    trained weights differ from rank 0's (another seed's, the same config) ends every rank in one line,
    exit 2, naming the weights, and nothing is written."""
    from conftest import save_tiny_vit

    cwds = [tmp_path / "rank0", tmp_path / "rank1"]
    for r, c in enumerate(cwds):
        save_tiny_vit(c / "tiny", seed=r)
    (r0, out0, err0), (r1, out1, err1) = launch(
        _check_args("./tiny", image_dir, "--variants", "trained", "--out", "out.parquet"), cwds=cwds
    )
    lines = err0.strip().splitlines()
    assert (r0, r1) == (2, 2) and len(lines) == 1, err0 + err1
    assert lines[0].startswith(
        "Error: rank 1 of 2 read other inputs than rank 0: the weights of ./tiny (trained weights, blocks up to 1) "
        "differ (SHA-256 "
    ), err0
    assert out0 == out1 == err1 == "" and not any((c / "out.parquet").exists() for c in cwds)


def test_a_model_s_digests_cover_its_weights_and_its_preprocessing(vit_dir, monkeypatch):
    """The layout digest follows the model's preprocessing (a node's own preprocessor files), the weights
    digest its tensors; random weights are labelled with the seed they are drawn from."""
    from mhaaudit import readings
    from mhaaudit.models import load_model

    pm = load_model(str(vit_dir), weights="random", device="cpu", max_layer=1, seed=3)
    first = readings.model_digests(pm, "random", 3, 1)
    layout = f"the configuration, tensor shapes and preprocessing of {vit_dir} (random weights, blocks up to 1)"
    weights = f"the weights of {vit_dir} (random weights, blocks up to 1) with weights seed 3"
    assert sorted(first) == [layout, weights]
    own = pm.preprocess
    monkeypatch.setattr(
        pm, "preprocess", lambda batch, device=None: {"pixel_values": own(batch, device)["pixel_values"] * 2}
    )
    second = readings.model_digests(pm, "random", 3, 1)
    assert second[layout] != first[layout] and second[weights] == first[weights]
    with torch.no_grad():
        next(pm.module.parameters()).view(-1)[0] += 1
    assert readings.model_digests(pm, "random", 3, 1)[weights] != first[weights]


@pytest.mark.slow
def test_a_rank_killed_under_torchrun_is_named_by_rank_0(vit_dir, image_dir, tmp_path):
    """torchrun ends the other processes with SIGTERM once one has died: rank 0 names the lost rank
    in one line of its own (torchrun's own report follows it), and writes nothing."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out.parquet"
    (tmp_path / "tmp").mkdir()  # torchrun's own log folder lands here, not in the system's
    env = _env(FAIL_RANK=1, FAIL_MODE="kill", TMPDIR=tmp_path / "tmp")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            str(driver),
            *map(str, _check_args(vit_dir, image_dir, "--out", out)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        cwd=tmp_path,
        check=False,
    )
    ours = [ln for ln in p.stderr.splitlines() if ln.startswith("Error: ")]
    assert p.returncode != 0 and p.stdout == ""
    assert ours == [
        "Error: rank 1 of 2 stopped without reporting an error (killed, or out of memory); the job is ended"
    ], p.stderr
    assert not out.exists() and tmp_leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_source_that_fails_on_rank_0_ends_every_rank(vit_dir, tmp_path):
    from PIL import Image

    gray = tmp_path / "gray"
    gray.mkdir()
    for i in range(3):
        Image.new("L", (20, 20), color=i * 40).save(gray / f"{i}.png")
    (r0, _, err0), (r1, _, err1) = launch(_check_args(vit_dir, gray))
    lines = err0.strip().splitlines()
    assert (r0, r1) == (2, 2) and len(lines) == 1 and "0 usable images" in lines[0], err0
    assert err1 == ""


# Seeds spread over the ranks take unequal times; one takes longer than the job's collective timeout.
# Each seed's result is an audit column holding its features (a T x d tensor filled with the seed).
UNEQUAL_SEEDS_DRIVER = textwrap.dedent("""
    import json, os, time
    import torch
    from mhaaudit import distributed
    from mhaaudit.auditing import Column, Probe
    from mhaaudit.features import FeatureSet
    from mhaaudit.seeds import over_seeds, plan_seeds

    def fn(seed, weights_seed=None, data_seed=None):
        time.sleep(6 if seed == 2 else 0.1)
        rows = torch.full((64, 8), float(seed))
        fs = FeatureSet(queries=rows, a3=rows.clone(), context={}, n=4, d=8, query_index=0)
        return Column(Probe("random", "random", 0), reason=f"seed {seed}", features=fs, T=64)

    @distributed.shared
    def run():
        return over_seeds(fn, plan_seeds("0-2"))

    got = run()
    held = [None if c.features is None else int(c.features.queries[0, 0]) for c in got]
    print(json.dumps({"reasons": [c.reason for c in got], "features": held}), flush=True)
    os._exit(0)
""")


def test_ranks_wait_for_a_slower_ranks_seeds_past_the_timeout(tmp_path):
    """Rank 0 runs seeds 0 and 2 (6 s), rank 1 seed 1 (0.1 s): rank 1 waits for rank 0 past the
    job's 2 s collective timeout, and both get the three results in seed order. Rank 0, which
    prints and writes, holds every seed's features; rank 1 its own seed's only (the others' results
    come without them)."""
    driver = tmp_path / "seeds.py"
    driver.write_text(UNEQUAL_SEEDS_DRIVER)
    (r0, out0, err0), (r1, out1, err1) = launch([], driver=driver, MHAAUDIT_DIST_TIMEOUT=2)
    assert (r0, r1) == (0, 0), err0 + err1
    a, b = json.loads(out0), json.loads(out1)
    assert a["reasons"] == b["reasons"] == ["seed 0", "seed 1", "seed 2"]
    assert a["features"] == [0, 1, 2]
    assert b["features"] == [None, 1, None]


def test_a_reader_never_closed_is_stopped_and_waited_for_at_exit():
    """A run that fails while its reader reads ahead may leave the generator unclosed (a traceback keeps it alive):
    the exit's stop_helpers stops the reader after its item and waits for it, so no daemon thread is inside
    native code when the interpreter is torn down (which ended the process with SIGABRT)."""
    from mhaaudit import pipeline, workers

    def endless():
        i = 0
        while True:
            time.sleep(0.01)
            i += 1
            yield i

    before = set(workers._HELPERS)  # a reader an earlier test closed early may still finish its item
    got = pipeline._read_ahead(endless(), 2)
    assert next(got) == 1
    readers = [t for t in workers._HELPERS if t.name == "mhaaudit-read" and t not in before]
    assert len(readers) == 1 and readers[0].is_alive()
    workers.stop_helpers()
    assert not readers[0].is_alive() and readers[0] not in workers._HELPERS
    workers.stop_helpers()  # nothing left: nothing to do


@pytest.mark.parametrize("signalled", [False, True])
def test_read_ahead_closed_early_waits_for_its_reader_unless_a_signal_ends_the_run(signalled, monkeypatch):
    """Closed early, the reader is waited for (a few seconds at most) while it finishes its item; while a
    signal is ending the run it is not: the item goes unused."""
    from mhaaudit import ending
    from mhaaudit.pipeline import _read_ahead

    release, making, made, joined = threading.Event(), threading.Event(), [], []
    join = threading.Thread.join

    def spied(thread, *args, **kwargs):
        if thread.name == "mhaaudit-read":
            joined.append(thread.name)
        return join(thread, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "join", spied)

    def items():
        yield 0
        making.set()
        release.wait(30)
        made.append(1)
        yield 1

    got = _read_ahead(items(), 1)
    assert next(got) == 0
    assert making.wait(10)
    if signalled:
        ending.note(signal.SIGINT)
    try:
        if not signalled:
            threading.Timer(0.3, release.set).start()  # the reader finishes its item after a while
        got.close()
        # waited for the reader (which finished its item meanwhile) only when no signal ends the run
        assert (joined, made) == (([], []) if signalled else (["mhaaudit-read"], [1]))
    finally:
        ending.clear()
        release.set()
