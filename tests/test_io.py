"""mhaaudit.io: atomic writes, provenance stamps, reading feature files, query matrices."""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from clitools import run, run_python
from conftest import tmp_leftovers
from safetensors.torch import save_file

from mhaaudit import __version__
from mhaaudit.errors import InputError, OutputError
from mhaaudit.io import (
    MappedArray,
    atomic_path,
    check_folder_writable,
    check_writable,
    parquet_bytes,
    parquet_declared_bytes,
    read_array,
    read_parquet_metadata,
    stamp,
    to_query_matrix,
    write_parquet,
)


def write_text(path, text: str) -> None:
    """A text file written through ``atomic_path`` (the library has no text writer of its own)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


# --------------------------------------------------------------------------- provenance


def test_stamp_carries_tool_and_library_versions():
    s = stamp(seed=3, device="cpu")
    assert s["tool"] == "mhaaudit" and s["version"] == __version__
    for lib in ("mhaaudit", "python", "torch", "numpy", "transformers", "timm", "pyarrow"):
        assert s["versions"][lib]
    assert s["seed"] == 3 and s["device"] == "cpu"


# --------------------------------------------------------------------------- atomic writes


def test_atomic_write_replaces_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    write_text(target, "first")
    assert target.read_text() == "first"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("boom")
    assert target.read_text() == "first"
    assert tmp_leftovers(tmp_path) == []
    write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


@pytest.mark.parametrize("name", ["a" * 242 + ".parquet", "é" * 123 + ".pq", "b" * 255])
def test_a_legal_long_name_has_a_legal_temporary(tmp_path, name):
    """A name of up to 255 bytes is legal; its temporary (``.NAME.XXXXXXXX.tmp``) is shortened to fit."""
    assert len(name.encode()) <= 255
    write_text(tmp_path / name, "long")
    assert (tmp_path / name).read_text() == "long"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert check_folder_writable(tmp_path / name[:-1], "--save-features") == tmp_path / name[:-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    over = name + "x" * (256 - len(name.encode()))  # one byte over: the name itself is refused, as too long
    with pytest.raises(OutputError, match="too long"):
        check_writable(tmp_path / over)
    with pytest.raises(OutputError, match="too long"):
        check_folder_writable(tmp_path / over, "--save-features")


def test_atomic_write_failure_leaves_no_file(tmp_path):
    target = tmp_path / "new.txt"
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 100)
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_write_parquet_failure_leaves_nothing(tmp_path, monkeypatch):
    def broken(table, where, *a, **kw):
        where.write(b"PAR1 partial")  # (an open file: parquet is written through one)
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OutputError, match=r"cannot write .*r.parquet: disk full"):
        write_parquet([{"a": 1}], tmp_path / "r.parquet", {"seed": 0})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", ["missing_parent", "parent_is_file", "is_dir"])
def test_check_writable_rejects(tmp_path, case):
    if case == "missing_parent":
        target = tmp_path / "no" / "such" / "x.parquet"
    elif case == "parent_is_file":
        (tmp_path / "afile").write_text("")
        target = tmp_path / "afile" / "x.parquet"
    else:
        (tmp_path / "adir").mkdir()
        target = tmp_path / "adir"
    with pytest.raises(OutputError, match="cannot write"):
        check_writable(target)
    with pytest.raises(OutputError), atomic_path(target):
        pass  # pragma: no cover


def test_an_output_never_replaces_a_device_a_pipe_or_a_socket(tmp_path):
    """A rename over a device node would leave a regular file in its place (as root: /dev/null itself)."""
    os.mkfifo(tmp_path / "pipe.parquet")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.parquet"))
    (tmp_path / "null.parquet").symlink_to("/dev/null")
    targets = {"pipe.parquet": "a named pipe", "sock.parquet": "a socket", "null.parquet": "a symbolic link to a"}
    if os.geteuid() == 0:
        os.mknod(tmp_path / "dev.parquet", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets["dev.parquet"] = "a character device"
    try:
        for name, kind in targets.items():
            before = os.lstat(tmp_path / name)
            with pytest.raises(OutputError, match=f"cannot write .*{name}: it is {kind}"):
                check_writable(tmp_path / name)
            with pytest.raises(OutputError, match="not a regular file"), atomic_path(tmp_path / name):
                pass  # pragma: no cover
            with pytest.raises(OutputError, match=f"--save-features .*{name}: it is {kind}.* not a folder"):
                check_folder_writable(tmp_path / name, "--save-features")
            assert os.lstat(tmp_path / name).st_mode == before.st_mode
    finally:
        sock.close()
    assert sorted(os.listdir(tmp_path)) == sorted(targets)  # no temporary left


def test_write_parquet_roundtrip_and_metadata(tmp_path):
    recs = [
        {"check": "assumption_1", "k": 3, "witness": [1, 2], "fraction": 0.5},
        {"check": "sweep", "k": 1, "fraction": 1.0},
    ]
    meta = stamp(command="kruskal", seed=7, device="cpu", tolerance={"rule": "r"})
    out = tmp_path / "r.parquet"
    write_parquet(recs, out, meta)
    t = pq.read_table(out)
    from mhaaudit.tables import COLUMNS

    assert t.column_names == [c.name for c in COLUMNS["kruskal"]]  # every column of the command, in its order
    assert all(v is None for c in t.column_names if c not in recs[0] for v in t.column(c).to_pylist())
    assert t.column("witness").to_pylist() == [[1, 2], None]  # nested values as nested data
    assert t.schema.field("witness").type == pa.list_(pa.int64())
    back = read_parquet_metadata(out)
    assert back["seed"] == 7 and back["versions"]["torch"] == torch.__version__ and back["tolerance"] == {"rule": "r"}
    assert tmp_leftovers(tmp_path) == []
    # the same table as bytes
    b = pq.read_table(pa.BufferReader(parquet_bytes(recs, meta)))
    assert b.equals(t.replace_schema_metadata(b.schema.metadata))
    assert json.loads(b.schema.metadata[b"mhaaudit"])["seed"] == 7


# --------------------------------------------------------------------------- reading features


def _mat(dtype=np.float64, T=12, d=5, seed=0):
    return np.random.default_rng(seed).standard_normal((T, d)).astype(dtype)


def _loaded(t) -> torch.Tensor:
    """What ``read_array`` returned, as a tensor in memory (a memory map is read)."""
    return torch.from_numpy(np.array(t.numpy())) if isinstance(t, MappedArray) else t


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_read_npy_keeps_dtype(tmp_path, dtype):
    a = _mat(dtype)
    np.save(tmp_path / "x.npy", a)
    t, desc = read_array(tmp_path / "x.npy")
    assert t.dtype == torch.from_numpy(a).dtype
    assert np.array_equal(t.numpy(), a) and "npy" in desc


def test_read_npy_integers(tmp_path):
    np.save(tmp_path / "i.npy", np.arange(12, dtype=np.int32).reshape(3, 4))
    t, _ = read_array(tmp_path / "i.npy")
    assert t.shape == (3, 4) and not t.dtype.is_floating_point


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_read_pt_keeps_dtype(tmp_path, dtype):
    x = torch.randn(10, 4, dtype=torch.float64).to(dtype)
    torch.save(x, tmp_path / "x.pt")
    t, desc = read_array(tmp_path / "x.pt")
    assert t.dtype == dtype and torch.equal(t, x) and "torch" in desc
    torch.save({"other": torch.zeros(2), "queries": x}, tmp_path / "d.pt")
    with pytest.raises(InputError, match=r"several tensors \(other, queries\); choose one with key"):
        read_array(tmp_path / "d.pt")  # like .safetensors: no tensor is picked by its name
    assert torch.equal(read_array(tmp_path / "d.pt", key="queries")[0], x)
    assert torch.equal(read_array(tmp_path / "d.pt", key="other")[0], torch.zeros(2))
    torch.save({"only": x}, tmp_path / "one.pt")
    assert torch.equal(read_array(tmp_path / "one.pt")[0], x)


def test_a_saved_parameter_and_a_dict_beside_other_entries_are_read_as_their_values(tmp_path):
    """A model's parameter (``requires_grad``) is features like any tensor; entries of a saved dict that are
    not tensors (a count, a nested dict) are not features: the one tensor beside them is picked."""
    x = torch.randn(10, 4)
    torch.save(torch.nn.Parameter(x.clone()), tmp_path / "param.pt")
    t, _ = read_array(tmp_path / "param.pt")
    assert not t.requires_grad and type(t) is torch.Tensor and torch.equal(t, x)
    torch.save({"step": 3, "config": {"d": 4}, "queries": x.clone().requires_grad_()}, tmp_path / "mixed.pt")
    t, _ = read_array(tmp_path / "mixed.pt")
    assert not t.requires_grad and torch.equal(t, x)
    assert torch.equal(read_array(tmp_path / "mixed.pt", key="queries")[0], x)
    with pytest.raises(InputError, match=r"the entry 'step' is not a tensor \(its type: int\)"):
        read_array(tmp_path / "mixed.pt", key="step")
    with pytest.raises(InputError, match=r"no tensor named 'nope' \(found: queries\)"):
        read_array(tmp_path / "mixed.pt", key="nope")


def test_a_torch_file_s_tensors_are_named_by_the_text_of_their_keys(tmp_path, capsys):
    """A dict saved with keys that are no text (``{1: x, 2: y}``) is read by ``--key 1``, as its keys are listed;
    a dict whose entries are no tensors (a dict of dicts) holds none, said without an empty list of names."""
    from clitools import assert_one_error, run

    x, y = torch.randn(40, 8), torch.randn(40, 8)
    torch.save({1: x, 2: y}, tmp_path / "ints.pt")
    assert torch.equal(read_array(tmp_path / "ints.pt", key="2")[0], y)
    torch.save({"1": x, 1: y}, tmp_path / "both.pt")  # the text key, where there is one
    assert torch.equal(read_array(tmp_path / "both.pt", key="1")[0], x)
    with pytest.raises(InputError, match=r"no tensor named '3' \(found: 1, 2\)"):
        read_array(tmp_path / "ints.pt", key="3")
    rc, out, _ = run(capsys, "kruskal", tmp_path / "ints.pt", "--key", "1", "--samples", "50", "--format", "json")
    assert rc == 0 and json.loads(out)["sweep"]
    torch.save({"a": {"b": x}}, tmp_path / "nested.pt")
    rc, _, err = run(capsys, "kruskal", tmp_path / "nested.pt", "--key", "a.b")
    assert "found: )" not in assert_one_error(rc, err, "nested.pt holds no tensors")


def test_a_quantized_tensor_is_refused_with_the_call_that_makes_it_dense(tmp_path):
    q = torch.quantize_per_tensor(torch.randn(40, 8), 0.1, 0, torch.qint8)
    torch.save(q, tmp_path / "q.pt")
    with pytest.raises(
        InputError, match=r"the tensor is quantized, not a dense tensor; save it dense \(tensor\.dequantize\(\)\)"
    ):
        read_array(tmp_path / "q.pt")


def test_parquet_output_names_of_any_bytes_and_any_length_are_written(tmp_path):
    """A name that is not UTF-8 (any bytes a file system takes), and a long one whose temporary's shortened
    name would end inside a character, are written and read back (pyarrow takes names only as UTF-8)."""
    import pyarrow.parquet as pq

    records = [{"check": "assumption_1", "k": 3, "fraction": 1.0}]
    for name in (os.fsdecode(b"o\xff.parquet"), "\u00e9" * 123 + ".parquet"):
        assert len(os.fsencode(name)) <= 255
        write_parquet(records, tmp_path / name, stamp(command="kruskal"))
        with open(tmp_path / name, "rb") as f:
            assert pq.read_table(f).to_pylist()[0]["k"] == 3
    assert tmp_leftovers(tmp_path) == []


def test_parquet_and_arrow_inputs_with_names_of_any_bytes_are_read(tmp_path, capsys):
    """Every reader of parquet and Arrow files takes a name that is not UTF-8 (pyarrow's readers take only
    UTF-8 names): features, a results file (refused as features; its metadata; a result read back),
    check results for capacity, memorize's results file, and a data table (parquet, Arrow, CSV, TSV)."""
    import shutil

    from conftest import FIXTURES

    from mhaaudit.capacity.assumptions import read_check_results
    from mhaaudit.kruskal import KruskalResult
    from mhaaudit.memorize.grid import run_memorize_grid
    from mhaaudit.memorize.results import MemorizeGrid
    from mhaaudit.sources.containers import table_of

    odd = os.fsdecode(b"\xff")
    x = torch.randn(12, 3)
    pq.write_table(pa.table({"a": x[:, 0].numpy(), "b": x[:, 1].numpy(), "c": x[:, 2].numpy()}), tmp_path / "f.parquet")
    os.rename(tmp_path / "f.parquet", tmp_path / f"f{odd}.parquet")
    t, desc = read_array(tmp_path / f"f{odd}.parquet")
    assert torch.equal(t.float(), x) and "parquet" in desc

    np.save(tmp_path / "x.npy", x.numpy())
    out = tmp_path / f"r{odd}.parquet"
    rc, _, err = run(capsys, "kruskal", tmp_path / "x.npy", "--k", "2", "--samples", "5", "--out", out)
    assert rc == 0, err
    with pytest.raises(InputError, match="results file written by 'mhaaudit kruskal'"):
        read_array(out)
    assert read_parquet_metadata(out)["command"] == "kruskal"
    assert KruskalResult.from_parquet(out).tests[0].k == 2

    shutil.copy(FIXTURES / "results" / "check-v0.parquet", tmp_path / f"c{odd}.parquet")
    meta, rows = read_check_results(tmp_path / f"c{odd}.parquet")
    assert meta["command"] == "check" and rows

    grid = tmp_path / f"g{odd}.parquet"
    kw = dict(vary="heads", values="1", sizes=[8], max_steps=2, out=grid, n=4, head_dim=8, device="cpu")
    assert run_memorize_grid(**kw).reused == 0
    again = run_memorize_grid(**kw)
    assert again.reused == 1  # read back to resume
    (tmp_path / f"p{odd}.parquet").write_bytes(parquet_bytes(again.table_records(), again.meta()))  # --format parquet
    assert MemorizeGrid.from_parquet(tmp_path / f"p{odd}.parquet") == again

    pq.write_table(pa.table({"text": ["one", "two"]}), tmp_path / "t.parquet")
    os.rename(tmp_path / "t.parquet", tmp_path / f"t{odd}.parquet")
    table = tmp_path / "a.arrow"
    with pa.ipc.new_stream(str(table), pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": ["three"]}))
    os.rename(table, tmp_path / f"a{odd}.arrow")
    assert list(table_of(tmp_path / f"t{odd}.parquet").values("text")) == ["one", "two"]
    assert list(table_of(tmp_path / f"a{odd}.arrow").values("text")) == ["three"]
    (tmp_path / f"c{odd}.csv").write_text("id,text\n1,four\n2,five\n")
    (tmp_path / f"s{odd}.tsv").write_text("text\tid\nsix\t1\n")
    assert list(table_of(tmp_path / f"c{odd}.csv").values("text")) == ["four", "five"]
    assert list(table_of(tmp_path / f"s{odd}.tsv").values("text")) == ["six"]


def test_safetensors_inputs_with_names_of_any_bytes_are_read(tmp_path):
    """safetensors' readers take only UTF-8 names: a features file whose name is not UTF-8 is read all the same,
    memory-mapped (float32) or read whole (bfloat16), and a checkpoint file's tensors and names too."""
    from safetensors.torch import save_file

    from mhaaudit.models.checkpoints import read_state_file, state_file_keys

    odd = os.fsdecode(b"\xff")
    x = torch.randn(12, 3)
    for dtype, how in ((torch.float32, "memory-mapped"), (torch.bfloat16, ")")):
        save_file({"queries": x.to(dtype)}, str(tmp_path / "f.safetensors"))
        os.rename(tmp_path / "f.safetensors", tmp_path / f"f{odd}.safetensors")
        t, desc = read_array(tmp_path / f"f{odd}.safetensors")
        values = torch.from_numpy(np.array(t.array)) if dtype == torch.float32 else t  # a map, or the tensor read
        assert torch.equal(values.to(dtype), x.to(dtype)) and how in desc
    sd = {"w": torch.randn(2, 3), "b": torch.zeros(2)}
    save_file(sd, str(tmp_path / "c.safetensors"))
    os.rename(tmp_path / "c.safetensors", tmp_path / f"c{odd}.safetensors")
    got = read_state_file(str(tmp_path / f"c{odd}.safetensors"))
    assert set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    assert sorted(state_file_keys(str(tmp_path / f"c{odd}.safetensors"))) == ["b", "w"]


def test_model_and_feature_folders_with_names_of_any_bytes_are_read(tmp_path, vit_dir, timm_dir, image_dir):
    """The other readers that hand a name to a native library: a timm folder (its safetensors checkpoint), a
    transformers folder whose weights are only a pytorch_model.bin (loaded whole by from_pretrained), and a
    folder of saved features, each under a name that is not UTF-8, give what the same folder gives under a
    UTF-8 name."""
    import shutil

    from safetensors.torch import load_file

    from mhaaudit import FeatureSet, audit, reduce_tokens

    odd = os.fsdecode(b"\xff")
    (tmp_path / "bin").mkdir()
    shutil.copy(vit_dir / "config.json", tmp_path / "bin")
    torch.save(load_file(str(vit_dir / "model.safetensors")), tmp_path / "bin" / "pytorch_model.bin")
    run_kw = dict(data=str(image_dir), variants=["trained"], limit=24, samples=20, device="cpu")
    for plain in (timm_dir, tmp_path / "bin"):
        other = tmp_path / f"{plain.name}{odd}"
        shutil.copytree(plain, other)
        want, got = audit(str(plain), **run_kw), audit(str(other), **run_kw)
        assert want.records() and [r | {"model": ""} for r in want.records()] == [
            r | {"model": ""} for r in got.records()
        ]
    reduce_tokens(torch.randn(20, 3, 8, generator=torch.Generator().manual_seed(0)), 0).save(tmp_path / "feats")
    shutil.copytree(tmp_path / "feats", tmp_path / f"feats{odd}")
    want, got = FeatureSet.load(tmp_path / "feats"), FeatureSet.load(tmp_path / f"feats{odd}")
    assert torch.equal(want.queries, got.queries) and torch.equal(want.a3, got.a3)


def test_key_with_nothing_to_choose_is_refused(tmp_path):
    x = torch.randn(4, 3)
    np.save(tmp_path / "x.npy", x.numpy())
    torch.save(x, tmp_path / "x.pt")
    with pytest.raises(InputError, match=r"^key has no effect on .*x.npy: a .npy file holds one array"):
        read_array(tmp_path / "x.npy", key="queries")
    with pytest.raises(InputError, match=r"^key has no effect on .*x.pt: it holds one tensor"):
        read_array(tmp_path / "x.pt", key="queries")


def test_results_file_is_not_features(tmp_path):
    """A parquet file written by mhaaudit is recognised by its metadata, whatever its columns hold."""
    out = tmp_path / "r.parquet"
    write_parquet([{"k": 3, "fraction": 0.5}], out, stamp(command="kruskal"))  # numeric columns only
    with pytest.raises(InputError, match="results file written by 'mhaaudit kruskal'"):
        read_array(out)


def test_read_safetensors_keys(tmp_path):
    a, b = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3)
    save_file({"a": a, "b": b}, str(tmp_path / "x.safetensors"))
    with pytest.raises(InputError, match=r"choose one with key$"):
        read_array(tmp_path / "x.safetensors")
    t, desc = read_array(tmp_path / "x.safetensors", key="a")
    assert t.dtype == torch.float64 and torch.equal(_loaded(t), a) and "'a'" in desc
    with pytest.raises(InputError, match="no tensor named 'c'"):
        read_array(tmp_path / "x.safetensors", key="c")
    save_file({"only": b}, str(tmp_path / "one.safetensors"))
    assert torch.equal(_loaded(read_array(tmp_path / "one.safetensors")[0]), b)


