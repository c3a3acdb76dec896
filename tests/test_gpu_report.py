"""benchmarks/gpu_report.py: every part runs (at smoke sizes, on the CPU), resumes, and renders its table.

The GPU figures themselves are taken only on a GPU; here the script's machinery is kept working:
the parts' code at tiny sizes, a part in its own process and cut off by its timeout, the records
and their resumption, the table and the docs' GPU tables, the targets, the utilisation arithmetic
and the wheel list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
g = load_script(ROOT / "benchmarks" / "gpu_report.py", "gpu_report")


def test_smoke_runs_every_part_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    res = tmp_path / "rep"
    rc = g.main(["--device", "cpu", "--smoke", "--in-process", "--results", str(res), "--budget", "100000"])
    out = capsys.readouterr().out
    assert rc == 0, out
    records = g.read_records(res / "results.jsonl")
    assert [r["part"] for r in records] == list(g.PARTS)
    assert all(r["status"] == "done" and r["result"] for r in records), [r["log_tail"] for r in records]
    by = {r["part"]: r["result"] for r in records}
    # what each part checks came out as it must, on the sizes it ran at
    assert by["kruskal"]["equal_float64"] == by["kruskal"]["check_draws"] == by["kruskal"]["equal_cpu"]
    assert by["kruskal"]["record_equal_cpu"] is True and by["kruskal"]["k"] == g.SIZES[True]["k"]
    assert by["kruskal"]["all_draws"] is True and by["kruskal"]["draws"] == g.SIZES[True]["samples"]
    kern = by["kruskal"]["kernels"]  # one more test under torch.profiler: where its time went (no device here)
    assert kern["wall_s"] > 0 and kern["device_top"] == [] and 0 < len(kern["host_top"]) <= g.KERNEL_TOP
    assert [r["host_ms"] for r in kern["host_top"]] == sorted((r["host_ms"] for r in kern["host_top"]), reverse=True)
    assert by["sweep"]["fractions_equal_cpu"] is True and by["sweep"]["d"] == g.SIZES[True]["d"]
    assert by["sweep"]["kernels"]["wall_s"] > 0 and by["sweep"]["kernels"]["host_top"]
    assert by["capture"]["diff_trunc"] == 0.0 and by["capture"]["batch"] == g.SIZES[True]["batch"]
    routes = by["routes"]  # the device's routines beside mhaaudit's placement: here all on the CPU
    assert [(c["what"], c["shape"][0]) for c in routes["calls"]] == [
        ("svdvals", 1),
        ("svdvals", 4),
        ("eigvalsh", 1),
        ("eigvalsh", 4),
    ]
    assert all(c["rel_diff"] < 1e-12 and c["naive_s"] > 0 and c["ours_s"] > 0 for c in routes["calls"])
    assert by["check-small"]["same_verdicts"] is True and by["check-small"]["T"] == g.SIZES[True]["small_limit"]
    assert by["check-paper"]["ours_verdicts"] == by["check-paper-naive"]["naive_verdicts"]
    cv = by["check-vit-base"]
    assert cv["returncode"] == 0 and cv["peak_rss_gb"] > 0.1 and cv["peak_gpu_gb"] is None  # no CUDA in that process
    assert "gpu_busy_s" not in cv and set(cv["verdicts"]) >= {"random/assumption_1", "embedding/assumption_2"}
    # whether byte-code is cached where the model library lies, before and after the runs (its own counts)
    bc, before = cv["bytecode_after"], cv["bytecode_before"]
    assert bc["package"] == "transformers" and 0 <= before["cached"] <= before["modules"] == bc["modules"] > 100
    assert 0 <= bc["cached"] <= bc["modules"] and {type(bc["dont_write_bytecode"]), type(bc["folder_writable"])} == {
        bool
    }
    kept = all(g.caches_bytecode(g.bytecode_state(p)) for p in g.BYTECODE_PACKAGES)  # else a folder of the report's
    assert (cv["bytecode_env"] == {}) == kept and by["profile"]["bytecode_env"] == cv["bytecode_env"]
    if kept:  # counted where the runs look for it: here, and there no fewer after the runs than before
        assert bc["pycache_prefix"] == sys.pycache_prefix and before["cached"] <= bc["cached"]
    else:
        assert bc["pycache_prefix"] == cv["bytecode_env"]["PYTHONPYCACHEPREFIX"] and bc["cached"] > 0
    assert by["memorize"]["points"] == 2 and by["memorize"]["seconds"] > 0
    assert by["tests"]["returncode"] == 0 and by["tests"]["skipped"] == 1 and by["tests"]["failed"] == 0
    prof = by["profile"]  # check under cProfile: its top functions by cumulative time, and its own phases
    assert 0 < len(prof["top"]) <= g.PROFILE_TOP and prof["phases_s"]["forward"] >= 0
    assert [r["cum_s"] for r in prof["top"]] == sorted((r["cum_s"] for r in prof["top"]), reverse=True)
    assert "cumulative" in (res / "profile-check-vit-base.txt").read_text()
    mine = prof["top_mhaaudit"]  # and mhaaudit's own functions apart: where its phases spend their time
    assert mine and all(r["function"].startswith("mhaaudit/") for r in mine) and len(mine) <= g.PROFILE_TOP
    assert any(r["function"].startswith("mhaaudit/contexts.py") for r in mine)
    # and its costliest imports: torch among them, and no import line left in what it would report as an error
    assert 0 < len(prof["imports"]) <= g.PROFILE_IMPORTS and "torch" in {r["module"] for r in prof["imports"]}
    assert "importtime" in (res / "profile-check-vit-base.txt").read_text()
    # and the run again with its main thread's stack sampled: every phase it spent time in, and its lines
    sampled = prof["sampled"]
    from mhaaudit.phases import PHASES

    assert sampled["exit"] == 0 and sampled["samples"] > 0 and "imports" in sampled["phases"]
    assert set(sampled["phases"]) <= {*PHASES, "other"}  # (a phase of a few ms, the smoke's forward, may go unsampled)
    spent = sum(v["seconds"] for v in sampled["phases"].values())
    assert 0.5 * sampled["wall_s"] < spent <= sampled["wall_s"] * 1.01  # each sample stands for the time it took
    assert any(line.startswith("mhaaudit/") for v in sampled["phases"].values() for line, _ in v["mhaaudit"])
    assert "stack sampled" in (res / "profile-check-vit-base.txt").read_text()
    ctx = by["contexts"]  # Assumption 2 beside the matrix_rank loop: the same ranks, every part timed
    assert ctx["ranks_equal"] is True and ctx["T"] == ctx["full_rank"] == 4 and ctx["one_thread_s"] > 0
    report = (res / "report.md").read_text()
    assert "smoke sizes, not figures" in report and "torch " in report and "commit " in report
    assert "## Where the kernels' time went" in report and "- `sweep`, one run under torch.profiler" in report
    assert "- `check vit-base` again, its main thread's stack sampled" in report
    assert "unmeasured" not in report.split("| target |")[0]  # every row measured (at smoke sizes)
    # run again: every part is done for this commit and device, nothing runs
    rc = g.main(["--device", "cpu", "--smoke", "--in-process", "--results", str(res), "--budget", "100000"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("done earlier") == len(g.PARTS)
    assert len(g.read_records(res / "results.jsonl")) == len(g.PARTS)
    # a smoke run never reaches the docs (under either name of the flag)
    for flag in ("--publish", "--update-readme"):
        published = tmp_path / "published"
        rc = g.main(
            ["--device", "cpu", "--smoke", "--in-process", "--results", str(res), flag, "--published", str(published)]
        )
        assert rc == 2 and "smoke" in capsys.readouterr().err and not published.exists()


def test_a_part_runs_in_its_own_process_and_is_stopped_at_its_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    rec = g.launch("memorize", "cpu", True, tmp_path, timeout=600)
    assert rec["status"] == "done", rec["log_tail"]
    assert rec["result"]["points"] == 2 and rec["result"]["reused"] == 0
    again = g.launch("memorize", "cpu", True, tmp_path, timeout=600)  # its points come back from its parquet
    assert again["status"] == "done" and again["result"]["reused"] == 2
    assert again["result"]["attempts_s_before"] == pytest.approx(rec["result"]["seconds"])
    cut = g.launch("check-small", "cpu", True, tmp_path, timeout=0.5)
    assert cut["status"] == "timeout" and cut["result"] is None and cut["seconds"] < 30


def test_unknown_part_and_cuda_without_a_gpu_are_refused(tmp_path, capsys, monkeypatch):
    assert g.main(["--device", "cpu", "--parts", "kruskal,nope", "--results", str(tmp_path)]) == 2
    assert "unknown part 'nope'" in capsys.readouterr().err
    monkeypatch.setattr(g.shutil, "which", lambda name: None)
    assert g.main(["--device", "cuda", "--results", str(tmp_path)]) == 2
    assert "nvidia-smi" in capsys.readouterr().err
    assert not (tmp_path / "results.jsonl").exists()


def _docs_hooks():
    return load_script(ROOT / "docs" / "hooks.py", "mhaaudit_docs_hooks", fresh=True)


def test_the_docs_gpu_tables_are_the_scripts_tables():
    """Nothing hand-copied: the Benchmarks page's GPU rows are what the script renders from the records of
    the runs committed in benchmarks/results/gpu/ (all unmeasured while there is none)."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page.count("<!-- benchmarks: gpu -->") == 1 and "| what (GPU) |" not in page
    block = _docs_hooks().gpu_tables()
    files = sorted((ROOT / "benchmarks" / "results" / "gpu").glob("*.jsonl"))
    if not files:
        assert block == g.table({}, None)
        assert block.count("unmeasured") >= 20
        return
    for path in files:  # each run: stamped with its card, driver, versions and commit, never a smoke run
        records = g.read_records(path)
        keys = {json.dumps(r["key"], sort_keys=True) for r in records if r["part"] in g.PARTS}
        for key in keys:
            parts = g.latest(records, json.loads(key))
            stamp = next(r["stamp"] for r in reversed(records) if r.get("stamp") and r["part"] in parts)
            table = g.table(parts, stamp)
            assert table in block and not json.loads(key)["smoke"]
            assert "driver" in table and "CUDA" in table and f"commit {stamp['commit']}" in table


