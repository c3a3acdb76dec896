"""The bad-input catalogue: every user mistake of issue 14 (and the kinds found before it), run
through the CLI. Each is refused with exactly one line on stderr and exit status 2 (or, for the
check on a model whose every column is unavailable, the same), before any work starts, with no
file left behind: no output, no temporary file.

Each case names the arguments (``{npy}`` and the like stand for the inputs made below; ``{out}``
for the test's own empty output folder) and a piece of the one error line. Cases refused before
the work also run with the data pass and the Monte-Carlo sampler replaced by a trap.
"""

from __future__ import annotations

import json
import os
import stat
import sys

import numpy as np
import pytest
import torch
from conftest import FIXTURES
from safetensors.torch import save_file

from clitools import assert_one_error, run
from mhaaudit.features import reduce_tokens
from mhaaudit.io import stamp, write_parquet

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, vit_dir, bert_dir, image_dir):
    """The input files the cases read (never written to by them)."""
    d = tmp_path_factory.mktemp("inputs")
    X = np.random.default_rng(0).standard_normal((40, 8))
    np.save(d / "m.npy", X)
    torch.save({"queries": torch.from_numpy(X), "a3": torch.from_numpy(X[::-1].copy())}, d / "two.pt")
    save_file({"queries": torch.from_numpy(X), "other": torch.zeros(3)}, str(d / "two.safetensors"))
    write_parquet([{"check": "assumption_1", "k": 3, "T": 40, "d": 8, "fraction": 1.0, "witness": [1, 2]}],
                  d / "results.parquet", stamp(command="kruskal"))
    fs = reduce_tokens(torch.randn(40, 5, 8, generator=torch.Generator().manual_seed(1)), 0,
                       meta={"model": "m", "variant": "random", "layer": 1})
    fs.save(d / "feat")
    paths = {"npy": d / "m.npy", "pt2": d / "two.pt", "st2": d / "two.safetensors", "results": d / "results.parquet",
             "feat": d / "feat", "vit": vit_dir, "bert": bert_dir, "images": image_dir,
             "v0": FIXTURES / "results" / "check-v0.parquet"}
    return {k: str(v) for k, v in paths.items()}


JSON = ["--format", "json"]  # put before a case's own options, which win when they repeat one

