"""The bad-input catalogue: every user mistake of issue 14 (and the kinds found before it), run
through the CLI. Each is refused with exactly one line on stderr and exit status 2 (or, for the
check on a model whose every column is unavailable, the same), before any work starts, with no
file left behind: no output, no temporary file.

Each case names the arguments (``{npy}`` and the like stand for the inputs made below; ``{out}``
for the test's own empty output folder) and a piece of the one error line. Cases refused before
the work also run with the data pass and the Monte-Carlo sampler replaced by a trap.

Two more tables follow, one case a row: ``FULL_DISK`` (an output meets a full disk: no output of
the run is left and no earlier file is replaced) and ``ENDINGS`` (every other way a run ends: a
full stdout, a closed pipe, SIGTERM, SIGHUP, a full tmpfs), each with its exit status and one line.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import shutil
import stat
import sys

import numpy as np
import pytest
import torch
from clitools import assert_one_error, run
from conftest import FIXTURES
from safetensors.torch import load_file, save_file

from mhaaudit.features import reduce_tokens
from mhaaudit.files import size_words
from mhaaudit.io import MappedArray, read_array, stamp, write_parquet

pytest.importorskip("transformers")


class _Planted:
    """Unpickling this creates the file ``marker``: a stand-in for code hidden in a pickle."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, vit_dir, bert_dir, image_dir, timm_dir, vit_dir_wide):
    """The input files the cases read (never written to by them)."""
    d = tmp_path_factory.mktemp("inputs")
    X = np.random.default_rng(0).standard_normal((40, 8))
    np.save(d / "m.npy", X)
    torch.save({"queries": torch.from_numpy(X), "a3": torch.from_numpy(X[::-1].copy())}, d / "two.pt")
    save_file({"queries": torch.from_numpy(X), "other": torch.zeros(3)}, str(d / "two.safetensors"))
    write_parquet(
        [{"check": "assumption_1", "k": 3, "T": 40, "d": 8, "fraction": 1.0, "witness": [1, 2]}],
        d / "results.parquet",
        stamp(command="kruskal"),
    )
    fs = reduce_tokens(
        torch.randn(40, 5, 8, generator=torch.Generator().manual_seed(1)),
        0,
        meta={"model": "m", "variant": "random", "layer": 1},
    )
    fs.save(d / "feat")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({f"c{i}": X[:, i] for i in range(X.shape[1])}), d / "f.parquet")  # features as parquet
    (d / "f-link.parquet").symlink_to(d / "f.parquet")
    # Planted: dangling links where outputs go, a link where a column's features go, an input inside a column folder.
    (d / "dangling.parquet").symlink_to(d / "nowhere.parquet")
    (d / "dangling.png").symlink_to(d / "nowhere.png")
    (d / "dangling-folder").symlink_to(d / "nowhere")
    (d / "outside").mkdir()
    (d / "planted").mkdir()
    (d / "planted" / "random").symlink_to(d / "outside")
    (d / "holder" / "random").mkdir(parents=True)
    # Pickles that would run code if unpickled (they create the file "marker"): never unpickled.
    marker = d / "marker"
    np.save(d / "pickled.npy", np.array([_Planted(str(marker)), 1], dtype=object), allow_pickle=True)
    torch.save({"queries": torch.from_numpy(X), "planted": _Planted(str(marker))}, d / "pickled.pt")
    # .pt dicts whose entries are not tensors: a dict of dicts, a number beside a tensor
    torch.save({"layer": {"queries": torch.from_numpy(X)}}, d / "nested.pt")
    torch.save({"count": 1, "queries": torch.from_numpy(X)}, d / "mixed.pt")
    # 1.5 kB declaring 10^12 x 8 float64 values: one row, expanded (a stride of 0), that every pass would read
    torch.save(torch.from_numpy(X[:1]).expand(10**12, 8), d / "expanded.pt")
    paths = {
        "npy": d / "m.npy",
        "pt2": d / "two.pt",
        "st2": d / "two.safetensors",
        "results": d / "results.parquet",
        "feat": d / "feat",
        "vit": vit_dir,
        "bert": bert_dir,
        "images": image_dir,
        "v0": FIXTURES / "results" / "check-v0.parquet",
        "fpq": d / "f.parquet",
        "fpq_link": d / "f-link.parquet",
        "dangling_pq": d / "dangling.parquet",
        "dangling_png": d / "dangling.png",
        "dangling_folder": d / "dangling-folder",
        "planted": d / "planted",
        "holder": d / "holder",
        "inside_column": d / "holder" / "random",
        "pickled_npy": d / "pickled.npy",
        "pickled_pt": d / "pickled.pt",
        "nested_pt": d / "nested.pt",
        "mixed_pt": d / "mixed.pt",
        "expanded_pt": d / "expanded.pt",
        "marker": marker,
    }
    paths.update(_malformed_files(d, X, vit_dir, bert_dir, timm_dir))
    # weights of another width, in a file of each form
    paths["wide_st"], paths["wide_bin"] = d / "wide.safetensors", d / "wide.bin"
    shutil.copy(vit_dir_wide / "model.safetensors", paths["wide_st"])
    torch.save(load_file(str(vit_dir_wide / "model.safetensors")), paths["wide_bin"])
    # the vit's weights with a header that says F64 for the F32 data of one tensor
    raw = (vit_dir / "model.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header["embeddings.cls_token"]["dtype"] = "F64"
    relabelled = json.dumps(header).encode()
    paths["relabelled_st"] = d / "relabelled.safetensors"
    paths["relabelled_st"].write_bytes(len(relabelled).to_bytes(8, "little") + relabelled + raw[8 + size :])
    # a timm model's weights of another width (48, the folder's config says 32)
    import timm

    config = json.loads((timm_dir / "config.json").read_text())
    wide_timm = timm.create_model(config["architecture"], num_classes=0, **{**config["model_args"], "embed_dim": 48})
    paths["timm"], paths["timm_wide_st"] = timm_dir, d / "timm-wide.safetensors"
    save_file({k: v.contiguous() for k, v in wide_timm.state_dict().items()}, str(paths["timm_wide_st"]))
    return {k: str(v) for k, v in paths.items()}


class _RunsCode:
    """Unpickling this would run a shell command (leaving ``marker``): a .pt file holding it is refused unread."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def _malformed_files(d, X, vit_dir, bert_dir, timm_dir) -> dict:
    """Files and model folders every reader must refuse in one line (see the reader cases below)."""
    out = {}
    (d / "magic.npy").write_bytes(b"PK\x03\x04 not numpy" + bytes(64))
    (d / "empty.pt").write_bytes(b"")
    header = repr({"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)}).encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    (d / "bomb.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(64))
    (d / "code.pt").write_bytes(pickle.dumps(_RunsCode(d / "UNPICKLED")))
    (d / "huge.safetensors").write_bytes((2**62).to_bytes(8, "little") + b"{}")
    f4 = json.dumps({"queries": {"dtype": "F4", "shape": [40, 8], "data_offsets": [0, 160]}}).encode()
    (d / "float4.safetensors").write_bytes(len(f4).to_bytes(8, "little") + f4 + bytes(range(160)))
    (d / "latin1.csv").write_bytes("caf\u00e9,text\n".encode("latin-1") + b"1,one two three four\n" * 50)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mhaaudit.memorize.recipe import Recipe
    from mhaaudit.memorize.results import MemorizeRun
    from mhaaudit.memorize.resume import run_to_row

    counts = dict(memorized_count=0, epochs_run=1, steps_run=1, planned_steps=1, seed=0)
    run_ = MemorizeRun(
        1, 4, 8, 16, Recipe(), memorized=0.0, final_loss=1.0, seconds=0.0, stopped_early=False, device="cpu", **counts
    )
    deep = pa.Table.from_pylist([run_to_row(run_)])  # a row as memorize writes it: the metadata is what is wrong
    deep = deep.replace_schema_metadata({b"mhaaudit": b"[" * 100_000 + b"]" * 100_000})
    pq.write_table(deep, d / "deep-meta.parquet")  # the resume file of memorize --out, its metadata 100000 deep
    Xn = X.copy()
    Xn[3, 2] = np.inf
    np.save(d / "inf.npy", Xn)
    out.update(
        bomb=d / "bomb.npy",
        magic=d / "magic.npy",
        emptypt=d / "empty.pt",
        codept=d / "code.pt",
        hugest=d / "huge.safetensors",
        float4=d / "float4.safetensors",
        latin1csv=d / "latin1.csv",
        deepmeta=d / "deep-meta.parquet",
        infnpy=d / "inf.npy",
    )
    for name, change in (
        ("featneg", {"n": -3}),
        ("feathuge", {"n": 10**30}),
        ("featqi", {"query_index": 9}),
        ("featnoq", "drop"),
        ("featlist", [1, 2]),
        ("featT", {"T": 7}),
    ):
        shutil.copytree(d / "feat", d / name)
        meta = json.loads((d / "feat" / "meta.json").read_text())
        if change == "drop":
            del meta["query_index"]
        else:
            meta = {**meta, **change} if isinstance(change, dict) else change
        (d / name / "meta.json").write_text(json.dumps(meta))
        out[name] = d / name

    def model(name, src=vit_dir, **config):
        shutil.copytree(src, d / name)
        cfg = json.loads((d / name / "config.json").read_text())
        (d / name / "config.json").write_text(json.dumps({**cfg, **config}))
        out[name] = d / name
        return d / name

    model("vitpatch0", patch_size=0)
    timm_args = json.loads((timm_dir / "config.json").read_text())["model_args"]
    model("timmheads0", src=timm_dir, model_args={**timm_args, "num_heads": 0})
    model("timmargs", src=timm_dir, model_args=[1, 2])
    model("vitheads7", num_attention_heads=7)
    model("vitwide", hidden_size=10**12)
    (model("vithdr") / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + b"{}")
    os.replace(model("vitbin") / "model.safetensors", d / "vitbin" / "pytorch_model.bin")
    (d / "vitbin" / "pytorch_model.bin").write_bytes(b"\x80\x02garbage" * 50)
    from safetensors.torch import load_file

    weights = load_file(str(model("vitnan") / "model.safetensors"))
    weights["embeddings.cls_token"][..., 0] = float("nan")
    save_file(weights, str(d / "vitnan" / "model.safetensors"), metadata={"format": "pt"})
    for name, shard in (("vitdotdot", "../outside/x.safetensors"), ("vitabs", "/etc/passwd")):
        index = {"metadata": {"total_size": 1}, "weight_map": {k: shard for k in weights}}
        (model(name) / "model.safetensors.index.json").write_text(json.dumps(index))
    model("bertcode", src=bert_dir, auto_map={"AutoConfig": "configuration_x.XConfig"})
    (d / "bertcode" / "configuration_x.py").write_text("raise SystemExit('imported')\n")
    return out


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
    (
        "kruskal-variant-and-variants",
        "kruskal --model {vit} --variant random --variants random",
        "give --variants only",
    ),
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
    (
        "capacity-from-and-threshold",
        "capacity {vit} --from {v0} --limit 40 --threshold 0.9",
        "--threshold has no effect",
    ),
    ("capacity-split-without-data", "capacity {vit} --split test", "--split has no effect"),
    ("capacity-layer-and-block", "capacity {vit} --layer 2 --block 2", "give --block only"),
    ("memorize-classes-regression", "memorize --sizes 16 --task regression --classes 5", "--classes has no effect"),
    ("memorize-tolerance-classification", "memorize --sizes 16 --tolerance 0.1", "--tolerance has no effect"),
    ("memorize-vary-and-heads", "memorize --sizes 16 --vary n --heads 1,2", "only one parameter varies"),
    ("memorize-values-blank", "memorize --sizes 16 --vary heads --values ' '", "--values ' ' names no values"),
    ("memorize-values-comma", "memorize --sizes 16 --vary n --values ,", "--values ',' names no values"),
    ("reproduce-figure2-values-empty", "reproduce figure2 --values ''", "--values '' names no values"),
    ("memorize-two-varied", "memorize --sizes 16 --heads 1,2 --n 4,8", "only one parameter varies"),
    ("memorize-seed-and-seeds", "memorize --sizes 16 --seed 3 --seeds 0-2", "--seed has no effect with --seeds"),
    (
        "memorize-values-and-heads",
        "memorize --sizes 16 --vary heads --values 1,2 --heads 3",
        "only one parameter varies",
    ),
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
    # a name that ends in / names a folder, which the parsed path would lose (x.png/ writing x.png)
    ("out-ends-in-slash", "kruskal {npy} --out {out}/x.parquet/", "x.parquet/ ends in /, which names a folder"),
    ("plot-ends-in-slash", "check {vit} --plot {out}/x.png/", "x.png/ ends in /, which names a folder"),
    ("capacity-plot-ends-in-slash", "capacity {vit} --plot {out}/c.png/", "c.png/ ends in /"),
    ("memorize-out-ends-in-slash", "memorize --sizes 16 --out {out}/m.parquet/", "m.parquet/ ends in /"),
    # so does one whose last part is . or .., which the parsed path would drop alike (x.png/. writing x.png)
    ("plot-ends-in-dot", "check {vit} --plot {out}/x.png/.", "x.png/. ends in ., which names a folder"),
    ("out-ends-in-dot-dot", "kruskal {npy} --out {out}/x.parquet/..", "x.parquet/.. ends in .., which names a folder"),
    ("out-empty", "kruskal {npy} --out ''", "an empty name names no file"),
    ("plot-empty", "memorize --sizes 16 --plot ''", "an empty name names no file"),
    # an empty name is no folder either: Path('') is the current folder, which would be written (or read)
    ("save-features-empty", "check {vit} --save-features ''", "an empty name names no file or folder"),
    ("capacity-from-empty", "capacity {vit} --from ''", "an empty name names no file or folder"),
    ("check-weights-empty", "check {vit} --weights ''", "--weights is empty: name a folder or file"),
    ("capacity-weights-empty", "capacity {vit} --weights ''", "--weights is empty: name a folder or file"),
    # a list option given names something: --variants '' is not the default columns, nor --fail-on ',' no check
    ("check-variants-empty", "check {vit} --variants ''", "--variants '' names no columns"),
    ("check-variants-commas", "check {vit} --variants , --variants ' '", "--variants ',', ' ' names no columns"),
    ("capacity-variants-empty", "capacity {vit} --variants ''", "--variants '' names no columns"),
    ("check-fail-on-empty", "check {vit} --fail-on ','", "--fail-on ',' names no check"),
    # an empty input name is no name, not the current folder (which Path("") would read)
    ("kruskal-features-empty", "kruskal ''", "an empty name names no file or folder"),
    # an input name that ends in / names a folder, which the parsed path would lose (a.npy/ reading a.npy)
    ("kruskal-features-ends-in-slash", "kruskal {npy}/", "m.npy/ names a folder, but"),
    ("kruskal-features-ends-in-dot", "kruskal {npy}/.", "m.npy/. names a folder, but"),
    ("capacity-from-ends-in-slash", "capacity {vit} --from {npy}/", "m.npy/ names a folder, but"),
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
    ("memorize-resume-metadata-deep", "memorize --sizes 16 --device cpu --out {deepmeta}", "nested too deeply to be"),
    # --- files and folders that are not what they claim: every reader refuses them in one line
    ("npy-wrong-magic", "kruskal {magic}", "not a .npy file"),
    ("npy-inf", "kruskal {infnpy}", "NaN or Inf"),
    ("npy-shape-past-the-file", "kruskal {bomb}", "claims shape (1000000, 1000000) of float64 (8000000000000 bytes)"),
    ("pt-empty", "kruskal {emptypt}", "empty or truncated"),
    ("pt-pickle-runs-code", "kruskal {codept}", "a pickle that would run code, which is never loaded"),
    ("safetensors-huge-header", "kruskal {hugest}", "its header claims 4611686018427387904 bytes"),
    ("safetensors-float4", "kruskal {float4}", "features of dtype float4_e2m1fn_x2 are not supported"),
    ("csv-header-not-utf8", "check {bert} --data {latin1csv} --context-length 16", "a column name in its header is"),
    ("meta-n-negative", "kruskal {featneg}", "meta.json gives n = -3"),
    # refused as it is read, not by the check of T against n, which --k skips
    ("meta-n-huge", "kruskal {feathuge} --k 2", "gives n = " + str(10**30) + ", more than 9223372036854775807"),
    ("meta-query-index-outside", "kruskal {featqi}", "query_index = 9, outside the n = 5 tokens"),
    ("meta-no-query-index", "kruskal {featnoq}", "query_index = None"),
    ("meta-not-an-object", "kruskal {featlist}", "meta.json holds list, not a JSON object"),
    ("meta-T-disagrees", "kruskal {featT}", "T = 7, the tensors hold 40 examples"),
    ("config-patch-zero", "check {vitpatch0}", "patch_size is 0"),
    ("config-heads-not-dividing", "check {vitheads7}", "7 attention heads do not divide the width 32"),
    ("config-huge-width", "check {vitwide}", "hidden_size is 1000000000000"),
    ("timm-config-heads-zero", "check {timmheads0}", "num_heads is 0"),
    ("timm-config-args-not-an-object", "check {timmargs}", 'needs an "architecture" name and a "model_args" object'),
    ("weights-huge-header", "check {vithdr} --variants trained", "its header claims"),
    ("weights-corrupt-bin", "check {vitbin} --variants trained", "not a torch file of plain tensors"),
    # a weights file of another width: refused before the first column (the random ones) is audited
    ("weights-file-wider", "check {vit} --weights {wide_st}", "embeddings.cls_token has shape (1, 1, 48)"),
    ("weights-bin-wider", "check {vit} --weights {wide_bin}", "embeddings.cls_token has shape (1, 1, 48)"),
    ("capacity-weights-wider", "capacity {vit} --weights {wide_st}", "embeddings.cls_token has shape (1, 1, 48)"),
    ("timm-weights-wider", "check {timm} --weights {timm_wide_st}", "blocks.0.attn.proj.bias has shape (48,)"),
    ("weights-header-relabelled", "check {vit} --weights {relabelled_st}", "takes 256 bytes; its data offsets span"),
    ("weights-nan", "check {vitnan} --variants trained", "hold NaN values (e.g. embeddings.cls_token)"),
    ("index-shard-dotdot", "check {vitdotdot} --variants trained", "'../outside/x.safetensors' is not a file name"),
    ("index-shard-absolute", "check {vitabs} --variants trained", "'/etc/passwd' is not a file name"),
    ("remote-code-without-flag", "check {bertcode}", "pass --trust-remote-code"),
    # --- a series of checkpoints: refused before any work
    ("series-glob-matches-nothing", "check {vit} --checkpoints '{out}/ckpt-*'", "the glob matches no file or folder"),
    ("series-checkpoint-missing", "check {vit} --checkpoints {vit},{out}/missing", "missing: no such file or folder"),
    ("series-one-file-twice", "check {vit} --checkpoints {vit},{vit}/.", "name the same file"),
    ("series-another-family", "check {vit} --checkpoints {vit},{bert}", "is of another"),
    ("series-beside-weights", "check {vit} --checkpoints {vit} --weights {vit}", "--weights has no effect"),
    ("series-revisions-of-a-folder", "check {vit} --revision a,b", "is a local folder"),
    ("memorize-values-without-vary", "memorize --sizes 16 --values 1,2", "--values needs --vary"),
    # --- what is read is never executed: pickles are refused unread (np.load(allow_pickle=False),
    #     torch.load(weights_only=True)); the run asserts that the pickle's marker file never appears
    ("npy-pickle-not-unpickled", "kruskal {pickled_npy}", "pickled.npy"),
    ("pt-pickle-not-unpickled", "kruskal {pickled_pt} --key queries", "pickled.pt"),
    ("pt-dict-of-dicts", "kruskal {nested_pt}", "nested.pt holds no tensors"),
    ("pt-expanded-past-memory", "kruskal {expanded_pt}", "shape (1000000000000, 8) stores 64 bytes, repeated"),
    ("pt-key-names-a-number", "kruskal {mixed_pt} --key count", "the entry 'count' is not a tensor (its type: int)"),
    # --- writes go exactly where the user said: never over an input, never through a planted link
    ("out-is-the-input", "kruskal {fpq} --out {fpq}", "--out {fpq} is an input of this run"),
    ("out-is-the-input-through-a-link", "kruskal {fpq} --out {fpq_link}", "is an input of this run"),
    ("out-is-capacity-from", "capacity {vit} --from {v0} --limit 40 --out {v0}", "is an input of this run"),
    ("save-features-is-the-model", "check {vit} --save-features {vit}", "is an input of this run"),
    (
        "save-features-over-an-input",
        "check {vit} --data {inside_column} --save-features {holder}",
        "lies where the features would be written",
    ),
    ("save-features-planted-link", "check {vit} --save-features {planted}", "random is a symbolic link"),
    ("save-features-dangling-link", "check {vit} --save-features {dangling_folder}", "which does not exist"),
    ("out-dangling-link", "kruskal {npy} --out {dangling_pq}", "symbolic link to"),
    ("plot-dangling-link", "kruskal {npy} --plot {dangling_png}", "symbolic link to"),
    ("check-out-dangling-link", "check {vit} --out {dangling_pq}", "symbolic link to"),
    ("capacity-plot-dangling-link", "capacity {vit} --plot {dangling_png}", "symbolic link to"),
    ("memorize-out-dangling-link", "memorize --sizes 16 --out {dangling_pq}", "symbolic link to"),
    ("reproduce-out-dangling-link", "reproduce table1 --out {dangling_pq}", "symbolic link to"),
    # --- every count that sizes an allocation is bounded before the work, the refusal names the largest that fits
    ("samples-huge", "kruskal {npy} --samples 99999999999999999999", "--samples must be at most 9007199254740992"),
    ("limit-huge", "check {vit} --limit 99999999999999999999", "--limit must be at most"),
    (
        "batch-size-huge",
        "check {vit} --device cpu --variants random --limit 1000000 --batch-size 1000000",
        "the largest --batch-size that fits in the memory available here is",
    ),
    ("memorize-sizes-huge", "memorize --sizes 100000000000 --device cpu", "the largest --sizes that fits is"),
    ("memorize-heads-huge", "memorize --sizes 16 --heads 100000000 --device cpu", "the largest --heads that fits is"),
    ("memorize-n-huge", "memorize --sizes 16 --n 100000000 --device cpu", "the largest --n that fits is"),
    (
        "memorize-classes-huge",
        "memorize --sizes 16 --classes 1000000000000 --device cpu",
        "the largest --classes that fits",
    ),
    ("memorize-seeds-range-huge", "memorize --sizes 16 --seeds 0-99999999999", "names more than 100000 seeds"),
    ("layers-range-huge", "check {vit} --layers 0-99999999999", "names more than 100000 layers"),
    # --- seeds: 0 to 2^63 - 1, refused at parse time outside
    ("seed-2-to-the-63", "kruskal {npy} --seed 9223372036854775808", "--seed must be at most 9223372036854775807"),
    ("seed-negative", "kruskal {npy} --seed -1", "--seed must be at least 0"),
    ("check-seed-2-to-the-63", "check {vit} --seed 9223372036854775808", "--seed must be at most"),
    ("memorize-seed-2-to-the-63", "memorize --sizes 16 --seed 9223372036854775808", "--seed must be at most"),
    ("memorize-seeds-2-to-the-63", "memorize --sizes 16 --seeds 9223372036854775808", "at most 9223372036854775807"),
    # what a results file holds in an int64 column too, refused before any point is trained
    ("memorize-check-every-2-to-the-63", "memorize --sizes 16 --check-every 9223372036854775808", "at most 92233720"),
    ("memorize-epochs-2-to-the-63", "memorize --sizes 16 --epochs 9223372036854775808 --max-steps 5", "at most 92233"),
    # --- settings that mean nothing are refused, not ignored (environment variables: NAME=VALUE first)
    ("device-empty", "kruskal {npy} --device ''", "--device is empty"),
    ("kernels-env-unknown", "MHAAUDIT_KERNELS=gpu kruskal {npy}", "MHAAUDIT_KERNELS='gpu'"),
    ("decode-workers-env-word", "MHAAUDIT_DECODE_WORKERS=many check {vit}", "MHAAUDIT_DECODE_WORKERS='many'"),
    ("decode-workers-env-zero", "MHAAUDIT_DECODE_WORKERS=0 check {vit}", "from 1 to 256"),
]

# Refused before any work: the data pass and the sampler are traps for these.
AFTER_THE_START = {
    "nothing-to-audit",  # known only once the model has been looked for
    "batch-size-huge",
    "csv-header-not-utf8",  # a data file is opened as the data pass begins
}  # known once the model is loaded: refused as the data pass begins, unread


@pytest.fixture()
def traps(monkeypatch):
    """Fail the test if an example reaches a model or a Monte-Carlo draw is made."""
    import mhaaudit.auditing  # noqa: F401  # imported before the traps are set, so that no module binds one for good
    import mhaaudit.capacity  # noqa: F401
    from mhaaudit import kruskal, pipeline

    def trap(*a, **k):
        raise AssertionError("the work started before the input was refused")

    monkeypatch.setattr(pipeline, "stream", trap)
    for name in ("subset_test", "kruskal_sweep", "set_stats"):
        monkeypatch.setattr(kruskal, name, trap)


@pytest.mark.parametrize("case, args, match", CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_line(request, monkeypatch, capsys, inputs, tmp_path, case, args, match):
    if case.endswith("-proc") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    if case not in AFTER_THE_START:
        request.getfixturevalue("traps")
    out = tmp_path / "out"
    (out / "folder.parquet").mkdir(parents=True)
    words = shlex.split(args.format(out=out, **inputs))
    while "=" in words[0] and words[0].split("=")[0].isupper():  # NAME=VALUE: the environment of the run
        monkeypatch.setenv(*words.pop(0).split("=", 1))
    command, *rest = words
    rc, stdout, err = run(capsys, command, *JSON, *rest)
    assert_one_error(rc, err, match.format(**inputs))
    assert stdout == ""
    assert os.listdir(os.path.join(os.path.dirname(inputs["npy"]), "outside")) == []
    assert not os.path.exists(inputs["marker"]), "a pickle was unpickled"
    assert sorted(os.listdir(out)) == ["folder.parquet"] and os.listdir(out / "folder.parquet") == [], (
        "a file was left behind"
    )


def test_no_case_ran_code_from_an_input(capsys, inputs):
    """The pickle that would leave a marker and the folder whose own code would exit were refused unread."""
    rc, _, err = run(capsys, "kruskal", inputs["codept"], *JSON)
    assert_one_error(rc, err, "never loaded")
    rc, _, err = run(capsys, "check", inputs["bertcode"], *JSON)
    assert_one_error(rc, err, "--trust-remote-code")
    assert not os.path.exists(os.path.join(os.path.dirname(inputs["codept"]), "UNPICKLED"))


def test_every_case_has_its_own_id():
    assert len({c[0] for c in CASES}) == len(CASES)


# Every integer-valued option, with arguments that reach the reading of its value ("{v}": the value). Typer reads
# most of them (--limit, --samples, --seed, ...); mhaaudit reads those that take ranges, lists or words too
# (--layers, --seeds, --heads, --batch-size, ...).
_INTEGER_OPTIONS = [
    *(f"check /nonexistent {o} {{v}}" for o in ("--limit", "--samples", "--seed", "--layer", "--query-index")),
    *(f"check /nonexistent {o} {{v}}" for o in ("--context-length", "--weights-seed", "--data-seed")),
    *(f"check /nonexistent {o} {{v}}" for o in ("--layers", "--batch-size", "--seeds")),
    *(f"capacity /nonexistent {o} {{v}}" for o in ("--limit", "--block", "--heads", "--batch-size", "--seeds")),
    *(f"capacity /nonexistent {o} {{v}}" for o in ("--layer", "--samples", "--seed", "--context-length")),
    *(f"capacity /nonexistent {o} {{v}}" for o in ("--weights-seed", "--data-seed")),
    *(f"kruskal --model /nonexistent {o} {{v}}" for o in ("--limit", "--k", "--n", "--batch-size", "--seeds")),
    *(f"kruskal --model /nonexistent {o} {{v}}" for o in ("--samples", "--seed", "--query-index")),
    *(f"kruskal --model /nonexistent {o} {{v}}" for o in ("--weights-seed", "--data-seed")),
    *(f"memorize --sizes 10 --max-steps 1 {o} {{v}}" for o in ("--classes", "--epochs", "--batch-size", "--seed")),
    *(f"memorize --sizes 10 --max-steps 1 {o} {{v}}" for o in ("--check-every", "--max-group", "--seeds")),
    *(f"memorize --sizes 10 --classes 1 {o} {{v}}" for o in ("--max-steps", "--n", "--heads", "--head-dim")),
    "memorize --classes 1 --sizes {v}",
    "memorize --sizes 10 --classes 1 --vary heads --values {v}",
    *(f"reproduce table3 --data /nonexistent {o} {{v}}" for o in ("--limit", "--max-steps", "--batch-size", "--seeds")),
    *(
        f"reproduce table3 --data /nonexistent {o} {{v}}"
        for o in ("--samples", "--seed", "--weights-seed", "--data-seed")
    ),
    "reproduce table3 --data /nonexistent --context-length bert={v}",
    *(f"reproduce figure2 --max-steps 0 {o} {{v}}" for o in ("--values", "--sizes")),
]


def _option(args: str) -> str:
    return next(w for w in args.split()[::-1] if w.startswith("--"))


@pytest.mark.parametrize("args", _INTEGER_OPTIONS, ids=[f"{a.split()[0]} {_option(a)}" for a in _INTEGER_OPTIONS])
def test_every_integer_option_reads_only_ascii_digits(capsys, args):
    """Python's int() reads the digits of every script ("٢٠" is 20), and some typer releases read "20.0" as 20: every
    option refuses both alike, in one line naming the option."""
    option = _option(args)
    for value in ("\u0662\u0660", "\uff12\uff10", "1-\u0662", "20.0"):
        if value.startswith("1-") and option not in ("--layers", "--seeds", "--heads", "--n", "--head-dim"):
            continue  # a range only where one is taken
        rc, out, err = run(capsys, *shlex.split(args.format(v=value)))
        assert_one_error(rc, err, option)
        assert out == ""


def test_the_integer_cases_name_every_integer_option():
    """Every option a command declares as an integer (or a list of them) is among the cases above, so an integer
    option added later is read the same way, or this fails."""
    import typing

    import typer

    from mhaaudit.cli.app import app

    declared = set()
    for command in app.registered_commands:
        hints = typing.get_type_hints(command.callback, include_extras=True)
        for hint in hints.values():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            kind, *extras = typing.get_args(hint)
            info = next((x for x in extras if isinstance(x, typer.models.OptionInfo)), None)
            inner = {a for a in typing.get_args(kind) if a is not type(None)} or {kind}
            if (info is not None and inner & {int, list[int]}) or (info is not None and info.metavar == "<int>"):
                flags = [f for f in (info.default, *info.param_decls) if str(f).startswith("--")]
                declared.add((command.name, tuple(flags)))
    covered = {(a.split()[0], _option(a)) for a in _INTEGER_OPTIONS}
    missing = [(name, flags) for name, flags in declared if not any((name, f) in covered for f in flags)]
    assert len(declared) > 30
    assert not missing, sorted(missing)


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
    rc, _, err = run(
        capsys,
        "kruskal",
        inputs["npy"],
        "--sweep",
        "--samples",
        "50",
        "--out",
        tmp_path / "k.parquet",
        "--plot",
        tmp_path / "k.png",
        "--format",
        "json",
    )
    assert rc == 0, err
    rc, _, err = run(
        capsys,
        "check",
        inputs["vit"],
        "--data",
        inputs["images"],
        "--limit",
        "40",
        "--samples",
        "50",
        "--variants",
        "random",
        "--out",
        tmp_path / "c.parquet",
        "--save-features",
        tmp_path / "feat",
        "--format",
        "json",
    )
    assert rc == 0, err
    files = [
        tmp_path / "k.parquet",
        tmp_path / "k.png",
        tmp_path / "c.parquet",
        tmp_path / "feat" / "random" / "features.safetensors",
        tmp_path / "feat" / "random" / "meta.json",
    ]
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in files} == {
        str(p.relative_to(tmp_path)): oct(umask_022) for p in files
    }
    assert oct(_mode(tmp_path / "feat")) == oct(0o755) and oct(_mode(tmp_path / "feat" / "random")) == oct(0o755)


def test_memorize_outputs_have_ordinary_permissions(capsys, tmp_path, umask_022):
    rc, _, err = run(
        capsys,
        "memorize",
        "--heads",
        "1,2",
        "--n",
        "4",
        "--head-dim",
        "8",
        "--sizes",
        "16",
        "--max-steps",
        "3",
        "--device",
        "cpu",
        "--out",
        tmp_path / "m.parquet",
        "--plot",
        tmp_path / "m.png",
        "--format",
        "json",
    )
    assert rc == 0, err
    assert oct(_mode(tmp_path / "m.parquet")) == oct(umask_022) and oct(_mode(tmp_path / "m.png")) == oct(umask_022)


@pytest.mark.parametrize("kind", ["bfloat16-file", "saved-folder"])
def test_safetensors_read_into_memory_are_sized_first(monkeypatch, capsys, tmp_path, kind):
    """A bfloat16 tensor (read, not mapped) and a saved feature folder (read whole): the bytes the header declares
    are checked against the memory available before any is read (a sparse file declares bytes it does not hold)."""
    import safetensors.torch

    from mhaaudit import hostmem

    def trap(*a, **k):
        raise AssertionError("the file was read before its declared size was checked")

    if kind == "bfloat16-file":
        path = tmp_path / "bf16.safetensors"
        save_file({"queries": torch.randn(1000, 1000).bfloat16()}, str(path))
        words = "its tensor 'queries' (BF16) is read, not mapped, which needs 2.0 MB"
    else:
        path = tmp_path / "feat"
        reduce_tokens(torch.randn(1000, 5, 200), 0, meta={"model": "m", "variant": "random", "layer": 1}).save(path)
        words = "a saved feature folder's tensors are read whole, which needs 1.6 MB"
    monkeypatch.setattr(hostmem, "available_memory", lambda: 1_000_000)
    monkeypatch.setattr(safetensors.torch, "load_file", trap)
    rc, stdout, err = run(capsys, "kruskal", path, *JSON)
    line = assert_one_error(rc, err, words)
    assert "but 1.0 MB are available" in line and stdout == ""


@pytest.mark.parametrize("dtype", ["int8", ">f8"])
def test_an_npy_array_read_whole_is_sized_first(monkeypatch, capsys, tmp_path, dtype):
    """An integer array, or floats in the other byte order, is read whole rather than mapped: what it holds is
    checked against the memory available first, as for a .pt file (it was read whatever its size)."""
    from mhaaudit import hostmem

    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((1000, 250)).astype(dtype))
    monkeypatch.setattr(hostmem, "available_memory", lambda: 200_000)
    rc, stdout, err = run(capsys, "kruskal", path, *JSON)
    shown = "int8" if dtype == "int8" else ">f8"
    line = assert_one_error(rc, err, f"its {shown} array of shape (1000, 250) is read whole, not mapped, which needs")
    assert "but 0.2 MB are available" in line and stdout == ""


def _sparse_features(path, kind: str, shape: tuple[int, int]) -> None:
    """A float32 feature file of ``shape`` whose data is all holes: its header, then the file lengthened by truncate."""
    need = shape[0] * shape[1] * 4
    with open(path, "wb") as fh:
        if kind == "npy":
            from numpy.lib import format as npy_format

            npy_format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": shape})
        else:
            header = json.dumps({"queries": {"dtype": "F32", "shape": list(shape), "data_offsets": [0, need]}})
            fh.write(len(header).to_bytes(8, "little") + header.encode())
        start = fh.tell()
    os.truncate(path, start + need)


@pytest.mark.parametrize("kind", ["npy", "safetensors"])
def test_a_sparse_feature_file_is_sized_before_it_is_mapped(monkeypatch, capsys, tmp_path, kind):
    """A file lengthened by truncate stores none of the data its header declares (holes, read as zeros): it is
    held to the memory available, as a file read whole, before a pass streams its 512 MiB of zeros."""
    from mhaaudit import hostmem

    path = tmp_path / f"holes.{kind}"
    _sparse_features(path, kind, (2**17, 1024))
    if os.stat(path).st_blocks * 512 * 16 > os.path.getsize(path):  # what refuse_if_sparse counts as sparse
        pytest.skip("this file system stores no sparse files")
    monkeypatch.setattr(hostmem, "available_memory", lambda: 400_000_000)  # the pass's own memory fits
    rc, stdout, err = run(capsys, "kruskal", path, "--k", "3", *JSON)
    line = assert_one_error(rc, err, "it is a sparse file")
    assert f"float32 {'array' if kind == 'npy' else 'tensor'} of shape (131072, 1024)" in line, line
    assert "which needs 536.9 MB" in line
    assert "but 400.0 MB are available" in line and stdout == ""
    stored = os.stat(path).st_blocks * 512  # a few kilobytes, in kilobytes or bytes (never "0.0 MB")
    assert f"{size_words(stored)} are stored on disk" in line and " 0.0 MB" not in line, line
    # with memory enough for what it declares, it is mapped as before
    monkeypatch.setattr(hostmem, "available_memory", lambda: 1 << 40)
    assert isinstance(read_array(path)[0], MappedArray)


@pytest.mark.parametrize("rows", [100, 2**23])
def test_an_expanded_pt_tensor_is_copied_only_once_its_shape_is_accepted(monkeypatch, capsys, tmp_path, rows):
    """A .pt tensor expanded from one stored row (a stride of 0) is copied into storage of its own before the work,
    but only after the checks its shape and dtype decide: float32 at 2^23 rows is refused by the default rule's
    tolerance without the 268 MB copy (it was made, then refused)."""
    from mhaaudit import hostmem

    path = tmp_path / "expanded.pt"
    torch.save(torch.randn(1, 8, generator=torch.Generator().manual_seed(0)).expand(rows, 8), path)
    assert os.path.getsize(path) < 5000
    copied, contiguous = [], torch.Tensor.contiguous

    def spy(self, *a, **k):
        if self.numel() * self.element_size() > self.untyped_storage().nbytes():  # its elements share storage
            copied.append(tuple(self.shape))
        return contiguous(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "contiguous", spy)
    monkeypatch.setattr(hostmem, "available_memory", lambda: 1 << 40)  # the copy fits: only the rule refuses
    rc, stdout, err = run(capsys, "kruskal", path, "--k", "2", "--samples", "50", *JSON)
    if rows == 100:
        assert rc == 0, err
        record = json.loads(stdout)["records"][0]
        assert copied == [(100, 8)] and (record["k"], record["T"]) == (2, 100)
    else:
        assert_one_error(rc, err, "features of dtype float32 at T = 8388608 rows of d = 8: under the default rule")
        assert copied == [] and stdout == ""


@pytest.mark.parametrize(("stored", "held"), [((1, 768), 3072), ((10_000, 1), 40_000)], ids=["rows", "columns"])
def test_an_expanded_pt_tensor_past_memory_is_refused_before_its_values_are_scanned(
    monkeypatch, capsys, tmp_path, stored, held
):
    """What an expanded .pt tensor (a stride of 0, along its rows or its columns) declares is held to the memory
    available before any value is looked at: the NaN/Inf scan reads the whole expanded view (at 10^6 x 768, seconds),
    work that a refusal known from the file's shape and storage must not wait for."""
    from mhaaudit import hostmem

    path = tmp_path / "expanded.pt"
    torch.save(torch.zeros(stored).expand(10_000, 768), path)
    scanned, isfinite = [], torch.isfinite

    def spy(t, *a, **k):
        scanned.append(tuple(t.shape))
        return isfinite(t, *a, **k)

    monkeypatch.setattr(torch, "isfinite", spy)
    monkeypatch.setattr(hostmem, "available_memory", lambda: 1_000_000)  # the file fits, the 30.7 MB it declares not
    rc, stdout, err = run(capsys, "kruskal", path, "--k", "2", *JSON)
    line = assert_one_error(rc, err, f"its tensor of shape (10000, 768) stores {held} bytes, repeated (a stride of 0)")
    assert "which needs 30.7 MB, but 1.0 MB are available" in line and stdout == ""
    assert scanned == [], "the values were scanned before the expanded tensor was refused"
    # with memory enough for what it declares, the same file is read, and its values scanned for NaN and Inf
    monkeypatch.setattr(hostmem, "available_memory", lambda: 1 << 40)
    rc, stdout, err = run(capsys, "kruskal", path, "--k", "2", "--samples", "50", *JSON)
    assert rc == 0, err
    assert sum(shape[0] for shape in scanned if shape[1:] == (768,)) >= 10_000  # every row, chunk by chunk


def test_results_written_by_mhaaudit_are_not_features_whatever_their_columns(capsys, inputs, tmp_path):
    """Recognised by the 'mhaaudit' schema metadata, not by column types: an all-numeric results file too."""
    rc, _, err = run(
        capsys,
        "kruskal",
        inputs["npy"],
        "--k",
        "3",
        "--samples",
        "50",
        "--out",
        tmp_path / "r.parquet",
        "--format",
        "json",
    )
    assert rc == 0, err
    rc, _out, err = run(capsys, "kruskal", tmp_path / "r.parquet", *JSON)
    assert_one_error(rc, err, "results file written by 'mhaaudit kruskal' (its parquet metadata says so)")
    meta = json.loads(__import__("pyarrow.parquet").parquet.read_schema(tmp_path / "r.parquet").metadata[b"mhaaudit"])
    assert meta["command"] == "kruskal" and sys.version  # the file stays as it was


# --------------------------------------------------------------------------- a failed output leaves nothing


def _full_disk(monkeypatch, writer: str) -> None:
    """Make one writer meet a full disk (ENOSPC) halfway: it writes a few bytes, then fails."""
    import errno

    def fail(path):
        if hasattr(path, "write"):  # an open file (parquet is written through one)
            path.write(b"partial")
        else:
            with open(path, "wb") as fh:
                fh.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if writer == "safetensors":
        import safetensors.torch

        class SafetensorError(Exception):  # what safetensors raises on a full disk: not an OSError
            pass

        def save_file(tensors, path, *a, **k):
            try:
                fail(path)
            except OSError:
                raise SafetensorError(
                    "Error while serializing: I/O error: No space left on device (os error 28)"
                ) from None

        monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    elif writer == "savefig":
        import matplotlib.figure

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, path, *a, **k: fail(path))
    else:
        import pyarrow.parquet as pq

        monkeypatch.setattr(pq, "write_table", lambda table, path, *a, **k: fail(path))