def test_read_folder_with_features_file(tmp_path):
    q = torch.randn(5, 3)
    save_file({"queries": q, "a3": torch.randn(5, 3)}, str(tmp_path / "features.safetensors"))
    assert torch.equal(_loaded(read_array(tmp_path)[0]), q)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"features.safetensors"):
        read_array(tmp_path / "empty")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_read_parquet_list_column_keeps_dtype(tmp_path, dtype):
    a = _mat(dtype)
    typ = pa.list_(pa.float64() if dtype == np.float64 else pa.float32())
    pq.write_table(pa.table({"id": list(range(len(a))), "emb": pa.array(a.tolist(), type=typ)}), tmp_path / "x.parquet")
    t, desc = read_array(tmp_path / "x.parquet")
    assert t.dtype == torch.from_numpy(a).dtype and np.array_equal(t.numpy(), a)
    assert "'emb'" in desc


def test_several_list_columns_need_a_key(tmp_path):
    """Two list columns: which holds the features is not guessed (the first was taken without a word), as
    among the tensors of a .pt or .safetensors file."""
    a, b = _mat(np.float64), _mat(np.float64) * 2
    typ = pa.list_(pa.float64())
    pq.write_table(
        pa.table({"emb": pa.array(a.tolist(), type=typ), "other": pa.array(b.tolist(), type=typ)}),
        tmp_path / "x.parquet",
    )
    with pytest.raises(InputError, match=r"several list columns \('emb', 'other'\); choose one with key"):
        read_array(tmp_path / "x.parquet")
    for key, want in (("emb", a), ("other", b)):
        t, desc = read_array(tmp_path / "x.parquet", key=key)
        assert np.array_equal(t.numpy(), want) and f"'{key}'" in desc