# (case id, arguments, a piece of the error line). Every case exits 2 with that one line.
CASES = [
    # --- item 2: what can be known before loading data or running a model is checked first
    ("weights-missing", "check vit-base --weights /nonexistent/weights", "does not exist"),
    ("limit-below-n-vit", "check vit-base --limit 100", "raise --limit to at least 197"),
    ("limit-below-n-bert", "check bert-large --limit 100", "lower --context-length"),
    ("limit-below-n-folder", "check {bert} --context-length 32 --limit 10", "at least 32"),
    ("from-other-limit", "capacity {vit} --from {v0} --limit 30", "--limit 40 examples, this run --limit 30"),
    # --- item 3: no option silently ignored
    ("kruskal-file-and-capture", "kruskal {npy} --model gpt2 --limit 5", "--model, --limit have no effect"),
    ("kruskal-file-and-variants", "kruskal {npy} --variants trained", "--variants has no effect"),
    ("kruskal-file-and-keep-duplicates", "kruskal {npy} --keep-duplicates", "--keep-duplicates has no effect"),
    ("kruskal-vectors-on-matrix", "kruskal {npy} --vectors a3", "--vectors has no effect on a single matrix"),
    ("kruskal-key-on-npy", "kruskal {npy} --key queries", "--key has no effect"),
    ("kruskal-key-without-file", "kruskal --key queries", "--key has no effect without FEATURES"),
    ("kruskal-key-on-folder", "kruskal {feat} --key a3", "--key has no effect on a saved feature folder"),
    ("kruskal-query-index-on-folder", "kruskal {feat} --query-index 0", "--query-index has no effect"),
    ("kruskal-n-against-folder", "kruskal {feat} --n 7", "captured with n = 5"),
    ("kruskal-n-on-image-model", "kruskal --model {vit} --n 7 --limit 20", "text models only"),
    ("kruskal-split-without-data", "kruskal --model {vit} --split test", "--split has no effect without --data"),
    ("kruskal-variant-and-variants", "kruskal --model {vit} --variant random --variants random", "give --variants only"),
    ("kruskal-several-variants", "kruskal --model {vit} --variants random,trained", "one column at a time"),
    ("kruskal-weights-random", "kruskal --model {vit} --variants random --weights {vit}", "--variants trained"),
    ("pt-several-tensors", "kruskal {pt2}", "several tensors (a3, queries); choose one with --key"),
    ("safetensors-several-tensors", "kruskal {st2}", "choose one with --key"),
    ("results-file-as-features", "kruskal {results}", "results file written by 'mhaaudit kruskal'"),
    ("check-layer-and-layers", "check {vit} --layer 2 --layers 0-3", "--layer has no effect with --layers"),
    ("check-layer-on-text", "check {bert} --layer 2", "--layer has no effect on a text model"),
    ("check-layer-on-embedding", "check {vit} --variants embedding --layer 2", "--layer has no effect on the columns"),
    ("check-weights-no-trained", "check {vit} --variants random --weights {vit}", "--weights has no effect"),
    ("check-split-without-data", "check {vit} --split validation", "--split has no effect without --data"),
    ("check-split-on-folder-file", "check {vit} --data {npy} --split test", "--split has no effect on a local file"),
    ("capacity-weights-no-trained", "capacity {vit} --variants random --weights {vit}", "--weights has no effect"),
    ("capacity-from-and-samples", "capacity {vit} --from {v0} --limit 40 --samples 100", "--samples has no effect"),
    ("capacity-from-and-threshold", "capacity {vit} --from {v0} --limit 40 --threshold 0.9", "--threshold has no effect"),
    ("capacity-split-without-data", "capacity {vit} --split test", "--split has no effect"),
    ("capacity-layer-and-block", "capacity {vit} --layer 2 --block 2", "give --block only"),
    ("memorize-classes-regression", "memorize --sizes 16 --task regression --classes 5", "--classes has no effect"),
    ("memorize-tolerance-classification", "memorize --sizes 16 --tolerance 0.1", "--tolerance has no effect"),
    ("memorize-vary-and-heads", "memorize --sizes 16 --vary n --heads 1,2", "only one parameter varies"),
    ("memorize-two-varied", "memorize --sizes 16 --heads 1,2 --n 4,8", "only one parameter varies"),
    ("memorize-seed-and-seeds", "memorize --sizes 16 --seed 3 --seeds 0-2", "--seed has no effect with --seeds"),
    ("memorize-values-and-heads", "memorize --sizes 16 --vary heads --values 1,2 --heads 3", "only one parameter varies"),
    # --- item 4: nothing to audit is not success
    ("nothing-to-audit", "check vit-base --variants trained --limit 200", "no column could be audited"),
    # --- item 5: outputs refused before the work, as in every command
    ("check-out-proc", "check {vit} --out /proc/x.parquet", "cannot write /proc/x.parquet"),
    ("check-plot-proc", "check {vit} --plot /proc/x.png", "cannot write /proc/x.png"),
    ("check-features-proc", "check {vit} --save-features /proc/feats", "--save-features /proc/feats"),
    ("kruskal-out-proc", "kruskal {npy} --out /proc/x.parquet", "cannot write /proc/x.parquet"),
    ("kruskal-plot-proc", "kruskal {npy} --plot /proc/x.png", "cannot write /proc/x.png"),
    ("capacity-out-proc", "capacity {vit} --out /proc/x.parquet", "cannot write /proc/x.parquet"),
    ("capacity-plot-proc", "capacity {vit} --plot /proc/x.png", "cannot write /proc/x.png"),
    ("memorize-out-proc", "memorize --sizes 16 --out /proc/x.parquet", "cannot write /proc/x.parquet"),
    ("memorize-plot-proc", "memorize --sizes 16 --plot /proc/x.png", "cannot write /proc/x.png"),
    ("memorize-out-csv", "memorize --sizes 16 --out {out}/x.csv", "use a .parquet file name"),
    ("memorize-plot-gif", "memorize --sizes 16 --plot {out}/x.gif", "use a .png, .pdf or .svg file name"),
    ("kruskal-out-csv", "kruskal {npy} --out {out}/x.csv", "use a .parquet file name"),
    ("check-plot-gif", "check {vit} --plot {out}/x.gif", "use a .png, .pdf or .svg file name"),
    ("out-is-a-folder", "kruskal {npy} --out {out}/folder.parquet", "it is a directory"),
    ("out-in-missing-folder", "capacity {vit} --out {out}/no/x.parquet", "does not exist"),
    # --- item 7: choices are choices; a renamed option and its new name together
    ("memorize-preset", "memorize --preset paper-fig9", "--preset"),
    ("memorize-task", "memorize --sizes 16 --task sorting", "--task"),
    ("memorize-context", "memorize --sizes 16 --context global", "--context"),
    ("memorize-vary", "memorize --sizes 16 --vary depth --values 1,2", "--vary"),
    # --- the kinds found before: values, files, models (more of each in tests/test_cli_*.py)
    ("kruskal-k-zero", "kruskal {npy} --k 0", "at least 1"),
    ("kruskal-k-above-T", "kruskal {npy} --k 41", "larger than the number of vectors"),
    ("kruskal-missing-file", "kruskal {out}/missing.npy", "no such file"),
    ("kruskal-unknown-type", "kruskal {out}", "features.safetensors"),
    ("samples-zero", "kruskal {npy} --samples 0", "--samples"),
    ("threshold-above-one", "check {vit} --threshold 1.5", "--threshold"),
    ("rtol-negative", "kruskal {npy} --rtol -1", "--rtol"),
    ("format-unknown", "kruskal {npy} --format xml", "--format"),
    ("unknown-option", "check {vit} --no-such-option", "no-such-option"),
    ("unknown-model", "check no-such-model-xyz", "vit-base"),
    ("unknown-variant", "check {vit} --variants bogus", "bogus"),
    ("capacity-heads", "capacity {vit} --heads 9", "at most 2"),
    ("check-batch-size-word", "check {vit} --batch-size many", "--batch-size takes a positive integer or auto"),
    ("capacity-batch-size-zero", "capacity {vit} --batch-size 0", "--batch-size takes a positive integer or auto"),
    ("check-revision-on-folder", "check {vit} --revision main", "is a local folder"),
    ("capacity-revision-on-folder", "capacity {vit} --revision v1", "is a local folder"),
    ("kruskal-revision-on-folder", "kruskal --model {vit} --revision v1", "is a local folder"),
    ("kruskal-remote-code-on-file", "kruskal {npy} --trust-remote-code", "--trust-remote-code has no effect"),
    ("memorize-empty-grid", "memorize", "the grid is empty"),
    ("memorize-values-without-vary", "memorize --sizes 16 --values 1,2", "--values needs --vary"),
]