def _record(part, result, status="done", key=None):
    return {
        "part": part,
        "status": status,
        "result": result,
        "seconds": 1.0,
        "timeout_s": 540.0,
        "log_tail": "",
        "key": key or {"commit": "c", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "smoke": False},
    }


def test_a_profile_that_fails_is_said_and_costs_its_part_nothing():
    import torch

    failing = g.kernel_profile(lambda: 1 / 0, torch.device("cpu"))
    assert failing == {"error": "ZeroDivisionError: division by zero"}
    text = g.kernels_text({"kruskal": _record("kruskal", {"kernels": failing})})
    assert "- `kruskal`: not profiled (ZeroDivisionError: division by zero)" in text


def test_targets_pass_and_miss():
    fine = {
        "check-vit-base": _record("check-vit-base", {"wall_s": 7.5, "gpu_busy_fraction": 0.45}),
        "kruskal": _record("kruskal", {"ours_s": 0.04, "all_draws": True, "stopped_s": 0.01, "stopped_draws": 320}),
        "sweep": _record("sweep", {"ours_s": 0.6}),
        "memorize": _record("memorize", {"seconds": 700.0}),
    }
    got = {t.split()[0]: st for t, _, st in g.targets(fine, "NVIDIA H100 80GB HBM3")}
    assert got == {"`check": "PASS", "k": "PASS", "sweep": "MISS", "Figure": "MISS"}
    # a record that timed the test stopped once decided measured the target only where it missed it
    for took, status in ((0.04, "unmeasured"), (0.26, "MISS")):
        stopped = dict(fine, kruskal=_record("kruskal", {"ours_s": took}))
        measured, st = g.targets(stopped, "NVIDIA H200")[1][1:]
        assert st == status and "stopped once decided, not every draw" in measured
    assert g.targets(fine, "NVIDIA H200")[0][2] == "PASS"
    idle = dict(fine, **{"check-vit-base": _record("check-vit-base", {"wall_s": 7.5, "gpu_busy_fraction": 0.3})})
    assert g.targets(idle, "NVIDIA H100 80GB HBM3")[0][2] == "MISS"  # fast, but the GPU mostly idle
    slow = dict(fine, **{"check-vit-base": _record("check-vit-base", {"wall_s": 9.0, "gpu_busy_fraction": 0.9})})
    assert g.targets(slow, "NVIDIA H200")[0][2] == "MISS"
    assert g.targets(fine, "NVIDIA A100-SXM4-40GB")[0][2] == "not an H100 or H200"
    cut = {"memorize": _record("memorize", None, status="timeout")}
    assert g.targets(cut, None)[3][1].startswith("unfinished") and g.targets(cut, None)[3][2] == "unmeasured"