# (case id, the writer that meets a full disk). The run writes --save-features, --plot and --out over
# earlier versions of them: it exits 2 with one line, and every earlier file is as it was, with nothing beside it.
FULL_DISK = [
    ("disk-full-in-features", "safetensors"),
    ("disk-full-in-plot", "savefig"),
    ("disk-full-in-out", "parquet"),
]


@pytest.mark.parametrize("case, writer", FULL_DISK, ids=[c[0] for c in FULL_DISK])
def test_a_full_disk_leaves_no_output_and_clobbers_nothing(monkeypatch, capsys, inputs, tmp_path, case, writer):
    feat = tmp_path / "feat" / "random"
    feat.mkdir(parents=True)
    earlier = {
        tmp_path / "out.parquet": b"earlier out",
        tmp_path / "out.png": b"earlier plot",
        feat / "features.safetensors": b"earlier features",
        feat / "meta.json": b"earlier meta",
    }
    for path, data in earlier.items():
        path.write_bytes(data)
    _full_disk(monkeypatch, writer)
    rc, stdout, err = run(
        capsys,
        "check",
        inputs["vit"],
        "--data",
        inputs["images"],
        "--limit",
        "40",
        "--samples",
        "20",
        "--variants",
        "random",
        "--out",
        tmp_path / "out.parquet",
        "--plot",
        tmp_path / "out.png",
        "--save-features",
        tmp_path / "feat",
        "--format",
        "json",
    )
    assert_one_error(rc, err, "No space left on device")
    assert stdout == ""
    assert {p: p.read_bytes() for p in earlier} == earlier
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "feat",
        "feat/random",
        "feat/random/features.safetensors",
        "feat/random/meta.json",
        "out.parquet",
        "out.png",
    ]