# Refused before any work: the data pass and the sampler are traps for these.
AFTER_THE_START = {"nothing-to-audit"}  # known only once the model has been looked for


@pytest.fixture()
def traps(monkeypatch):
    """Fail the test if an example reaches a model or a Monte-Carlo draw is made."""
    import mhaaudit.auditing  # noqa: F401 - imported before the traps are set, so that no module binds one for good
    import mhaaudit.capacity  # noqa: F401
    from mhaaudit import kruskal, pipeline

    def trap(*a, **k):
        raise AssertionError("the work started before the input was refused")

    monkeypatch.setattr(pipeline, "stream", trap)
    for name in ("subset_test", "kruskal_sweep", "set_stats"):
        monkeypatch.setattr(kruskal, name, trap)


@pytest.mark.parametrize("case, args, match", CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_line(request, capsys, inputs, tmp_path, case, args, match):
    if case.endswith("-proc") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    if case not in AFTER_THE_START:
        request.getfixturevalue("traps")
    out = tmp_path / "out"
    (out / "folder.parquet").mkdir(parents=True)
    command, *rest = args.format(out=out, **inputs).split()
    rc, stdout, err = run(capsys, command, *JSON, *rest)
    assert_one_error(rc, err, match)
    assert stdout == ""
    assert sorted(os.listdir(out)) == ["folder.parquet"] and os.listdir(out / "folder.parquet") == [], \
        "a file was left behind"


def test_every_case_has_its_own_id():
    assert len({c[0] for c in CASES}) == len(CASES)


# --------------------------------------------------------------------------- what is written


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    yield 0o644
    os.umask(old)


def test_outputs_have_ordinary_permissions(capsys, inputs, tmp_path, umask_022):
    """--out, --plot and --save-features files: 0666 less the umask, like any program's files."""
    rc, _, err = run(capsys, "kruskal", inputs["npy"], "--sweep", "--samples", "50", "--out", tmp_path / "k.parquet",
                     "--plot", tmp_path / "k.png", "--format", "json")
    assert rc == 0, err
    rc, _, err = run(capsys, "check", inputs["vit"], "--data", inputs["images"], "--limit", "40", "--samples", "50",
                     "--variants", "random", "--out", tmp_path / "c.parquet", "--save-features", tmp_path / "feat",
                     "--format", "json")
    assert rc == 0, err
    files = [tmp_path / "k.parquet", tmp_path / "k.png", tmp_path / "c.parquet",
             tmp_path / "feat" / "random" / "features.safetensors", tmp_path / "feat" / "random" / "meta.json"]
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in files} == \
           {str(p.relative_to(tmp_path)): oct(umask_022) for p in files}
    assert oct(_mode(tmp_path / "feat")) == oct(0o755) and oct(_mode(tmp_path / "feat" / "random")) == oct(0o755)


def test_memorize_outputs_have_ordinary_permissions(capsys, tmp_path, umask_022):
    rc, _, err = run(capsys, "memorize", "--heads", "1,2", "--n", "4", "--head-dim", "8", "--sizes", "16",
                     "--max-steps", "3", "--device", "cpu", "--out", tmp_path / "m.parquet", "--plot", tmp_path / "m.png",
                     "--format", "json")
    assert rc == 0, err
    assert oct(_mode(tmp_path / "m.parquet")) == oct(umask_022) and oct(_mode(tmp_path / "m.png")) == oct(umask_022)


def test_results_written_by_mhaaudit_are_not_features_whatever_their_columns(capsys, inputs, tmp_path):
    """Recognised by the 'mhaaudit' schema metadata, not by column types: an all-numeric results file too."""
    rc, _, err = run(capsys, "kruskal", inputs["npy"], "--k", "3", "--samples", "50", "--out", tmp_path / "r.parquet",
                     "--format", "json")
    assert rc == 0, err
    rc, out, err = run(capsys, "kruskal", tmp_path / "r.parquet", *JSON)
    assert_one_error(rc, err, "results file written by 'mhaaudit kruskal' (its parquet metadata says so)")
    meta = json.loads(__import__("pyarrow.parquet").parquet.read_schema(tmp_path / "r.parquet").metadata[b"mhaaudit"])
    assert meta["command"] == "kruskal" and sys.version  # the file stays as it was
