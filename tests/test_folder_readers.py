"""A local dataset folder read by the ``datasets`` library's XML, image-folder and webdataset readers is sized before
it is read (``sources.folder_checks``, ``sources.shard_checks``), as those readers hold their files: an XML file
whole, an image folder's ``metadata.jsonl`` a line and ``metadata.csv`` 10000 rows at once, and a webdataset example's
members whole. The memory available is made small here (``files.memory_limit``) so that small files exceed it; a
refusal is one line and exit 2, before the library reads a byte of the data."""

from __future__ import annotations

import gzip
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
