"""A local dataset folder read by the ``datasets`` library's XML, image-folder and webdataset readers is sized before
it is read (``sources.folder_checks``, ``sources.shard_checks``), as those readers hold their files: an XML file
whole, an image folder's ``metadata.jsonl`` a line and ``metadata.csv`` 10000 rows at once, and a webdataset example's
members whole. The memory available is made small here (``files.memory_limit``) so that small files exceed it; a
refusal is one line and exit 2, before the library reads a byte of the data."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile

import pytest
from clitools import assert_one_error, run

datasets = pytest.importorskip("datasets")
pytest.importorskip("transformers")

ARGS = ("--limit", "20", "--samples", "20", "--context-length", "16")


@pytest.fixture
def small_memory(monkeypatch):
    """8 MB of memory available: 2 MB held at once at most."""
    from mhaaudit import files

    monkeypatch.setattr(files, "memory_limit", lambda: 8_000_000)


@pytest.fixture
def unread(monkeypatch):
    """The datasets library may not read the folder's data: building its stream fails the test."""

    def trap(*a, **k):
        raise AssertionError("the dataset was read before it was sized")

    monkeypatch.setattr(datasets.builder.DatasetBuilder, "as_streaming_dataset", trap)


def test_an_xml_data_file_is_sized_whole(small_memory, unread, capsys, bert_dir, tmp_path):
    """The XML reader reads each file whole (decompressed, in text mode): an ``.xml.gz`` of a few KB holding 3 MB is
    refused before it is read, naming the file and the limit; so is a plain ``.xml`` of 3 MB and a zip holding one;
    an XML file of 1 MB is not refused for its size."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    big = tmp_path / "big"
    big.mkdir()
    with gzip.open(big / "a.xml.gz", "wt") as f:
        f.write("<a>" + "z" * 3_000_000 + "</a>\n")
    assert (big / "a.xml.gz").stat().st_size < 20_000
    rc, out, err = run(capsys, "check", bert_dir, "--data", f"hf:{big}", *ARGS)
    line = assert_one_error(rc, err, f"dataset folder {big}: its data file {big / 'a.xml.gz'} (split train): reading")
    assert "reading it, decompressed (gzip), holds at least 2.1 MB at once (all of it, at least 2.1 MB" in line
    assert line.endswith("more than the 2.0 MB allowed (a quarter of the 8.0 MB available); the datasets library "
                         "reads it whole") and out == ""  # fmt: skip
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.xml").write_text("<a>" + "z" * 3_000_000 + "</a>\n")
    with pytest.raises(
        DataError, match=r"a\.xml \(split train\): reading it holds at least 2\.\d MB .* reads it whole$"
    ):
        text_source(f"hf:{plain}")
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    with zipfile.ZipFile(zipped / "a.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.xml", "<a>" + "z" * 3_000_000 + "</a>\n")
    assert datasets.load_dataset_builder(str(zipped)).__class__.__name__.startswith("Xml")
    with pytest.raises(
        DataError, match=r"a\.zip \(split train\) \(its member a\.xml\): reading it, decompressed \(zip\)"
    ):
        text_source(f"hf:{zipped}")
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "a.xml").write_text("<a>" + "z" * 1_000_000 + "</a>\n")
    from mhaaudit.sources import folder_checks

    builder = datasets.load_dataset_builder(str(ok))
    folder_checks.check_dataset_folder(str(ok), builder, "train")  # within the limit: no refusal


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, "PNG")
    return out.getvalue()


def _memory(monkeypatch, nbytes: int) -> None:
    from mhaaudit import files

    monkeypatch.setattr(files, "memory_limit", lambda: nbytes)


def test_an_image_folders_metadata_jsonl_is_sized_by_its_longest_line(monkeypatch, unread, capsys, vit_dir, tmp_path):
    """The image folder reader reads ``metadata.jsonl`` 10 MB at a time and the rest of the line: one of 3 MB in one
    line is refused before it is read (12 MB allowed: a batch and that line pass it), naming the file and the line;
    so is one of 60 MB in one line inside a zip archive of the folder (a few KB deflated: the archive's files are read
    decompressed). The same records one a line pass."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import image_source

    _memory(monkeypatch, 48_000_000)
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "x.png").write_bytes(_png())
    (folder / "metadata.jsonl").write_text(json.dumps({"file_name": "x.png", "note": "z" * 3_000_000}) + "\n")
    rc, out, err = run(capsys, "check", vit_dir, "--data", f"hf:{folder}", "--limit", "20", "--samples", "20")
    line = assert_one_error(rc, err, f"its data file {folder / 'metadata.jsonl'} (split train): reading it holds at")
    assert (
        "(its longest line, at least 2.1 MB: the scan stopped after 2.1 MB read, after a batch of 10.5 MB), more "
        "than the 12.0 MB allowed" in line
    )
    assert line.endswith("the datasets library reads a line whole") and out == ""
    short = tmp_path / "short"
    short.mkdir()
    (short / "x.png").write_bytes(_png())
    record = json.dumps({"file_name": "x.png", "note": "z" * 100}) + "\n"
    (short / "metadata.jsonl").write_text(record * 30_000)  # 3.5 MB: larger than the plain file's shortcut
    from mhaaudit.sources import folder_checks

    folder_checks.check_dataset_folder(str(short), datasets.load_dataset_builder(str(short)), "train")
    _memory(monkeypatch, 200_000_000)
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    with zipfile.ZipFile(zipped / "train.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(3):  # more images than metadata: the folder is an image folder
            z.writestr(f"x{i}.png", _png())
        z.writestr("metadata.jsonl", json.dumps({"file_name": "x0.png", "note": "z" * 60_000_000}) + "\n")
    assert (zipped / "train.zip").stat().st_size < 200_000
    assert isinstance(datasets.load_dataset_builder(str(zipped)), datasets.packaged_modules.imagefolder.ImageFolder)
    with pytest.raises(DataError, match=r"train\.zip \(split train\) \(its member 'metadata\.jsonl'\): reading it, "
                       r"decompressed \(zip\), holds at least 5\d\.\d MB at once \(its longest line"):  # fmt: skip
        image_source(f"hf:{zipped}")


def test_an_image_folders_metadata_csv_is_sized_by_its_rows(small_memory, unread, capsys, tmp_path):
    """The image folder reader reads ``metadata.csv`` with pandas 10000 rows at a time, a quoted field's newlines
    inside its row: one row of 3 MB of short lines in quotes is refused before it is read (2 MB allowed); the
    metadata of another split is sized too (the library reads the first rows of each to find the features), and so
    is a ``metadata.parquet`` of another split, row group by row group. Short rows pass."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mhaaudit.errors import DataError
    from mhaaudit.sources import folder_checks, image_source

    def folder(name: str, note: str, split: str = "train"):
        (tmp_path / name / split).mkdir(parents=True)
        (tmp_path / name / split / "x.png").write_bytes(_png())
        (tmp_path / name / split / "metadata.csv").write_text(f'file_name,note\nx.png,"{note}"\n')
        return tmp_path / name

    rows = folder("rows", ("z" * 59 + "\n") * 50_000)
    assert isinstance(datasets.load_dataset_builder(str(rows)), datasets.packaged_modules.imagefolder.ImageFolder)
    with pytest.raises(DataError, match=r"metadata\.csv \(split train\): reading it holds at least 2\.\d MB at once "
                       r"\(its most bytes in 10000 consecutive rows, .* reads 10000 rows at once$"):  # fmt: skip
        image_source(f"hf:{rows}")
    other = folder("other", "short")
    (other / "test").mkdir()
    (other / "test" / "x.png").write_bytes(_png())
    (other / "test" / "metadata.csv").write_text('file_name,note\nx.png,"' + "z" * 3_000_000 + '"\n')
    with pytest.raises(DataError, match=r"metadata\.csv \(split test\): reading it holds at least 2\.\d MB"):
        image_source(f"hf:{other}")
    ok = folder("ok", "short")
    folder_checks.check_dataset_folder(str(ok), datasets.load_dataset_builder(str(ok)), "train")
    parquet = tmp_path / "parquet"
    for split in ("train", "test"):
        (parquet / split).mkdir(parents=True)
        (parquet / split / "x.png").write_bytes(_png())
    pq.write_table(pa.table({"file_name": ["x.png"], "note": ["short"]}), parquet / "train" / "metadata.parquet")
    pq.write_table(
        pa.table({"file_name": ["x.png"] * 3, "note": ["z" * 2_000_000] * 3}), parquet / "test" / "metadata.parquet"
    )
    with pytest.raises(DataError, match=r"test/metadata\.parquet \(split test\): reading it a row group at a time"):
        image_source(f"hf:{parquet}")


def _shard(path, members, mode: str = "w"):
    """A tar shard at ``path`` holding ``members``: (name, bytes), or (name, TarInfo type, link target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tar:
        for name, *rest in members:
            info = tarfile.TarInfo(name)
            if len(rest) == 1:  # a regular file's bytes
                info.size = len(rest[0])
                tar.addfile(info, io.BytesIO(rest[0]))
            else:
                info.type, info.linkname = rest
                tar.addfile(info)
    return path.parent


def test_a_webdataset_example_is_sized_from_the_tar_headers(small_memory, unread, capsys, bert_dir, tmp_path):
    """The webdataset reader reads a shard member by member, each whole, and holds an example (the members of one
    key) whole: a member of 3 MB, or two of 1.5 MB of one key, is refused before it is read, naming the shard and
    the example (2 MB allowed); so is one in a gzip-compressed shard (a few KB), and a ``.gz`` member decompressing to
    3 MB, and a member of a zip shard. Short members of many keys pass."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import folder_checks, text_source

    big = _shard(tmp_path / "big" / "s0.tar", [("k1.txt", b"short"), ("k2.txt", b"z" * 3_000_000)])
    rc, out, err = run(capsys, "check", bert_dir, "--data", f"hf:{big}", "--text-column", "txt", *ARGS)
    line = assert_one_error(rc, err, f"dataset folder {big}: its data file {big / 's0.tar'} (split train): its example")
    assert "its example 'k2' holds at least 3.0 MB at once (its member as the shard's headers declare them" in line
    assert line.endswith("more than the 2.0 MB allowed (a quarter of the 8.0 MB available); the datasets library "
                         "reads an example's members whole") and out == ""  # fmt: skip
    pair = _shard(tmp_path / "pair" / "s0.tar", [("k1.txt", b"z" * 1_500_000), ("k1.bin", b"1" * 1_500_000)])
    with pytest.raises(DataError, match=r"its example 'k1' holds at least 3\.0 MB at once \(its 2 members as"):
        text_source(f"hf:{pair}")
    packed = _shard(tmp_path / "gz" / "s0.tar.gz", [("k1.txt", b"short"), ("k2.txt", b"z" * 3_000_000)], "w:gz")
    assert (packed / "s0.tar.gz").stat().st_size < 20_000
    with pytest.raises(DataError, match=r"s0\.tar\.gz \(split train\): its example 'k2' holds at least 3\.0 MB"):
        text_source(f"hf:{packed}")
    member = _shard(
        tmp_path / "member" / "s0.tar", [("k1.txt", b"short"), ("k2.txt.gz", gzip.compress(b"z" * 3_000_000))]
    )
    with pytest.raises(DataError, match=r"its example 'k2' holds at least 2\.\d MB at once \(its member as"):
        text_source(f"hf:{member}")
    zipped = _shard(tmp_path / "zip" / "s0.tar", [("k0.txt", b"short")])
    _shard(zipped / "s1.tar", [("k1.txt", b"short")])
    with zipfile.ZipFile(zipped / "s2.zip", "w", zipfile.ZIP_DEFLATED) as z:  # a zip shard: its central directory
        z.writestr("k2.txt", "z" * 3_000_000)
    assert isinstance(datasets.load_dataset_builder(str(zipped)), datasets.packaged_modules.webdataset.WebDataset)
    with pytest.raises(DataError, match=r"s2\.zip \(split train\): its example 'k2' holds at least 3\.0 MB at once"):
        text_source(f"hf:{zipped}")
    ok = _shard(tmp_path / "ok" / "s0.tar", [(f"k{i}.txt", b"z" * 100_000) for i in range(40)])  # 4 MB in all
    folder_checks.check_dataset_folder(str(ok), datasets.load_dataset_builder(str(ok)), "train")
    from mhaaudit.sources import shard_checks

    shard_checks.size_shards(str(ok), datasets.load_dataset_builder(str(ok)), "train")


def test_a_webdatasets_first_examples_are_sized_together(small_memory, unread, tmp_path):
    """To find the features the webdataset reader holds the first 5 examples of a shard at once: 5 of 600 KB are
    refused (2 MB allowed) where 5 of 300 KB pass; the first shard of the last split, which the reader finds the
    features from, is sized too, over its first examples, and that of another split only when it is read."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import shard_checks

    five = _shard(tmp_path / "five" / "s0.tar", [(f"k{i}.txt", b"z" * 600_000) for i in range(5)])
    with pytest.raises(DataError, match=r"s0\.tar \(split train\): its first 4 examples hold at least 2\.4 MB at once "
                       r".* reads the first 5 examples of a shard at once to find the features$"):  # fmt: skip
        shard_checks.size_shards(str(five), datasets.load_dataset_builder(str(five)), "train")
    ok = _shard(tmp_path / "ok" / "train" / "s0.tar", [(f"k{i}.txt", b"z" * 300_000) for i in range(8)]).parent
    shard_checks.size_shards(str(ok), datasets.load_dataset_builder(str(ok)), "train")
    _shard(tmp_path / "ok" / "test" / "s0.tar", [(f"k{i}.txt", b"z" * 600_000) for i in range(5)])
    with pytest.raises(DataError, match=r"test/s0\.tar \(split test\): its first 4 examples hold"):
        shard_checks.size_shards(str(ok), datasets.load_dataset_builder(str(ok)), "train")
    # the reader finds the features from the first shard of the last split it is given (train, validation, test):
    # validation's first examples are never held together when test is read, only when validation is
    mixed = tmp_path / "mixed"
    for split, size in (("train", 300_000), ("validation", 600_000), ("test", 300_000)):
        _shard(mixed / split / "s0.tar", [(f"k{i}.txt", b"z" * size) for i in range(5)])
    assert list(datasets.load_dataset_builder(str(mixed)).config.data_files) == ["train", "validation", "test"]
    shard_checks.size_shards(str(mixed), datasets.load_dataset_builder(str(mixed)), "test")
    with pytest.raises(DataError, match=r"validation/s0\.tar \(split validation\): its first 4 examples hold"):
        shard_checks.size_shards(str(mixed), datasets.load_dataset_builder(str(mixed)), "validation")


def _npz(nbytes: int) -> bytes:
    """A deflated ``.npz`` file of one array of ``nbytes`` zeros: a few KB that ``numpy.load`` makes ``nbytes``."""
    np = pytest.importorskip("numpy")
    out = io.BytesIO()
    np.savez_compressed(out, a=np.zeros(nbytes, dtype=np.uint8))
    return out.getvalue()


def test_a_webdataset_reader_that_decompresses_through_file_systems_is_counted_as_decompressing(monkeypatch):
    """datasets up to 5.0 decompresses a ``.gz`` (``.bz2``, ``.xz``...) member through its compression file systems,
    named in the reader's module, not by the table of decompressors that later releases keep: the sizing counts the
    member decompressed there too, and a reader that names neither decompresses nothing."""
    import bz2

    from datasets import filesystems
    from datasets.packaged_modules.webdataset import webdataset as reader

    from mhaaudit.sources import shard_checks

    monkeypatch.delattr(filesystems, "EXTENSION_TO_COMPRESSION_FS_FILE_CLS", raising=False)
    table = {"gz": "gzip", "bz2": "bz2"}  # the reader module's suffixes and their file systems' protocols
    monkeypatch.setattr(reader, "SINGLE_FILE_COMPRESSION_EXTENSION_TO_PROTOCOL", table, raising=False)
    found = shard_checks._member_decompressors()
    assert found[".gz"](io.BytesIO(gzip.compress(b"abc")), mode="rb").read() == b"abc"
    assert found[".bz2"](io.BytesIO(bz2.compress(b"abc")), mode="rb").read() == b"abc"
    monkeypatch.delattr(reader, "SINGLE_FILE_COMPRESSION_EXTENSION_TO_PROTOCOL")
    assert shard_checks._member_decompressors() == {}


def test_a_webdatasets_decoded_members_are_counted_as_they_decode(small_memory, unread, monkeypatch, tmp_path):
    """The webdataset reader decodes a member by its extension, and its value can take far more than its bytes: a
    deflated ``.npz`` of 4 MB of arrays (a few KB; in a zip shard, a gzip-compressed tar, a ``.gz`` member too), a
    ``.npy`` whose header declares 4 MB, a ``.pth`` whose zip records declare 4 MB, 100 KB of JSON (at 48 times) are
    refused, naming the member and what it declares decoded (2 MB allowed); a small ``.npz`` and 100 KB of text
    pass, and so does the large ``.npz`` where the reader's version decodes no ``.npz``."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import shard_checks

    def size(folder):
        shard_checks.size_shards(str(folder), datasets.load_dataset_builder(str(folder)), "train")

    npz = _npz(4_000_000)
    assert len(npz) < 20_000
    declared = r"counted at 4\.0 MB decoded: the arrays its zip directory declares\), more than the 2\.0 MB allowed"
    plain = _shard(tmp_path / "npz" / "s0.tar", [("k1.txt", b"short"), ("k2.txt", b"short"), ("k2.npz", npz)])
    with pytest.raises(DataError, match=r"s0\.tar \(split train\): its example 'k2' holds at least 4\.0 MB at once "
                       r"\(its 2 members as .*; its member 'k2\.npz' " + declared):  # fmt: skip
        size(plain)
    packed = _shard(tmp_path / "npzgz" / "s0.tar.gz", [("k1.txt", b"short"), ("k1.npz", npz)], "w:gz")
    with pytest.raises(DataError, match=r"s0\.tar\.gz \(split train\): its example 'k1' .*'k1\.npz' " + declared):
        size(packed)
    member = _shard(tmp_path / "member" / "s0.tar", [("k1.txt", b"short"), ("k1.npz.gz", gzip.compress(npz))])
    with pytest.raises(DataError, match=r"its member 'k1\.npz\.gz' " + declared):
        size(member)
    zipped = _shard(tmp_path / "zip" / "s0.tar", [("k0.txt", b"short")])
    _shard(zipped / "s1.tar", [("k1.txt", b"short")])  # (a folder of zip shards alone is no webdataset one)
    with zipfile.ZipFile(zipped / "s2.zip", "w") as z:
        z.writestr("k1.txt", "short")
        z.writestr("k1.npz", npz)
    with pytest.raises(DataError, match=r"s2\.zip \(split train\): .*its member 'k1\.npz' " + declared):
        size(zipped)
    header = io.BytesIO()
    np = pytest.importorskip("numpy")
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1_000_000,)})
    npy = _shard(tmp_path / "npy" / "s0.tar", [("k1.txt", b"short"), ("k1.npy", header.getvalue() + b"\0" * 64)])
    with pytest.raises(DataError, match=r"its member 'k1\.npy' counted at 4\.0 MB decoded: the array its header"):
        size(npy)
    records = io.BytesIO()
    with zipfile.ZipFile(records, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02.")
        z.writestr("archive/data/0", b"\0" * 4_000_000)
    pth = _shard(tmp_path / "pth" / "s0.tar", [("k1.txt", b"short"), ("k1.pth", records.getvalue())])
    with pytest.raises(DataError, match=r"its member 'k1\.pth' counted at 4\.0 MB decoded: its zip records as"):
        size(pth)
    text = json.dumps([[0]] * 25_000, separators=(",", ":")).encode()  # 100 KB
    tree = _shard(tmp_path / "json" / "s0.tar", [("k1.txt", b"short"), ("k1.json", text)])
    with pytest.raises(DataError, match=r"its member 'k1\.json' counted at 4\.8 MB decoded: JSON at 48 times its"):
        size(tree)
    size(_shard(tmp_path / "ok" / "s0.tar", [("k1.txt", b"z" * 100_000), ("k1.npz", _npz(400_000))]))
    monkeypatch.setattr(datasets.packaged_modules.webdataset.WebDataset, "DECODERS", {"txt": bytes.decode})
    size(plain)


def test_a_webdatasets_links_and_odd_names_are_neither_followed_nor_refused(small_memory, tmp_path):
    """The webdataset reader reads only a shard's regular members (a link or device member is skipped, never followed)
    and writes no file, so a member's absolute or ``..`` name is only a key: a shard holding a link to
    ``/etc/passwd``, a hard link, a device, and members named ``/abs/k4.txt`` and ``../up/k5.txt`` is read as the
    library reads it, its regular members only; a shard that is no tar archive is refused in one line."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    odd = _shard(
        tmp_path / "odd" / "s0.tar",
        [
            ("k1.txt", b"first"),
            ("k2.txt", tarfile.SYMTYPE, "/etc/passwd"),
            ("k3.txt", tarfile.LNKTYPE, "k1.txt"),
            ("k6.txt", tarfile.CHRTYPE, ""),
            ("/abs/k4.txt", b"absolute"),
            ("../up/k5.txt", b"up"),
        ],
    )
    assert list(text_source(f"hf:{odd}", text_column="txt")) == ["first", "absolute", "up"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "s0.tar").write_bytes(b"no tar archive " * 100)
    with pytest.raises(
        DataError, match=r"s0\.tar \(split train\): cannot read it as the datasets library's webdataset"
    ):
        text_source(f"hf:{bad}")


def test_an_image_folders_metadata_is_sized_under_a_config_without_metadata_names(monkeypatch, tmp_path):
    """A ``datasets`` version whose folder config has no ``metadata_filenames`` (nor ``drop_metadata``) option still
    has its ``metadata.jsonl`` sized, by the reader's own names, not its folder refused for the missing option."""
    from types import SimpleNamespace

    from mhaaudit.errors import DataError
    from mhaaudit.sources import folder_checks

    _memory(monkeypatch, 48_000_000)
    (tmp_path / "x.png").write_bytes(_png())
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"file_name": "x.png", "note": "z" * 3_000_000}) + "\n")
    builder = datasets.load_dataset_builder(str(tmp_path))
    builder.config = SimpleNamespace(data_files=builder.config.data_files)
    with pytest.raises(DataError, match=r"metadata\.jsonl \(split train\): reading it holds at least 12\.\d MB"):
        folder_checks.check_dataset_folder(str(tmp_path), builder, "train")


