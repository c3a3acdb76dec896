"""benchmarks/gpu_report.py: every part runs (at smoke sizes, on the CPU), resumes, and renders its table.

The GPU figures themselves are taken only on a GPU; here the script's machinery is kept working:
the parts' code at tiny sizes, a part in its own process and cut off by its timeout, the records
and their resumption, the table and the docs' GPU tables, the targets, the utilisation arithmetic
and the wheel list.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    if "gpu_report" not in sys.modules:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        spec = importlib.util.spec_from_file_location("gpu_report", ROOT / "benchmarks" / "gpu_report.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_report"] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_report"]


g = _load()


def test_smoke_runs_every_part_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    res = tmp_path / "rep"
    rc = g.main(["--device", "cpu", "--smoke", "--in-process", "--results", str(res)])
    out = capsys.readouterr().out
    assert rc == 0, out
    records = g.read_records(res / "results.jsonl")
    assert [r["part"] for r in records] == list(g.PARTS)
    assert all(r["status"] == "done" and r["result"] for r in records), [r["log_tail"] for r in records]
    by = {r["part"]: r["result"] for r in records}
    # what each part checks came out as it must, on the sizes it ran at
    assert by["kruskal"]["equal_float64"] == by["kruskal"]["check_draws"] == by["kruskal"]["equal_cpu"]
    assert by["kruskal"]["record_equal_cpu"] is True and by["kruskal"]["k"] == g.SIZES[True]["k"]
    assert by["sweep"]["fractions_equal_cpu"] is True and by["sweep"]["d"] == g.SIZES[True]["d"]
    assert by["capture"]["diff_trunc"] == 0.0 and by["capture"]["batch"] == g.SIZES[True]["batch"]
    assert by["check-small"]["same_verdicts"] is True and by["check-small"]["T"] == g.SIZES[True]["small_limit"]
    assert by["check-paper"]["ours_verdicts"] == by["check-paper-naive"]["naive_verdicts"]
    cv = by["check-vit-base"]
    assert cv["returncode"] == 0 and cv["peak_rss_gb"] > 0.1 and cv["peak_gpu_gb"] is None  # no CUDA in that process
    assert "gpu_busy_s" not in cv and set(cv["verdicts"]) >= {"random/assumption_1", "embedding/assumption_2"}
    assert by["memorize"]["points"] == 2 and by["memorize"]["seconds"] > 0
    assert by["tests"]["returncode"] == 0 and by["tests"]["skipped"] == 1 and by["tests"]["failed"] == 0
    report = (res / "report.md").read_text()
    assert "smoke sizes, not figures" in report and "torch " in report and "commit " in report
    assert "unmeasured" not in report.split("| target |")[0]  # every row measured (at smoke sizes)
    # run again: every part is done for this commit and device, nothing runs
    rc = g.main(["--device", "cpu", "--smoke", "--in-process", "--results", str(res)])
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
    spec = importlib.util.spec_from_file_location("mhaaudit_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_targets_pass_and_miss():
    fine = {
        "check-vit-base": _record("check-vit-base", {"wall_s": 8.0, "gpu_busy_fraction": 0.8}),
        "kruskal": _record("kruskal", {"ours_s": 0.04}),
        "sweep": _record("sweep", {"ours_s": 1.5}),
        "memorize": _record("memorize", {"seconds": 700.0}),
    }
    got = {t.split()[0]: st for t, _, st in g.targets(fine, "NVIDIA H100 80GB HBM3")}
    assert got == {"`check": "PASS", "k": "PASS", "sweep": "MISS", "Figure": "MISS"}
    idle = dict(fine, **{"check-vit-base": _record("check-vit-base", {"wall_s": 8.0, "gpu_busy_fraction": 0.3})})
    assert g.targets(idle, "NVIDIA H100 80GB HBM3")[0][2] == "MISS"  # fast, but the GPU mostly idle
    assert g.targets(fine, "NVIDIA A100-SXM4-40GB")[0][2] == "not an H100"
    cut = {"memorize": _record("memorize", None, status="timeout")}
    assert g.targets(cut, None)[3][1].startswith("unfinished") and g.targets(cut, None)[3][2] == "unmeasured"


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