def test_nulls_in_numeric_columns_are_named_as_missing(tmp_path):
    """A null in a numeric column was read as NaN and reported as a non-finite value."""
    pq.write_table(pa.table({"a": [1.0, 2.0, 3.0], "b": pa.array([1.0, None, 2.0])}), tmp_path / "x.parquet")
    with pytest.raises(InputError, match=r"column 'b' has missing values \(nulls\)"):
        read_array(tmp_path / "x.parquet")


def test_read_parquet_fixed_size_list(tmp_path):
    a = _mat(np.float32, T=7, d=4)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), 4)
    pq.write_table(pa.table({"v": arr}), tmp_path / "f.parquet")
    t, _ = read_array(tmp_path / "f.parquet")
    assert t.dtype == torch.float32 and np.array_equal(t.numpy(), a)


def test_read_parquet_numeric_columns(tmp_path):
    a = _mat(np.float64, T=9, d=3)
    pq.write_table(pa.table({"x0": a[:, 0], "name": ["r"] * 9, "x1": a[:, 1], "x2": a[:, 2]}), tmp_path / "n.parquet")
    t, desc = read_array(tmp_path / "n.parquet")
    assert t.dtype == torch.float64 and np.array_equal(t.numpy(), a) and "3 numeric columns" in desc
    t1, _ = read_array(tmp_path / "n.parquet", key="x1")
    assert t1.shape == (9, 1)
    with pytest.raises(InputError, match="no column 'zz'"):
        read_array(tmp_path / "n.parquet", key="zz")