def _fake_parts(monkeypatch, took: dict[str, float]):
    """Parts that take ``took[part]`` seconds of a fake clock (and the clock the budget reads)."""
    clock = [0.0]
    ran: list[tuple[str, float]] = []
    monkeypatch.setattr(g.time, "perf_counter", lambda: clock[0])

    def launch(name, device, smoke, workdir, timeout):
        ran.append((name, timeout))
        spent = min(took.get(name, 1.0), timeout)
        clock[0] += spent
        status = "done" if took.get(name, 1.0) <= timeout else "timeout"
        return {"part": name, "status": status, "seconds": spent, "timeout_s": timeout, "result": {}, "log_tail": ""}

    monkeypatch.setattr(g, "launch", launch)
    monkeypatch.setattr(g, "table", lambda parts, s, smoke=False: "table")
    return ran


def test_the_budget_runs_the_most_valuable_parts_first_and_the_next_call_resumes(tmp_path, monkeypatch, capsys):
    """Parts run by value, whatever order --parts names them in; a part starts only when its expected
    time fits what is left of the budget (the others wait), its timeout never passes the budget,
    and the next call with the same results runs what was left."""
    took = {p: 100.0 for p in g.PARTS}
    monkeypatch.setattr(g, "EXPECTED_S", {p: 100.0 for p in g.PARTS} | {"memorize": 60.0})
    ran = _fake_parts(monkeypatch, took)
    args = [
        "--device",
        "cpu",
        "--results",
        str(tmp_path),
        "--commit",
        "abc1234",
        "--parts",
        ",".join(reversed(g.PARTS)),
    ]
    assert g.main([*args, "--budget", "330"]) == 0
    out = capsys.readouterr().out
    assert [name for name, _ in ran] == list(g.PARTS[:3])  # 3 x 100 s in 330 - 15 s
    assert all(t <= 330 - g.MARGIN_S for _, t in ran)
    assert "left for the next call" in out and g.PARTS[3] in out.split("left for the next call (")[1]
    ran.clear()
    assert g.main([*args, "--budget", "330"]) == 0  # resumes: the first three are done for this commit
    assert [name for name, _ in ran] == list(g.PARTS[3:6])
    recs = g.read_records(tmp_path / "results.jsonl")
    assert [r["part"] for r in recs] == list(g.PARTS[:6]) and len({str(r["key"]) for r in recs}) == 1
    # a part that needs more than is left waits while a later one that fits runs; memorize takes what is left
    ran.clear()
    took["profile"] = 10.0
    monkeypatch.setattr(g, "EXPECTED_S", dict(g.EXPECTED_S, profile=10.0))
    assert g.main([*args, "--budget", "90"]) == 0
    assert [name for name, _ in ran] == ["profile", "memorize"]
    assert ran[1][1] == pytest.approx(90 - g.MARGIN_S - 10.0)  # cut at the budget: it resumes next time
    assert (
        g.latest(g.read_records(tmp_path / "results.jsonl"), g.read_records(tmp_path / "results.jsonl")[-1]["key"])[
            "memorize"
        ]["status"]
        == "timeout"
    )


