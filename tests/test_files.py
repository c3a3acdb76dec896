"""What a run may read and where it may write (mhaaudit.files): regular files only, inside the folder
named, within bounds; outputs compared with inputs by device and inode."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from mhaaudit import files
from mhaaudit.errors import DataError, InputError, ModelError


@pytest.fixture()
def bind_mount(tmp_path):
    """A function making ``target`` a bind mount of ``source`` (needs root and mount; skipped elsewhere)."""
    mounted = []

    def mount(source, target):
        target.mkdir()
        if (
            os.geteuid() != 0
            or subprocess.run(
                ["mount", "--bind", str(source), str(target)], capture_output=True, check=False
            ).returncode
        ):
            pytest.skip("cannot bind-mount here")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", str(target)], capture_output=True, check=False)


def test_regular_file_refuses_what_could_block_or_never_end(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    assert files.regular_file(tmp_path / "f.txt", InputError) == tmp_path / "f.txt"
    os.mkfifo(tmp_path / "pipe.npy")
    with pytest.raises(InputError, match=r"pipe.npy is a named pipe \(FIFO\), not a regular file"):
        files.regular_file(tmp_path / "pipe.npy", InputError)
    with pytest.raises(DataError, match="is a character device"):
        files.regular_file("/dev/zero", DataError)
    with pytest.raises(ModelError, match="is a folder"):
        files.regular_file(tmp_path, ModelError)
    with pytest.raises(InputError, match=r"cannot read .*missing"):
        files.regular_file(tmp_path / "missing", InputError)
    (tmp_path / "link").symlink_to("/dev/zero")  # a link is followed: what it leads to counts
    with pytest.raises(InputError, match="character device"):
        files.regular_file(tmp_path / "link", InputError)


def test_read_json_is_bounded(tmp_path, monkeypatch):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"a": 1}))
    assert files.read_json(p, ModelError) == {"a": 1}
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelError, match="nested too deeply"):
        files.read_json(p, ModelError)
    with pytest.raises(ModelError, match="nested too deeply"):  # hostile even when lenient
        files.read_json(p, ModelError, lenient=True)
    p.write_text("{not json")
    with pytest.raises(ModelError, match="is not JSON"):
        files.read_json(p, ModelError)
    assert files.read_json(p, ModelError, lenient=True) is None
    assert files.read_json(tmp_path / "missing.json", ModelError, lenient=True) is None
    monkeypatch.setattr(files, "MAX_JSON_BYTES", 10)
    p.write_text(json.dumps({"a": "0123456789"}))
    with pytest.raises(ModelError, match="more than"):
        files.read_json(p, ModelError, lenient=True)
    with pytest.raises(ModelError, match="character device"):
        files.read_json("/dev/zero", ModelError, lenient=True)


def test_name_inside_refuses_names_leading_out(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.arrow").write_bytes(b"")
    (tmp_path / "outside.arrow").write_bytes(b"")
    (tmp_path / "d" / "out.arrow").symlink_to(tmp_path / "outside.arrow")
    assert files.name_inside(tmp_path / "d", "x.arrow", DataError, "state.json") == (tmp_path / "d" / "x.arrow")
    for name in ("../outside.arrow", str(tmp_path / "outside.arrow"), "out.arrow", ".", "hf://x/y.arrow", ""):
        with pytest.raises(DataError, match=r"state\.json names"):
            files.name_inside(tmp_path / "d", name, DataError, "state.json")


def _tree(tmp_path):
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "x.png").write_bytes(b"1")
    (root / "a" / "y.png").write_bytes(b"2")
    (root / "a" / "b" / "z.txt").write_bytes(b"3")
    (root / ".hidden").mkdir()
    os.mkfifo(root / ".hidden" / "pipe.png")  # never listed: hidden folders are not entered
    (root / "a" / "inner.png").symlink_to(root / "x.png")  # a link inside: listed
    (root / "loop").symlink_to(root)  # a link to a folder is not entered
    return root


def test_folder_files_lists_without_recursion(tmp_path):
    root = _tree(tmp_path)
    found = sorted(p.relative_to(root).as_posix() for p in files.folder_files(root, DataError, "image folder"))
    assert found == ["a/b/z.txt", "a/inner.png", "a/y.png", "x.png"]
    pngs = files.folder_files(root, DataError, "image folder", keep=lambda n: n.endswith(".png"))
    assert sorted(p.name for p in pngs) == ["inner.png", "x.png", "y.png"]
    assert sorted(p.name for p in files.folder_files(root, DataError, "f", depth=0)) == ["x.png"]


def test_folder_files_refuses_links_out_pipes_and_deep_nesting(tmp_path):
    root = _tree(tmp_path)
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"o")
    (root / "a" / "out.png").symlink_to(outside)
    with pytest.raises(DataError, match=r"out.png is a symbolic link to .*outside.png, outside the image folder"):
        files.folder_files(root, DataError, "image folder")
    # a name the caller does not read is not looked at; roots widen where links may lead
    assert files.folder_files(root, DataError, "image folder", keep=lambda n: n.endswith(".txt"))
    assert files.folder_files(root, DataError, "image folder", roots=[str(tmp_path)])
    (root / "a" / "out.png").unlink()
    os.mkfifo(root / "a" / "pipe.png")
    with pytest.raises(DataError, match=r"pipe.png in the image folder .* is a named pipe"):
        files.folder_files(root, DataError, "image folder")
    (root / "a" / "pipe.png").unlink()
    deep = root
    for _ in range(files.MAX_FOLDER_DEPTH + 2):
        deep = deep / "d"
    deep.mkdir(parents=True)
    with pytest.raises(DataError, match=f"nested more than {files.MAX_FOLDER_DEPTH} folders deep"):
        files.folder_files(root, DataError, "image folder")


def test_within_compares_folders_by_device_and_inode(tmp_path, bind_mount):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "img.png").write_bytes(b"x")
    (tmp_path / "alias").symlink_to(data)
    other = tmp_path / "other"
    other.mkdir()
    assert files.within(data / "img.png", data) and files.within(data / "new.png", data)
    assert files.within(data, data) and files.within(data / "sub" / "deeper" / "x", data)
    assert files.within(tmp_path / "alias" / "new.png", data)  # another path, the same folder
    assert not files.within(other / "x.png", data) and not files.within(tmp_path / "x.png", data)
    assert files.first_name_under(data / "sub" / "x", data) == "sub"
    assert files.first_name_under(other / "x", data) is None
    mnt = bind_mount(data, tmp_path / "mnt")
    assert files.within(mnt / "img.png", data) and files.within(mnt / "sub" / "y", data)
    assert files.first_name_under(mnt / "sub" / "y", data) == "sub"


def test_same_place(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"x")
    os.link(tmp_path / "a.parquet", tmp_path / "hard.parquet")
    (tmp_path / "d").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "d")
    assert files.same_place(tmp_path / "a.parquet", tmp_path / "hard.parquet")  # a hard link is the same file
    assert files.same_place(tmp_path / "d" / "new", tmp_path / "alias" / "new")  # not yet there: same folder, name
    assert files.same_place(tmp_path / "x", tmp_path / "d" / ".." / "x")
    assert not files.same_place(tmp_path / "d" / "new", tmp_path / "d" / "other")


def test_a_link_into_a_folder_lies_inside_it(tmp_path):
    """An output given as a symbolic link to a folder inside ``data`` (or to a place in it not made yet) is
    where the link leads: inside ``data``."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (tmp_path / "to-sub").symlink_to(data / "sub")
    (tmp_path / "to-new").symlink_to(data / "new")
    (tmp_path / "to-data").symlink_to(data)
    assert files.within(tmp_path / "to-sub", data) and files.within(tmp_path / "to-new", data)
    assert files.within(tmp_path / "to-data", data)
    assert not files.within(tmp_path / "to-sub", tmp_path / "elsewhere")