def test_a_pandas_index_is_not_a_feature_and_the_columns_read_are_named(tmp_path):
    """pandas stores a DataFrame's index (other than 0..T-1) as a column of its own: a row label, never a
    feature; the report names the numeric columns it read, so that a label column read as one is seen."""
    pd = pytest.importorskip("pandas")
    a = _mat(np.float64, T=9, d=3)
    frame = pd.DataFrame(a, columns=["x0", "x1", "x2"], index=np.arange(100, 109))
    frame.to_parquet(tmp_path / "i.parquet")
    frame.rename_axis("row").to_parquet(tmp_path / "named.parquet")
    for name in ("i.parquet", "named.parquet"):
        t, desc = read_array(tmp_path / name)
        assert t.shape == (9, 3) and np.array_equal(t.numpy(), a), name
        assert desc.endswith("3 numeric columns: x0, x1, x2)"), desc
    t, _ = read_array(tmp_path / "named.parquet", key="row")  # asked for by name, it is read
    assert t[:, 0].tolist() == list(range(100, 109))
    wide = pa.table({f"c{i}": a[:, 0] for i in range(10)})
    pq.write_table(wide, tmp_path / "w.parquet")
    assert read_array(tmp_path / "w.parquet")[1].endswith("10 numeric columns: c0, c1, c2, ..., c8, c9)")
    twice = pa.Table.from_arrays([pa.array(a[:, 0]), pa.array(a[:, 1])], names=["x", "x"])
    pq.write_table(twice, tmp_path / "twice.parquet")
    with pytest.raises(InputError, match="names more than one column 'x'"):
        read_array(tmp_path / "twice.parquet")