def test_a_failed_run_removes_the_folders_it_made(monkeypatch, capsys, inputs, tmp_path):
    _full_disk(monkeypatch, "savefig")
    rc, _, err = run(
        capsys,
        "check",
        inputs["vit"],
        "--data",
        inputs["images"],
        "--limit",
        "40",
        "--samples",
        "20",
        "--variants",
        "random",
        "--plot",
        tmp_path / "out.png",
        "--save-features",
        tmp_path / "feat",
        "--format",
        "json",
    )
    assert_one_error(rc, err, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_save_features_replaces_a_planted_file_link_without_following_it(capsys, inputs, tmp_path):
    """A link at a file's place inside the column folder is replaced by the rename, never written through."""
    outside = tmp_path / "outside.json"
    outside.write_text("outside")
    (tmp_path / "feat" / "random").mkdir(parents=True)
    (tmp_path / "feat" / "random" / "meta.json").symlink_to(outside)
    rc, _, err = run(
        capsys,
        "check",
        inputs["vit"],
        "--data",
        inputs["images"],
        "--limit",
        "40",
        "--samples",
        "20",
        "--variants",
        "random",
        "--save-features",
        tmp_path / "feat",
        "--format",
        "json",
    )
    assert rc == 0, err
    meta = tmp_path / "feat" / "random" / "meta.json"
    assert not meta.is_symlink() and json.loads(meta.read_text())["n"] > 0
    assert outside.read_text() == "outside"


# --------------------------------------------------------------------------- how a run ends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (case id, arguments, what happens to the run, exit status, a piece of its one "Error:" line on stderr, or "" for
# none). Each runs `python -m mhaaudit ARGS --out out.parquet --plot out.png` in a folder holding m.npy (40 x 8) and
# big.npy (300 x 300); unless it ends with 0, no output and no temporary file is left there.
ENDINGS = [
    (
        "stdout-full-json",
        "kruskal m.npy --k 3 --samples 50 --format json",
        "stdout-full",
        2,
        "cannot write to stdout: No space left on device",
    ),
    ("stdout-full-table", "kruskal m.npy --k 3 --samples 50", "stdout-full", 2, "cannot write to stdout"),
    (
        "stdout-full-parquet",
        "kruskal m.npy --k 3 --samples 50 --format parquet",
        "stdout-full",
        2,
        "cannot write to stdout",
    ),
    ("pipe-closed-json", "kruskal m.npy --k 3 --samples 50 --format json", "reader-gone", 141, ""),
    ("pipe-closed-parquet", "kruskal m.npy --k 3 --samples 50 --format parquet", "reader-gone", 141, ""),
    ("pipe-closed-table", "kruskal m.npy --k 3 --samples 50", "reader-gone", 141, ""),
    ("pipe-closed-after-10-bytes", "kruskal big.npy --sweep --samples 10 --format json", "reader-reads-10", 141, ""),
    ("sigterm-while-sampling", "kruskal big.npy --sweep --samples 100000000", "sigterm", 143, "terminated (SIGTERM)"),
    (
        "sigterm-while-importing",
        "kruskal big.npy --sweep --samples 100000000",
        "sigterm-importing",
        143,
        "terminated (SIGTERM)",
    ),
    ("sighup-while-sampling", "kruskal big.npy --sweep --samples 100000000", "sighup", 129, "hung up (SIGHUP)"),
    (
        "sighup-while-importing",
        "kruskal big.npy --sweep --samples 100000000",
        "sighup-importing",
        129,
        "hung up (SIGHUP)",
    ),
    (
        "disk-full-on-a-tmpfs",
        "kruskal m.npy --k 3 --samples 50 --format json",
        "disk-full",
        2,
        "No space left on device",
    ),
]


def _end_run(folder, args: list[str], how: str) -> tuple[int, str]:
    """Run the case's command as a child process and end it ``how``; (status, stderr)."""
    import fcntl
    import signal
    import subprocess
    import threading

    env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("MHAAUDIT_DEBUG", None)
    argv = [sys.executable, "-m", "mhaaudit", *args]
    if how == "stdout-full":
        with open("/dev/full", "wb") as full:
            p = subprocess.run(
                argv, stdout=full, stderr=subprocess.PIPE, cwd=folder, env=env, timeout=300, text=True, check=False
            )
        return p.returncode, p.stderr
    if how in ("reader-gone", "reader-reads-10"):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=folder, env=env, text=False)
        if how == "reader-reads-10":  # a pipe of one page: the output (34 kB) does not fit, the writer waits for us
            fcntl.fcntl(p.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
            assert len(p.stdout.read(10)) == 10
        p.stdout.close()
        err = p.stderr.read().decode()
        return p.wait(timeout=300), err
    assert how in ("sigterm", "sigterm-importing", "sighup", "sighup-importing")
    sig = signal.SIGHUP if how.startswith("sighup") else signal.SIGTERM
    if how.endswith("-importing"):  # Python reports each import on stderr: the signal once click is imported
        env["PYTHONPROFILEIMPORTTIME"] = "1"
        marker, after = re.compile(r"^import time:.*\|\s+click$"), 0.0
    else:  # the signal while the work runs: 3 s after the estimator is imported (progress is quiet off a terminal)
        env["PYTHONPROFILEIMPORTTIME"] = "1"
        marker, after = re.compile(r"^import time:.*\|\s+mhaaudit\.kruskal$"), 3.0
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=folder, env=env, text=True)
    lines: list[str] = []

    def read() -> None:
        sent = False
        for line in p.stderr:
            if not line.startswith("import time:"):
                lines.append(line)
            if not sent and marker.search(line.rstrip()):
                threading.Timer(after, p.send_signal, (sig,)).start()
                sent = True

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = p.wait(timeout=300)
    finally:
        if p.poll() is None:  # pragma: no cover - a hang is the failure
            p.kill()
    reader.join(timeout=10)
    return rc, "".join(lines)