def test_an_image_folders_metadata_parquet_in_an_archive_is_sized_by_its_row_groups(small_memory, unread, tmp_path):
    """The image folder reader reads a ``metadata.parquet`` inside a zip archive of the folder a row group at a time,
    as one outside: a row group of 3 values of 2 MB (dictionary-encoded: one entry, decoded once a row) is refused
    before it is read, naming the archive, its member and the row group (twice it must fit 8 MB); a small one
    passes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mhaaudit.errors import DataError
    from mhaaudit.sources import folder_checks, image_source

    def folder(name: str, notes: list[str]):
        table = io.BytesIO()
        pq.write_table(pa.table({"file_name": ["x0.png"] * len(notes), "note": notes}), table)
        (tmp_path / name).mkdir()
        with zipfile.ZipFile(tmp_path / name / "train.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for i in range(3):
                z.writestr(f"x{i}.png", _png())
            z.writestr("metadata.parquet", table.getvalue())
        builder = datasets.load_dataset_builder(str(tmp_path / name))
        assert isinstance(builder, datasets.packaged_modules.imagefolder.ImageFolder)
        return tmp_path / name, builder

    big, _ = folder("big", ["z" * 2_000_000] * 3)
    words = r"\(its member 'metadata\.parquet'\): reading it a row group at a time needs at least .* \(its row group 0 "
    with pytest.raises(DataError, match=r"train\.zip \(split train\) " + words + r"\(of 1\) declares 3 rows"):
        image_source(f"hf:{big}")
    ok, builder = folder("ok", ["short"] * 3)
    folder_checks.check_dataset_folder(str(ok), builder, "train")


def test_a_webdatasets_shards_past_the_examples_read_are_sized_as_the_reader_opens_them(small_memory, tmp_path):
    """Only the shards that hold the first examples asked for are sized before the reader is made; each later one is
    sized as the reader opens it, before it reads a member: 3 images of a folder whose second shard is no tar archive
    are read (the second shard never opened), where 50 are refused naming it; an example too large in a later shard
    is refused as that shard is opened, in the same words as before any work."""
    from mhaaudit.errors import DataError
    from mhaaudit.sources import image_source, shard_checks

    folder = _shard(tmp_path / "wds" / "s0.tar", [(f"a{i:02d}.png", _png()) for i in range(40)])
    (folder / "s1.tar").write_bytes(b"no tar archive " * 100)
    opened = []
    sized = shard_checks._size_shard
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shard_checks, "_size_shard", lambda folder, name, *a, **k: opened.append(name) or sized(
            folder, name, *a, **k))  # fmt: skip
        assert len(list(image_source(f"hf:{folder}", limit=3))) == 3  # (read ahead: at most 32 images)
    assert opened == [str(folder / "s0.tar")]
    with pytest.raises(DataError, match=r"s1\.tar \(split train\): cannot read it as the datasets library's webdata"):
        list(image_source(f"hf:{folder}", limit=50))
    late = _shard(tmp_path / "late" / "s0.tar", [("k1.txt", b"short"), ("k2.txt", b"short")])
    _shard(late / "s1.tar", [("k3.txt", b"short"), ("k4.txt", b"z" * 3_000_000)])
    builder = datasets.load_dataset_builder(str(late))
    shard_checks.size_shards(str(late), builder, "train", 2)  # the first shard holds the 2 examples: s1 is not read
    rows = iter(builder.as_streaming_dataset(split="train"))
    assert [next(rows)["__key__"] for _ in range(2)] == ["k1", "k2"]
    with pytest.raises(DataError, match=r"s1\.tar \(split train\): its example 'k4' holds at least 3\.0 MB at once"):
        next(rows)  # s1 is sized as the reader opens it, before it reads k3
    with pytest.raises(DataError, match=r"s1\.tar \(split train\): its example 'k4' holds at least 3\.0 MB at once"):
        shard_checks.size_shards(str(late), datasets.load_dataset_builder(str(late)), "train")  # all, before work


def test_an_image_folders_tar_archive_is_not_read_for_metadata(tmp_path):
    """The docs say metadata inside a ``.tar`` archive of an image folder needs no sizing: the library opens only a
    folder's ``.zip`` archives. A ``.tar`` (plain or gzip-compressed) beside the images, holding a ``metadata.jsonl``
    that is no JSON at all, is read past without a word: the rows are the folder's images, with no column of it (a
    library that began reading it would fail here, and its metadata would need sizing as a zip's is)."""
    for mode, suffix in (("w", ".tar"), ("w:gz", ".tar.gz")):
        folder = tmp_path / suffix.strip(".")
        folder.mkdir()
        for i in range(3):
            (folder / f"x{i}.png").write_bytes(_png())
        _shard(folder / f"more{suffix}", [("y.png", _png()), ("metadata.jsonl", b"{no json" * 1000)], mode)
        builder = datasets.load_dataset_builder(str(folder))
        rows = list(builder.as_streaming_dataset(split="train"))
        assert len(rows) == 3 and set(rows[0]) == {"image"}


def test_a_dataset_folders_failure_is_said_in_one_line(bert_dir, tmp_path):
    """The datasets library's JSON reader logs "Failed to load JSON from file ..." before it raises: the command
    says the failure once, in its own error line, and nothing else reaches stderr (run as a process, so that the
    library's log handler writes to the stderr the test reads)."""
    from clitools import run_python

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text('{"text": "a first document of some words"}\n{"text": broken\n')
    got = run_python(
        "import sys; from mhaaudit.cli.app import main; "
        f"sys.exit(main(['check', {str(bert_dir)!r}, '--data', 'hf:{tmp_path}', *{list(ARGS)!r}]))"
    )
    line = assert_one_error(got.returncode, got.stderr, f"reading dataset '{tmp_path}' failed after 0 rows")
    assert "JSON parse error" in line and got.stdout == ""