def test_only_the_feature_columns_of_a_parquet_file_are_sized_and_read(tmp_path, monkeypatch):
    """A text column beside the features is neither decoded nor counted: a dictionary-encoded string column
    declares a few bytes in the footer and decodes to its values repeated, which the bound did not count."""
    a = _mat(np.float32, T=50, d=2)
    long = pa.array(["x" * 10_000]).take(pa.array(np.zeros(50, dtype=np.int32)))
    pq.write_table(pa.table({"name": long, "a": a[:, 0], "b": a[:, 1]}), tmp_path / "s.parquet")
    real, read = pq.read_table, []

    def spy(source, *args, **kw):
        read.append(kw.get("columns"))
        return real(source, *args, **kw)

    monkeypatch.setattr(pq, "read_table", spy)
    t, _ = read_array(tmp_path / "s.parquet")
    assert np.array_equal(t.numpy(), a) and read == [["a", "b"]]
    assert 2 * 50 * 4 <= parquet_declared_bytes(tmp_path / "s.parquet", ["a", "b"])[0] < 10_000


def test_64_bit_integer_columns_stacked_with_floats_are_exact_or_refused(tmp_path):
    """Numeric columns of mixed types are read as their common type: 64-bit integers beside floats (or signed
    beside unsigned) become float64, exact only up to 2^53. Beyond it the file is refused, never rounded."""
    x = _mat(np.float32, T=6, d=1)[:, 0]
    big = np.arange(6, dtype=np.uint64) * np.uint64(2**52)  # up to 5 * 2^52: float64 is exact only to 2^53
    pq.write_table(pa.table({"x": x, "n": np.arange(6, dtype=np.int64) - 3}), tmp_path / "ok.parquet")
    t, _ = read_array(tmp_path / "ok.parquet")
    assert t.dtype == torch.float64 and t[:, 1].tolist() == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0]
    for name, column in (("u", big + np.uint64(1)), ("i", -(np.arange(6, dtype=np.int64) + 2**53 + 1))):
        pq.write_table(pa.table({"x": x, name: column}), tmp_path / f"{name}.parquet")
        with pytest.raises(InputError, match=rf"column '{name}' \((u?int64)\) holds integers beyond 2\^53"):
            read_array(tmp_path / f"{name}.parquet")
    pq.write_table(pa.table({"s": np.arange(6, dtype=np.int64), "u": big + np.uint64(1)}), tmp_path / "su.parquet")
    with pytest.raises(InputError, match=r"column 'u' \(uint64\) holds integers beyond 2\^53"):
        read_array(tmp_path / "su.parquet")