def test_special_kind_names_what_an_output_must_not_replace(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "p")
    (tmp_path / "to-p").symlink_to(tmp_path / "p")
    (tmp_path / "to-f").symlink_to(tmp_path / "f")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    for name in ("f", "d", "to-f", "dangling", "missing"):
        assert files.special_kind(tmp_path / name) is None, name
    assert files.special_kind(tmp_path / "p") == "a named pipe (FIFO)"
    assert files.special_kind(tmp_path / "to-p") == f"a symbolic link to a named pipe (FIFO) ({tmp_path / 'p'})"
    assert files.special_kind("/dev/null") == "a character device"


# --------------------------------------------------------------------------- parquet files


def _repeated(path, rows: int = 100_000, width: int = 100, **extra):
    """A parquet file of one string of ``width`` characters repeated on ``rows`` rows (dictionary-encoded, as
    ``pq.write_table`` writes text: a few KB on disk) beside float32 zeros."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"s": pa.array(["x" * width] * rows), "v": np.zeros(rows, np.float32), **extra})
    pq.write_table(table, path)
    return table


def test_parquet_need_counts_dictionary_text_row_by_row(tmp_path):
    """A string repeated through one dictionary entry decodes to one copy a row: the footer's uncompressed sizes
    (what was counted before) are a few KB, the read takes rows x (width + offsets)."""
    import pyarrow.parquet as pq

    _repeated(tmp_path / "r.parquet")
    footer = pq.ParquetFile(tmp_path / "r.parquet").metadata
    packed = sum(
        footer.row_group(g).column(c).total_uncompressed_size
        for g in range(footer.num_row_groups)
        for c in range(footer.num_columns)
    )
    need, words = files.parquet_need(tmp_path / "r.parquet")
    read = pq.read_table(tmp_path / "r.parquet").nbytes
    assert packed < 100_000 < 100_000 * 100 <= read <= need <= 3 * read
    assert "declares 100000 rows of 2 columns" in words and "dictionary-encoded text decodes to at least" in words
    only_v, _ = files.parquet_need(tmp_path / "r.parquet", ["v"])
    assert 400_000 <= only_v < 1_000_000  # the text column is not read, so not counted
    python, _ = files.parquet_need(tmp_path / "r.parquet", python=True)
    assert python >= need + 2 * 100_000 * files.PYTHON_VALUE_BYTES


@pytest.mark.parametrize(
    "column",
    [
        ["a", None, "bcd"] * 1000,
        [["ab", "cd"], None, []] * 1000,
        [{"k": "x" * 50, "n": 1}, None, {"k": None, "n": 2}] * 1000,
        [f"distinct {i}" for i in range(3000)],
        [b"\x00" * 300, None, b"y"] * 1000,
    ],
    ids=["text-nulls", "list-of-text", "struct", "distinct", "binary"],
)
def test_parquet_need_bounds_what_a_read_takes(tmp_path, column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"c": pa.array(column)}), tmp_path / "c.parquet", row_group_size=700)
    need, _ = files.parquet_need(tmp_path / "c.parquet")
    read = pq.read_table(tmp_path / "c.parquet").nbytes
    assert read <= need <= 8 * read + 100_000


def test_a_name_read_dictionary_cannot_take_is_counted_conservatively(tmp_path):
    """A top-level column ``a.b`` beside a struct ``a`` with a field ``b``: read_dictionary cannot tell them apart
    by name, so the text of ``a.b`` counts as long as its chunk on every row, never less than a read takes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a.b": ["y" * 100] * 1000, "a": [{"b": "z" * 50}] * 1000}), tmp_path / "d.parquet")
    need, _ = files.parquet_need(tmp_path / "d.parquet", ["a.b"])
    chunk = pq.ParquetFile(tmp_path / "d.parquet").metadata.row_group(0).column(0)
    assert need >= 1000 * chunk.total_uncompressed_size
    struct = pq.read_table(tmp_path / "d.parquet", columns=["a"]).nbytes
    assert files.parquet_need(tmp_path / "d.parquet", ["a"])[0] >= struct