def test_expected_time_follows_the_records():
    done = {"part": "sweep", "status": "done", "seconds": 30.0, "key": {"smoke": False}}
    smoke = {"part": "sweep", "status": "done", "seconds": 1.0, "key": {"smoke": True}}
    cut = {"part": "tests", "status": "timeout", "seconds": 200.0, "key": {"smoke": False}}
    assert g.expected_seconds("sweep", [done, smoke], smoke=False) == pytest.approx(36.0)
    assert g.expected_seconds("tests", [cut], smoke=False) == pytest.approx(300.0)
    assert g.expected_seconds("kruskal", [], smoke=False) == g.EXPECTED_S["kruskal"]
    assert g.expected_seconds("memorize", [done], smoke=False) == g.EXPECTED_S["memorize"]


def test_the_commit_is_the_projects_own(tmp_path, monkeypatch):
    """A copy of the project inside another git repository does not take that repository's HEAD:
    the commit comes from --commit, the environment, or the stamp --prepare left beside the wheels."""
    import shutil
    import subprocess

    outer = tmp_path / "outer"
    copy = outer / "vendored" / "mhaaudit-copy"
    (copy / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu_report.py", copy / "benchmarks" / "gpu_report.py")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(outer)], check=True)
    subprocess.run([*git, "-C", str(outer), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(outer), "commit", "-q", "-m", "outer"], check=True)
    outer_head = subprocess.run(
        ["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setattr(g, "ROOT", copy)
    monkeypatch.delenv("MHAAUDIT_COMMIT", raising=False)
    assert g.git_commit() is None and g.commit() is None
    assert g.commit("1234abc") == "1234abc"
    monkeypatch.setenv("MHAAUDIT_COMMIT", "fedcba9")
    assert g.commit() == "fedcba9"
    monkeypatch.delenv("MHAAUDIT_COMMIT")
    (copy / "wheels").mkdir()
    (copy / "wheels" / "COMMIT").write_text("8f91575ab79d\n")
    assert g.commit() == "8f91575ab79d" and not g.commit().startswith(outer_head[:12])
    (copy / "wheels" / "COMMIT").write_text("not a commit\n")
    assert g.commit() is None
    # the project's own repository gives its HEAD
    monkeypatch.setattr(g, "ROOT", ROOT)
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        assert g.git_commit().split("+")[0] == head.strip()[:12]


def test_import_rows_reads_importtime_lines():
    err = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       100 |        100 |   b\n"
        "import time:      2000 |       2100 | a\n"
        "Error: something\n"
        "import time:        50 |       3000 | c\n"
    )
    rows, rest = g.import_rows(err, top=2)
    assert rows == [
        {"module": "c", "depth": 0, "own_s": 50e-6, "cum_s": 3000e-6},
        {"module": "a", "depth": 0, "own_s": 2000e-6, "cum_s": 2100e-6},
    ]
    assert rest == "Error: something"
    assert g.import_rows(err)[0][2] == {"module": "b", "depth": 1, "own_s": 100e-6, "cum_s": 100e-6}


def test_a_copy_whose_git_lags_its_files_is_measured_as_its_files(tmp_path, monkeypatch):
    """A copy of the project whose ``.git`` is older than its files (git says HEAD+dirty) is stamped with the
    commit --prepare wrote beside the wheels when every tracked file is that commit's (its TREE manifest),
    and with git's HEAD+dirty when one is not."""
    import subprocess

    copy = tmp_path / "copy"
    (copy / "benchmarks").mkdir(parents=True)
    (copy / "a.txt").write_text("old\n")
    (copy / "benchmarks" / "b.txt").write_text("kept\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-C", str(copy)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "old"], check=True)
    monkeypatch.setattr(g, "ROOT", copy)
    monkeypatch.delenv("MHAAUDIT_COMMIT", raising=False)
    old = g.git_commit()
    assert old and not old.endswith("+dirty")
    manifest = g.tree_manifest()  # a clean tree: what --prepare writes
    assert manifest and len(manifest.splitlines()) == 2
    # the files move on to a newer commit's; the copy's .git stays behind
    (copy / "a.txt").write_text("new\n")
    a_new = g._blob_id(copy / "a.txt")
    assert g.git_commit() == old + "+dirty" and g.tree_manifest() is None
    (copy / "wheels").mkdir()
    (copy / "wheels" / "COMMIT").write_text("abcdef123456\n")
    lines = [line.split(" ", 2) for line in manifest.splitlines()]
    (copy / "wheels" / "TREE").write_text("".join(f"{m} {a_new if p == 'a.txt' else o} {p}\n" for m, o, p in lines))
    assert g.commit() == "abcdef123456"
    (copy / "a.txt").write_text("newer\n")  # not the stamped commit's file: git's word, dirty
    assert g.commit() == old + "+dirty"
    (copy / "a.txt").write_text("new\n")
    good = (copy / "wheels" / "TREE").read_text()
    assert g.verified_stamp() == "abcdef123456"
    for bad in (
        manifest.replace("a.txt", "../a.txt"),  # a path out of the copy
        "",  # a manifest that lists nothing checks nothing
        "".join(line + "\n" for line in good.splitlines() if not line.endswith(" a.txt")),  # a tracked file unlisted
        good + "100644 " + "0" * 40 + " loop\n",  # a link that loops
    ):
        (copy / "wheels" / "TREE").write_text(bad)
        assert g.verified_stamp() is None and g.commit() == old + "+dirty"
    (copy / "loop").symlink_to(copy / "loop")
    assert g.verified_stamp() is None  # (the loop itself: no error)
    (copy / "loop").unlink()
    # the COMMIT beside the TREE, never another folder's
    (copy / "wheels" / "TREE").unlink()
    other = tmp_path / "other-wheels"
    other.mkdir()
    (other / "TREE").write_text(good)
    assert g.verified_stamp(str(other)) is None
    (other / "COMMIT").write_text("fedcba654321\n")
    assert g.verified_stamp(str(other)) == "fedcba654321"


def test_report_only_renders_the_records_as_stamped(tmp_path, capsys):
    """The table of a results file from another machine, stamped with that machine's card and commit."""
    shutil_records = tmp_path / "results.jsonl"
    st = {
        "commit": "8f91575ab79d",
        "device": "cuda",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "python": "3.12.3",
        "transformers": "5.24.0",
        "timm": "1.0.31",
        "cpu_cores": 16,
        "date": "2026-11-28",
        "gpu": "NVIDIA H200",
        "driver": "580.159.04",
    }
    key = {"commit": "8f91575ab79d", "device": "cuda", "gpu": "NVIDIA H200", "smoke": False}
    measured = {"T": 2000, "naive_s": 29.9, "naive_draws": 1000, "ours_s": 0.23, "equal_float64": 1000}
    measured |= {"check_draws": 1000, "equal_cpu": 1000, "record_equal_cpu": True}
    g.append_record(shutil_records, _record("kruskal", measured, key=key) | {"stamp": st})
    assert g.main(["--report-only", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "commit 8f91575ab79d" in out and "driver 580.159.04" in out
    assert g.main(["--report-only", "--results", str(tmp_path / "none")]) == 2
    # --publish with --report-only: the newest run's records, copied for the docs, which render the same table
    published = tmp_path / "published"
    assert g.main(["--report-only", "--results", str(tmp_path), "--publish", "--published", str(published)]) == 0
    out = capsys.readouterr().out
    (path,) = published.iterdir()
    assert path.name == "nvidia-h200-8f91575ab79d.jsonl" and str(path) in out
    copied = g.read_records(path)
    assert copied == g.read_records(shutil_records)
    assert g.table(g.latest(copied, key), st) in out  # the table the docs build from it is the one printed
    # never a smoke run
    smoke = tmp_path / "smoke"
    g.append_record(smoke / "results.jsonl", _record("kruskal", measured, key=dict(key, smoke=True)) | {"stamp": st})
    assert g.main(["--report-only", "--results", str(smoke), "--publish", "--published", str(smoke / "pub")]) == 2
    assert "--publish" in capsys.readouterr().err and not (smoke / "pub").exists()


def test_latest_keeps_a_done_part_over_a_later_failure_and_ignores_other_keys():
    key = {"commit": "a", "device": "cuda", "gpu": "G", "smoke": False}
    recs = [
        _record("sweep", {"ours_s": 1}, key=key),
        _record("sweep", None, status="failed", key=key),
        _record("kruskal", {"ours_s": 1}, key=dict(key, commit="b")),
    ]
    got = g.latest(recs, key)
    assert set(got) == {"sweep"} and got["sweep"]["status"] == "done"


def test_publish_copies_only_this_runs_records(tmp_path):
    key = {"commit": "abc1234", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "smoke": False}
    mine = [_record("kruskal", {"ours_s": 1.0}, key=key), _record("sweep", {"ours_s": 2.0}, key=key)]
    other = _record("kruskal", {"ours_s": 3.0}, key=dict(key, commit="def5678"))
    path = g.publish([mine[0], other, mine[1]], key, tmp_path / "gpu")
    assert path.name == "nvidia-h100-80gb-hbm3-abc1234.jsonl"
    assert g.read_records(path) == mine
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_records_survive_a_cut_off_line(tmp_path):
    path = tmp_path / "results.jsonl"
    g.append_record(path, {"part": "kruskal"})
    with open(path, "a") as fh:
        fh.write('{"part": "swe')  # the machine went away mid-write
    assert g.read_records(path) == [{"part": "kruskal"}]


def test_gpu_busy_time_from_utilisation_samples():
    assert g.parse_utilization("87, 1234\n") == (87.0, 1234.0)
    assert g.parse_utilization("[N/A], 3") is None and g.parse_utilization("utilization.gpu") is None
    samples = [(0.5, 100.0, 0), (1.0, 100.0, 0), (2.0, 50.0, 0), (3.0, 0.0, 0), (4.0, 100.0, 0)]
    # from t = 1 to t = 3.5: [1, 2] at 50%, [2, 3] at 0%, [3, 3.5] at 100%
    assert g.busy_seconds(samples, 1.0, 3.5) == pytest.approx(0.5 + 0.0 + 0.5)
    assert g.busy_seconds([], 0.0, 10.0) == 0.0


def test_wheels_to_carry_follow_the_requirements_and_leave_torch_behind():
    pins = g.wheel_closure()
    assert {"transformers", "timm", "huggingface-hub", "tokenizers", "safetensors"} <= set(pins)
    assert not {"torch", "torchvision", "numpy", "pyarrow"} & set(pins)
    assert not any(name.startswith("nvidia-") for name in pins)
    assert g._wheel_name(Path("huggingface_hub-2.4.0-py3-none-any.whl")) == ("huggingface-hub", "2.4.0")


def test_cuda_test_files_are_found_by_what_they_say():
    files = g.cuda_test_files()
    assert "tests/test_kruskal_device_route.py" in files and "tests/test_gpu_report.py" not in files
    assert all("cuda" in (ROOT / f).read_text() for f in files)


def test_the_grid_part_stops_itself_before_its_end_and_the_next_call_goes_on(tmp_path, monkeypatch):
    """memorize knows when its process will be stopped (launch sets the deadline) and ends the grid
    before it, keeping what it trained; the record says timeout, and the next attempt finishes it."""
    import time

    from mhaaudit.memorize import grid as grid_mod

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv(g.DEADLINE_ENV, str(time.time() + 60))
    reads = iter([0.0])  # the grid's deadline is set at 0; every later reading is past it
    monkeypatch.setattr(grid_mod.time, "monotonic", lambda: next(reads, 1e9))
    cut = g.run_in_process("memorize", "cpu", True, tmp_path)
    assert cut["status"] == "timeout" and cut["result"]["finished"] is False
    assert cut["result"]["points_left"] == cut["result"]["points"] == 2
    monkeypatch.undo()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    done = g.run_in_process("memorize", "cpu", True, tmp_path)
    assert done["status"] == "done" and done["result"]["points"] == 2
    assert done["result"]["attempts_s_before"] == pytest.approx(cut["result"]["seconds"])


def test_byte_code_is_cached_for_the_runs_where_the_install_cannot_keep_it(tmp_path, monkeypatch):
    """Where torch's or transformers' byte-code cannot be kept where they are installed, the report's runs cache it
    in a folder of their own (and not otherwise), so that a second run is a second run."""
    ok = {"dont_write_bytecode": False, "pycache_prefix": None, "folder_writable": True, "modules": 9, "cached": 0}
    assert g.bytecode_env(tmp_path, [ok, ok]) == {}
    assert g.bytecode_env(tmp_path, [ok, dict(ok, pycache_prefix="/elsewhere", folder_writable=False)]) == {}
    compiled = dict(ok, folder_writable=False, dont_write_bytecode=True, cached=9)  # compiled at install: kept as is
    assert g.bytecode_env(tmp_path, [ok, compiled]) == {}
    for bad in (dict(ok, folder_writable=False), dict(ok, dont_write_bytecode=True)):
        env_set = g.bytecode_env(tmp_path, [ok, bad])
        assert env_set == {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "PYTHONDONTWRITEBYTECODE": None}
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = g.child_env(env_set, GPU_REPORT_PEAK="x")
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
    assert env["GPU_REPORT_PEAK"] == "x" and g.child_env({})["PYTHONDONTWRITEBYTECODE"] == "1"
    here = [g.bytecode_state(p) for p in g.BYTECODE_PACKAGES]
    assert [s["package"] for s in here] == list(g.BYTECODE_PACKAGES) and all(s["modules"] > 100 for s in here)
    elsewhere = g.bytecode_state("transformers", prefix=str(tmp_path / "pycache"))  # counted where the runs kept it
    assert elsewhere["cached"] == 0 and elsewhere["pycache_prefix"] == str(tmp_path / "pycache")
    assert sys.pycache_prefix is None or sys.pycache_prefix != str(tmp_path / "pycache")  # put back as it was