def test_read_parquet_bad_tables(tmp_path):
    pq.write_table(pa.table({"s": ["a", "b"]}), tmp_path / "s.parquet")
    with pytest.raises(InputError, match="no numeric"):
        read_array(tmp_path / "s.parquet")
    pq.write_table(pa.table({"v": [[1.0, 2.0], [3.0]]}), tmp_path / "ragged.parquet")
    with pytest.raises(InputError, match="different lengths"):
        read_array(tmp_path / "ragged.parquet")
    pq.write_table(pa.table({"v": [[1.0, 2.0], None]}), tmp_path / "null.parquet")
    with pytest.raises(InputError):
        read_array(tmp_path / "null.parquet")


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("missing.npy", None, "no such file"),
        ("garbage.npy", b"\x00\x01 not an array at all" * 10, "cannot read"),
        ("garbage.pt", b"\x80\x04 junk" * 10, "cannot read"),
        ("garbage.safetensors", b"{{{{" * 10, "cannot read"),
        ("garbage.parquet", b"PAR1 nope" * 10, "cannot read"),
        ("x.csv", b"1,2\n3,4\n", "unknown feature file type"),
        ("noext", b"1", "unknown feature file type"),
    ],
)
def test_read_array_bad_files(tmp_path, name, content, match):
    p = tmp_path / name
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(InputError, match=match):
        read_array(p)


def test_read_npy_object_and_strings_rejected(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError):
        read_array(tmp_path / "o.npy")
    np.save(tmp_path / "s.npy", np.array([["a", "b"]]))
    with pytest.raises(InputError, match="not numeric"):
        read_array(tmp_path / "s.npy")


def test_read_pt_non_tensor_rejected(tmp_path):
    torch.save([1, 2, 3], tmp_path / "l.pt")
    with pytest.raises(InputError, match="expected a tensor"):
        read_array(tmp_path / "l.pt")


# --------------------------------------------------------------------------- query matrices


def test_to_query_matrix():
    X = torch.randn(6, 4)
    assert to_query_matrix(X, None, "s") == (X, "s")
    with pytest.raises(InputError, match=": query_index applies"):
        to_query_matrix(X, 0, "s")
    tok = torch.randn(6, 5, 4, dtype=torch.float64)
    with pytest.raises(InputError, match="needs query_index "):
        to_query_matrix(tok, None, "s")
    q0, desc = to_query_matrix(tok, 0, "s")
    assert torch.equal(q0, tok[:, 0]) and q0.dtype == torch.float64 and "token 0" in desc
    assert torch.equal(to_query_matrix(tok, -1, "s")[0], tok[:, 4])
    assert torch.equal(to_query_matrix(tok, 4, "s")[0], tok[:, 4])
    for bad in (5, -6):
        with pytest.raises(InputError, match="out of range"):
            to_query_matrix(tok, bad, "s")
    for shape in ((6,), (2, 3, 4, 5), ()):
        with pytest.raises(InputError, match="expected a T x d matrix"):
            to_query_matrix(torch.zeros(shape), None, "s")