def test_read_parquet_refuses_before_reading(tmp_path, monkeypatch):
    """A 10 MB limit: the file (a few KB, 10 MB of text once read) is refused in one line naming it, what it
    would take and the limit, before a row is decoded; a file that fits is read."""
    import pyarrow.parquet as pq

    table = _repeated(tmp_path / "r.parquet")
    monkeypatch.setattr(files, "memory_limit", lambda: 10_000_000)
    real = pq.read_table

    def trap(*a, **k):
        raise AssertionError("read before it was sized")

    monkeypatch.setattr(pq, "read_table", trap)
    with pytest.raises(InputError) as e:
        files.read_parquet(tmp_path / "r.parquet", InputError, hint="try less")
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{tmp_path / 'r.parquet'}: reading it needs at least ")
    assert "more than the 10.0 MB available; try less" in line and "declares 100000 rows" in line
    with pytest.raises(InputError, match="is a folder"):
        files.read_parquet(tmp_path, InputError)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(InputError, match="cannot read it as a parquet file"):
        files.read_parquet(tmp_path / "bad.parquet", InputError)
    monkeypatch.setattr(pq, "read_table", real)
    assert files.read_parquet(tmp_path / "r.parquet", InputError, columns=["v"]).column_names == ["v"]
    monkeypatch.setattr(files, "memory_limit", lambda: 1 << 40)
    assert files.read_parquet(tmp_path / "r.parquet", InputError).equals(table)