@pytest.fixture()
def tmpfs_full(tmp_path):
    """A 64 kB tmpfs filled to the last byte (needs root and mount; skipped elsewhere)."""
    import subprocess

    mnt = tmp_path / "full"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(mnt / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 512)
            except OSError:
                pass
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, check=False)


@pytest.mark.parametrize("case, args, how, status, match", ENDINGS, ids=[c[0] for c in ENDINGS])
def test_every_ending_is_one_line(request, tmp_path, case, args, how, status, match):
    import subprocess

    from conftest import tmp_leftovers

    rng = np.random.default_rng(0)
    np.save(tmp_path / "m.npy", rng.standard_normal((40, 8)))
    np.save(tmp_path / "big.npy", rng.standard_normal((300, 300)))
    if how == "disk-full":  # --out on a full disk; stdout is not the problem here
        full = request.getfixturevalue("tmpfs_full")
        env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1")
        env.pop("MHAAUDIT_DEBUG", None)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "mhaaudit",
                *shlex.split(args),
                "--out",
                str(full / "out.parquet"),
                "--plot",
                "out.png",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        rc, err = p.returncode, p.stderr
        assert sorted(os.listdir(full)) == ["filler"], "a temporary was left on the full disk"
    else:
        rc, err = _end_run(tmp_path, [*shlex.split(args), "--out", "out.parquet", "--plot", "out.png"], how)
    errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
    assert rc == status, err
    assert len(errors) == (1 if match else 0), err
    if match:
        assert match in errors[0], err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "full") == ["big.npy", "m.npy"], "an output was left"
    assert tmp_leftovers(tmp_path) == []


def test_every_ending_has_its_own_id():
    assert len({c[0] for c in ENDINGS + FULL_DISK}) == len(ENDINGS) + len(FULL_DISK)


def test_a_model_folder_whose_name_is_not_utf8_is_written_to_parquet(capsys, vit_dir, image_dir, tmp_path):
    """A folder name may hold bytes that are not UTF-8 (Python holds them as lone surrogates), which parquet's
    strings cannot hold: the results are written with each such byte as its escape, as a message shows it, where
    the writer stopped with exit 3."""
    model = tmp_path / os.fsdecode(b"odd\xff")
    shutil.copytree(vit_dir, model)
    out = tmp_path / "one.parquet"
    args = ("check", str(model), "--data", str(image_dir), "--limit", "20", "--samples", "50", "--variants", "random")
    rc, _, err = run(capsys, *args, "--out", str(out), *JSON)
    assert rc == 0, err
    import pyarrow.parquet as pq

    models = set(pq.read_table(out).column("model").to_pylist())
    assert models == {str(tmp_path) + "/odd\\xff"}, models