def test_abandon_removes_what_is_staged_and_what_is_being_written_from_another_thread(tmp_path, monkeypatch):
    """The end of the process after a signal whose run did not unwind in time (``mhaaudit.ending``):
    another thread removes the staged outputs, the temporary being written and the folder made for them,
    and nothing is begun after it."""
    import threading

    from mhaaudit import staging
    from mhaaudit.staging import abandon, make_output_folder, staged_outputs

    monkeypatch.setattr(staging, "_ABANDONED", False)  # restored after the test: the process goes on

    folder = tmp_path / "made"
    # (the process ends right after; a run that went on would find its temporary gone)
    with pytest.raises(OutputError, match=r"half\.txt"), staged_outputs() as staged:
        make_output_folder(folder)
        with atomic_path(folder / "whole.txt") as tmp:
            tmp.write_text("whole")
        with atomic_path(folder / "half.txt") as tmp:
            tmp.write_text("half")
            helper = threading.Thread(target=abandon)
            helper.start()
            helper.join(10)
            assert not tmp.exists()
            assert staged.files == {} and staged.folders == []
    assert os.listdir(tmp_path) == []  # nothing was put in place: the staged output was forgotten
    with pytest.raises(OutputError, match="the run is ending"), atomic_path(tmp_path / "late.txt") as tmp:
        tmp.write_text("late")
    assert os.listdir(tmp_path) == []


def test_a_scratch_folder_is_removed_however_its_work_ends_and_links_in_it_are_not_followed(tmp_path, monkeypatch):
    from mhaaudit.staging import scratch_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    kept = tmp_path / "model"
    kept.mkdir()
    (kept / "weights.bin").write_bytes(b"w")
    with scratch_folder("mhaaudit-test-") as folder:
        assert folder.parent == tmp_path / "tmp" and folder.name.startswith("mhaaudit-test-")
        (folder / "model").symlink_to(kept, target_is_directory=True)  # a link to a folder: never entered
        (folder / "weights.bin").symlink_to(kept / "weights.bin")
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")
    assert os.listdir(tmp_path / "tmp") == [] and (kept / "weights.bin").read_bytes() == b"w"
    with pytest.raises(KeyboardInterrupt), scratch_folder("mhaaudit-test-") as folder:
        (folder / "half").write_text("x")
        raise KeyboardInterrupt
    assert os.listdir(tmp_path / "tmp") == []