def test_stream_column_sizes_each_batch_before_decoding_it(tmp_path, monkeypatch):
    """``--data``'s columns are read 256 rows at a time: a batch of a 100 KB string repeated (a few KB on disk,
    25 MB decoded, twice over as Python values) is refused; shorter rows stream, values as a plain read gives."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _repeated(tmp_path / "r.parquet", rows=600, width=100_000)
    monkeypatch.setattr(files, "memory_limit", lambda: 20_000_000)
    with pytest.raises(DataError) as e:
        next(files.stream_column(tmp_path / "r.parquet", "s", DataError, "parquet file r.parquet"))
    assert str(e.value).startswith("parquet file r.parquet: 256 rows of its column 's' decode to ")
    assert "more than the 20.0 MB available" in str(e.value)
    column = [{"bytes": b"z" * 30, "path": None}, None, {"bytes": None, "path": "p.png"}] * 300
    pq.write_table(pa.table({"image": column, "text": ["t"] * 900}), tmp_path / "ok.parquet", row_group_size=500)
    assert list(files.stream_column(tmp_path / "ok.parquet", "image", DataError)) == column
    assert list(files.stream_column(tmp_path / "ok.parquet", "text", DataError)) == ["t"] * 900


def test_stream_column_refuses_a_chunk_larger_than_memory(tmp_path, monkeypatch):
    """A page is decompressed whole: a row group's chunk declaring more than the memory available is refused
    before a page is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"t": [f"row {i}" for i in range(50_000)]}), tmp_path / "t.parquet")
    monkeypatch.setattr(files, "memory_limit", lambda: 100_000)
    with pytest.raises(DataError, match=r"t.parquet: reading its column 't' needs at least .*a row group's chunks"):
        next(files.stream_column(tmp_path / "t.parquet", "t", DataError))


def _groups(path, sizes, rows: int = 200):
    """A parquet file of one row group per entry of ``sizes``, each repeating one string of that many characters
    on ``rows`` rows (dictionary-encoded: a few KB on disk, rows x size bytes once read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        for size in sizes:
            writer.write_table(pa.table({"text": ["y" * size] * rows}))


def test_the_largest_row_group_is_counted_alone(tmp_path, monkeypatch):
    """A reader that reads a row group at a time needs what the largest row group takes, not the whole file: the
    words name that row group, and a file larger than memory whose row groups each fit is not refused."""
    import pyarrow.parquet as pq

    _groups(tmp_path / "g.parquet", [100, 50_000, 100, 100])
    whole, _ = files.parquet_need(tmp_path / "g.parquet")
    group, words = files.parquet_need(tmp_path / "g.parquet", largest_group=True)
    read = pq.ParquetFile(tmp_path / "g.parquet").read_row_group(1).nbytes
    assert 200 * 50_000 <= read <= group < whole <= group + 3 * 200 * 1000
    assert words.startswith("its row group 1 (of 4) declares 200 rows of 1 columns, its dictionary-encoded text")
    _groups(tmp_path / "many.parquet", [5_000] * 20)  # 20 MB once read, 1 MB a row group
    monkeypatch.setattr(files, "memory_limit", lambda: 10_000_000)
    with pytest.raises(DataError, match=r"many\.parquet: reading it needs at least .* footer declares 4000 rows"):
        files.check_parquet(tmp_path / "many.parquet", DataError)
    files.check_parquet(tmp_path / "many.parquet", DataError, factor=2, largest_group=True)  # read a group at a time
    with pytest.raises(DataError) as e:
        files.check_parquet(tmp_path / "g.parquet", DataError, "g", factor=2, largest_group=True, hint="why")
    line = str(e.value)
    assert line.startswith("g: reading it a row group at a time needs at least 2") and "\n" not in line
    assert "(its row group 1 (of 4) declares 200 rows" in line and line.endswith("more than the 10.0 MB available; why")


@pytest.mark.parametrize(
    "n, words",
    [(0, "0 bytes"), (999, "999 bytes"), (1000, "1.0 kB"), (4096, "4.1 kB"), (60_000, "60.0 kB"), (99_949, "99.9 kB"),
     (99_950, "0.1 MB"), (99_999, "0.1 MB"), (100_000, "0.1 MB"), (4_000_000, "4.0 MB"), (999_949_999, "999.9 MB"),
     (999_950_000, "1.00 GB"), (999_999_999, "1.00 GB"), (2_560_000_000, "2.56 GB")],
)  # fmt: skip
def test_sizes_in_words_never_round_to_nothing(n, words):
    """A size in an error's words is in the unit it reads in: a few kilobytes never read "0.0 MB", and a figure that
    rounds up to the next unit is written in it ("0.1 MB", never "100.0 kB")."""
    assert files.size_words(n) == words