def test_abandon_removes_the_scratch_folders_and_refuses_new_ones(tmp_path, monkeypatch):
    """After a signal, :func:`staging.abandon` (from the watch's thread) removes the scratch folders a run
    is still using, the process's own among them, and no new one is made."""
    import threading

    from mhaaudit import staging

    monkeypatch.setattr(staging, "_ABANDONED", False)  # restored after the test: the process goes on
    monkeypatch.setattr(staging, "_PROCESS_SCRATCH", {})
    monkeypatch.setattr(staging, "_SCRATCH", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with staging.scratch_folder("mhaaudit-test-") as folder:
        (folder / "x").write_text("x")
        cache = staging.process_scratch_folder("mhaaudit-cache-")
        assert staging.process_scratch_folder("mhaaudit-cache-") == cache  # one a process
        (cache / "corpus.json.gz").write_bytes(b"c")
        helper = threading.Thread(target=staging.abandon)
        helper.start()
        helper.join(10)
        assert os.listdir(tmp_path) == []
        with pytest.raises(OutputError, match="the run is ending"), staging.scratch_folder("mhaaudit-late-"):
            pass
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_cache_stand_in_is_one_folder_removed_when_the_process_exits_not_when_a_forked_child_does(
    tmp_path, monkeypatch
):
    """When the cache cannot be written, a process caches in one scratch folder, gone after it exits (before,
    each use made a new temporary folder that stayed); a forked child that exits normally runs the parent's exit
    hooks, and must leave the parent's folders alone, the one its parent's work still uses too."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MHAAUDIT_CACHE", str(tmp_path / "file" / "cache"))  # under a file: never writable
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    script = (
        "import os, sys\n"
        "from mhaaudit.sources._common import cache_dir\n"
        "a = cache_dir('corpus'); b = cache_dir('corpus')\n"
        "assert a == b, (a, b)\n"
        "(a / 'docstrings.json.gz').write_text('c')\n"
        "from mhaaudit.staging import scratch_folder\n"
        "with scratch_folder('mhaaudit-weights-') as w:\n"
        "    (w / 'config.json').write_text('{}')\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        sys.exit(0)  # leaves the block, then runs the exit hooks\n"
        "    _, status = os.waitpid(pid, 0)\n"
        "    assert os.waitstatus_to_exitcode(status) == 0\n"
        "    assert (w / 'config.json').is_file() and (a / 'docstrings.json.gz').is_file()\n"
        "assert not w.exists()\n"
        "print(a)\n"
    )
    done = run_python(script)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path / "tmp" and folder.name.startswith("mhaaudit-corpus-")
    assert os.listdir(tmp_path / "tmp") == []


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    write_text(tmp_path / "atomic.txt", "x")
    assert (tmp_path / "atomic.txt").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    # an existing file keeps its permissions when replaced
    (tmp_path / "atomic.txt").chmod(0o640)
    write_text(tmp_path / "atomic.txt", "y")
    assert (tmp_path / "atomic.txt").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">i4"])
def test_read_big_endian_npy_as_numpy_does(tmp_path, dtype):
    """numpy reads a big-endian .npy; so does mhaaudit, in the machine's byte order, values and dtype kept."""
    X = np.arange(24).reshape(6, 4).astype(dtype) * 3
    np.save(tmp_path / "be.npy", X)
    t, _ = read_array(tmp_path / "be.npy")
    assert t.dtype == torch.from_numpy(X.astype(X.dtype.newbyteorder("="))).dtype
    assert np.array_equal(t.numpy(), np.load(tmp_path / "be.npy"))


def test_safetensors_header_is_checked_against_the_file(tmp_path):
    """The 8-byte header length is checked against the file size before a byte of it is read."""
    from mhaaudit.io import safetensors_header

    (tmp_path / "h.safetensors").write_bytes((2**40).to_bytes(8, "little") + b'{"a": 1}')
    with pytest.raises(ValueError, match=r"header claims 1099511627776 bytes, the file has 8"):
        safetensors_header(tmp_path / "h.safetensors")
    save_file({"x": torch.zeros(3)}, str(tmp_path / "ok.safetensors"))
    assert safetensors_header(tmp_path / "ok.safetensors")["x"]["shape"] == [3]
    raw = (tmp_path / "ok.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[:-4])  # the tensor's data runs past the end
    with pytest.raises(ValueError, match="no valid data offsets"):
        safetensors_header(tmp_path / "cut.safetensors")
    with pytest.raises(InputError, match="no valid data offsets"):
        read_array(tmp_path / "cut.safetensors")


# --------------------------------------------------------------------------- memory-mapped features


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_npy_features_are_mapped_not_read(tmp_path, dtype):
    a = np.arange(60, dtype=dtype).reshape(12, 5)
    np.save(tmp_path / "x.npy", a)
    t, desc = read_array(tmp_path / "x.npy")
    assert isinstance(t, MappedArray) and isinstance(t.array, np.memmap) and "memory-mapped" in desc
    assert t.shape == (12, 5) and t.dtype == torch.from_numpy(a).dtype and not t.array.flags.writeable
    assert np.array_equal(t.numpy(), a)


def test_fortran_ordered_npy_is_mapped_in_its_order(tmp_path):
    a = np.asfortranarray(np.random.default_rng(0).standard_normal((9, 4)).astype(np.float32))
    np.save(tmp_path / "f.npy", a)
    t, _ = read_array(tmp_path / "f.npy")
    assert isinstance(t, MappedArray) and t.order == "F" and np.array_equal(t.numpy(), a)


def test_safetensors_features_are_mapped_at_their_data_offset(tmp_path):
    a, b = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 4)
    save_file({"a": a, "b": b}, str(tmp_path / "x.safetensors"))
    for key, want in (("a", a), ("b", b)):
        t, desc = read_array(tmp_path / "x.safetensors", key=key)
        assert isinstance(t, MappedArray) and "memory-mapped" in desc
        assert torch.equal(torch.from_numpy(np.array(t.numpy())), want)


def test_bfloat16_safetensors_are_read_not_mapped(tmp_path):
    a = torch.randn(4, 3).to(torch.bfloat16)
    save_file({"a": a}, str(tmp_path / "x.safetensors"))
    t, _ = read_array(tmp_path / "x.safetensors")
    assert isinstance(t, torch.Tensor) and torch.equal(t, a)


def test_a_mapped_array_pickles_as_its_description(tmp_path):
    """Under torchrun rank 0 sends its arguments to the others: a mapped file travels as its path,
    offset, dtype and shape, and each rank maps the same file."""
    import pickle

    a = np.random.default_rng(1).standard_normal((2000, 3, 16)).astype(np.float32)
    np.save(tmp_path / "tok.npy", a)
    t, _ = read_array(tmp_path / "tok.npy")
    q, _ = to_query_matrix(t, -1, "tok")
    blob = pickle.dumps(q)
    assert len(blob) < 1000 < a.nbytes
    back = pickle.loads(blob)
    assert isinstance(back, MappedArray) and back.shape == (2000, 16) and np.array_equal(back.numpy(), a[:, -1, :])


def test_parquet_list_column_is_read_without_python_lists(tmp_path):
    """The vectors go from Arrow's flat values into one T x d array: the reading allocates about
    the array (Python lists of the rows would take some eight times more)."""
    import tracemalloc

    a = np.random.default_rng(2).standard_normal((4000, 64)).astype(np.float32)
    table = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), 64)})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=1000)  # several chunks
    del table
    tracemalloc.start()
    try:
        t, _ = read_array(tmp_path / "x.parquet")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert t.dtype == torch.float32 and np.array_equal(t.numpy(), a)
    assert peak < 3 * a.nbytes


def test_a_file_read_whole_that_would_not_fit_is_refused_before_reading(tmp_path, monkeypatch):
    from mhaaudit import hostmem

    torch.save(torch.randn(50, 4), tmp_path / "x.pt")
    monkeypatch.setattr(hostmem, "available_memory", lambda: 100)
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("read"))
    with pytest.raises(InputError, match="memory-mapped instead of read"):
        read_array(tmp_path / "x.pt")
    np.save(tmp_path / "x.npy", np.ones((50, 4), dtype=np.float32))  # a mapped file is not read whole
    assert isinstance(read_array(tmp_path / "x.npy")[0], MappedArray)
