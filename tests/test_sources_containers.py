"""The containers researchers keep data in (save_to_disk folders, Arrow, parquet, .jsonl, .csv,
.tsv), how their columns are found or chosen, and what is skipped and why."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from PIL import Image

from mhaaudit.cli.app import main
from mhaaudit.errors import DataError, InputError
from mhaaudit.sources import (
    FallbackTokenizer,
    bert_pair_examples,
    choose_column,
    gpt_window_examples,
    image_source,
    text_source,
)

datasets = pytest.importorskip("datasets")


def _documents(k: int = 40) -> list[str]:
    rng = np.random.default_rng(3)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
        "nu",
        "xi",
        "omicron",
        "pi",
    ]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(16, 60)))) for _ in range(k)]
    docs[7] = "too short"
    return docs


def _containers(tmp_path, docs: list[str], column: str = "body") -> dict:
    """The same records in every container, one ``column`` of text beside an id column."""
    ids = list(range(len(docs)))
    out = {}
    out["jsonl"] = tmp_path / "docs.jsonl"
    out["jsonl"].write_text("".join(json.dumps({"id": i, column: d}) + "\n" for i, d in zip(ids, docs, strict=False)))
    table = pa.table({"id": ids, column: docs})
    out["parquet"] = tmp_path / "docs.parquet"
    pq.write_table(table, out["parquet"])
    out["csv"] = tmp_path / "docs.csv"
    pcsv.write_csv(table, out["csv"])
    out["tsv"] = tmp_path / "docs.tsv"
    pcsv.write_csv(table, out["tsv"], write_options=pcsv.WriteOptions(delimiter="\t"))
    out["arrow"] = tmp_path / "docs.arrow"
    with pa.ipc.new_file(str(out["arrow"]), table.schema) as writer:
        writer.write_table(table)
    ds = datasets.Dataset.from_dict({"id": ids, column: docs})
    out["saved"] = tmp_path / "saved-dataset"
    ds.save_to_disk(str(out["saved"]))
    out["saved-dict"] = tmp_path / "saved-dict"
    datasets.DatasetDict({"train": ds.select(range(5)), "test": ds}).save_to_disk(str(out["saved-dict"]))
    return out


def test_every_container_gives_the_same_examples_for_a_seed(tmp_path):
    docs = _documents()
    paths = _containers(tmp_path, docs)
    tok = FallbackTokenizer(500)
    built = {}
    for kind, path in paths.items():
        split = "test" if kind == "saved-dict" else "train"
        source = text_source(str(path), split=split)
        assert list(source) == docs, kind  # every record, in the stored order
        assert "column 'body' (found by its name" in source.name or "field 'body' (found by its name" in source.name
        bert = bert_pair_examples(source, tok, n=16, count=30, seed=4)
        gpt = gpt_window_examples(text_source(str(path), split=split), tok, n=8, count=30, seed=4)
        built[kind] = (bert.ids, bert.is_next, gpt.ids)
        assert "1 too short (e.g. 'too short' (2 tokens, 14 needed))" in bert.description, kind
        assert bert.skips == {"too short": {"count": 1, "example": "'too short' (2 tokens, 14 needed)"}}
    first = built["jsonl"]
    assert all(value == first for value in built.values())
    saved = text_source(str(paths["saved-dict"]), split="test")
    assert "a DatasetDict saved with save_to_disk), split 'test'" in saved.name


def test_saved_dataset_dict_splits_and_single_dataset(tmp_path):
    paths = _containers(tmp_path, _documents())
    assert len(list(text_source(str(paths["saved-dict"])))) == 5  # train, the default split
    with pytest.raises(DataError, match="has no split 'validation'; its splits: train, test; choose one with split"):
        text_source(str(paths["saved-dict"]), split="validation")
    single = text_source(str(paths["saved"]))
    assert "a Dataset saved with save_to_disk" in single.name and not single.lazy
    with pytest.raises(InputError, match=r"single Dataset.*leave out split"):
        text_source(str(paths["saved"]), split="test")


def test_columns_found_or_refused_with_what_was_found(tmp_path):
    kinds = {"id": "int64", "title": "text", "abstract_en": "text"}
    with pytest.raises(DataError, match=r"has 2 string columns \(title, abstract_en\).*choose one with text_column"):
        choose_column("x", kinds, None, "text")
    assert choose_column("x", {"id": "int64", "summary": "text"}, None, "text") == ("summary", "the only string column")
    assert choose_column("x", {"Content": "text", "t": "text"}, None, "text") == ("Content", "found by its name")
    with pytest.raises(InputError, match="column 'id' of x holds int64, not text; its string columns: title"):
        choose_column("x", kinds, "id", "text")

    jsonl = tmp_path / "content.jsonl"
    jsonl.write_text("".join(json.dumps({"url": f"u{i}", "content": f"document {i}"}) + "\n" for i in range(3)))
    source = text_source(str(jsonl))
    assert list(source) == ["document 0", "document 1", "document 2"]
    assert "field 'content' (found by its name)" in source.name
    fields = tmp_path / "fields.jsonl"
    fields.write_text("".join(json.dumps({"a": "x", "b": "y", "n": 1}) + "\n" for _ in range(3)))
    with pytest.raises(DataError, match=r"has 2 string columns \(a, b\).*; its|choose one with text_column"):
        text_source(str(fields))
    assert list(text_source(str(fields), text_column="b")) == ["y", "y", "y"]


def test_a_csv_value_longer_than_a_block_is_read_and_one_past_the_limit_refused_for_what_it_is(monkeypatch, tmp_path):
    """A quoted value of 3 MB with its line breaks (a book in one cell) does not lie in pyarrow's 1 MiB block: the
    file was refused with pyarrow's "straddling object straddles two block boundaries"; the block now grows to hold
    the row, up to MAX_CSV_ROW, and a longer row is refused for what it is."""
    from mhaaudit.sources import containers

    book = "word " * 250_000 + "\n\n" + "word " * 400_000
    path = tmp_path / "books.csv"
    path.write_text('text,n\n"' + book + '",1\nshort,2\n')
    assert os.path.getsize(path) > 3 << 20
    table = containers.table_of(path)
    assert table.rows == 2 and list(table.values("text")) == [book, "short"]
    monkeypatch.setattr(containers, "MAX_CSV_ROW", 1 << 20)
    with pytest.raises(DataError, match=r"a row \(a value with its line breaks\) is longer than 1 MiB"):
        containers.table_of(path)


@pytest.mark.parametrize(
    "body, why",
    [
        (
            '{"text": "one"}\n'.encode("utf-16"),
            r" \(2 invalid JSON \(e.g. line 1: not UTF-8 \(character 1 of the line\)\)\)$",
        ),
        (b'{"text": "one"} and more\n', r" \(1 invalid JSON \(e.g. line 1: Extra data\)\)$"),
        (b'["one"]\n"two"\n', "$"),
        (b"", "$"),
    ],
)
def test_a_jsonl_file_with_no_object_to_read_says_so(tmp_path, body, why):
    """A .jsonl file none of whose lines is a JSON object with fields (UTF-16, trailing words, arrays, nothing) was
    refused as having "no string column; its columns: none; choose one with text_column", which no column cures."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(body)
    with pytest.raises(DataError, match=r"x.jsonl holds no JSON object with fields to read the text from" + why):
        text_source(str(path))


def test_a_jsonl_text_with_an_unpaired_surrogate_escape_is_skipped_as_invalid_json(tmp_path):
    """The escape \\ud800 is JSON syntax but decodes to no character: a tokenizer refuses the string (an internal
    error, exit 3, before), so its line is skipped as invalid JSON, named by its line, as a line not UTF-8 is."""
    path = tmp_path / "surrogate.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two \\ud800 halves"}\n{"text": "a pair \\ud83d\\ude00 is one"}\n')
    source = text_source(str(path))
    assert list(source) == ["one", "a pair \U0001f600 is one"]
    got = source.skips.as_dict()
    assert got["invalid JSON"] == {
        "count": 1,
        "example": "line 2: 'text' holds an unpaired surrogate escape (character 5)",
    }


def test_a_jsonl_line_that_is_not_utf8_is_skipped_by_its_line_number(tmp_path):
    """JSON text is UTF-8: a line that is not is invalid JSON, skipped and counted as the other lines that are not
    JSON (the whole file was refused, naming no line); every skip names the line, blank lines counted."""
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"text": "one"}).encode(), b"", b'{"text": "\xff\xfe two"}', json.dumps({"x": 1}).encode()]
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join([*lines, json.dumps({"text": "three"}).encode()]) + b"\n")
    source = text_source(str(path))
    assert list(source) == ["one", "three"]
    got = source.skips.as_dict()
    assert got["invalid JSON"] == {"count": 1, "example": "line 3: not UTF-8 (character 11 of the line)"}
    assert got["missing field"]["example"] == "line 4 has no string 'text' (fields: x)"
    old_mac = tmp_path / "cr.jsonl"  # lines ended by a carriage return alone are lines, as Python reads text
    old_mac.write_bytes(b"\r".join(json.dumps({"text": t}).encode() for t in ("one", "two")) + b"\r")
    assert list(text_source(str(old_mac))) == ["one", "two"]


def test_a_txt_file_that_is_not_utf8_is_refused_naming_the_byte(tmp_path):
    (tmp_path / "t.txt").write_bytes(b"good words\n\nmore good words \xff and then")
    with pytest.raises(DataError, match=r"t.txt is not UTF-8 text \(byte 29: invalid start byte\)"):
        list(text_source(str(tmp_path / "t.txt")))


def test_a_txt_file_is_read_a_block_at_a_time_as_it_was_read_whole(tmp_path, monkeypatch):
    """A .txt file is split into documents a block at a time (it was read whole: a file larger than memory was an
    internal error, MemoryError): the documents are those of the whole text split at its blank lines, for blocks of
    any size (a blank line, a carriage return or a character across two blocks), and a byte that is not UTF-8 is
    named by its place in the file, whichever block holds it."""
    import random
    import re

    from mhaaudit.sources import text as text_module

    rng = random.Random(0)
    path = tmp_path / "t.txt"
    texts = ["".join(rng.choice("ab \t\n\n\r\u00e9") for _ in range(rng.randint(0, 60))) for _ in range(200)]
    texts += ["one\n\ntwo\n \t\n\nthree\r\n\r\nfour", "\n\n\n", "a\n \n\n b\n"]
    for block in (1, 2, 3, 7):
        monkeypatch.setattr(text_module, "_READ_CHARS", block)
        for text in texts:
            path.write_bytes(text.encode())
            whole = [d.strip() for d in re.split(r"\n[ \t]*\n", path.read_text(encoding="utf-8")) if d.strip()]
            got = list(text_module.TextFiles(path)._generate())
            assert [doc for _, doc in got] == whole, (block, text)
        path.write_bytes("\u00e9\u00e9 words\n\nmore".encode() + b" \xff")
        with pytest.raises(DataError, match=r"t.txt is not UTF-8 text \(byte 18: invalid start byte\)"):
            list(text_source(str(path)))


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_document_longer_than_is_read_whole_is_refused_in_one_line(tmp_path, monkeypatch, capsys, bert_dir, suffix):
    """A .txt paragraph, or a .jsonl line, longer than MAX_DOCUMENT_CHARS is refused naming the bound (a sparse
    file of a terabyte, one line of zero bytes, was read whole: an internal error, MemoryError), after reading no
    more than the bound; documents before it are read."""
    from mhaaudit.sources import text as text_module

    monkeypatch.setattr(text_module, "MAX_DOCUMENT_CHARS", 1 << 20)
    path = tmp_path / f"huge{suffix}"
    path.write_text('{"text": "first words here"}\n' if suffix == ".jsonl" else "first words here\n\n")
    os.truncate(path, 1 << 40)
    with pytest.raises(DataError, match=r"huge.*is longer than 1 Mi characters, the most read") as caught:
        list(text_source(str(path)))
    assert ("line 2" in str(caught.value)) == (suffix == ".jsonl")
    rc = main(["check", str(bert_dir), "--data", str(path), "--samples", "20", "--context-length", "16"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out, err
    assert err.strip().splitlines()[-1].startswith(f"Error: cannot read {path}") and "Traceback" not in err


@pytest.mark.parametrize("suffix, sep", [(".csv", b","), (".tsv", b"\t")])
def test_a_delimited_value_that_is_not_utf8_is_skipped_not_the_column(tmp_path, suffix, sep):
    """pyarrow types a CSV column binary when one value is not UTF-8: the column was then refused as holding
    bytes, not text (with --text-column too). It is text; the one value is skipped and counted by its row."""
    path = tmp_path / f"t{suffix}"
    path.write_bytes(b"id" + sep + b"text\n1" + sep + b"one\n2" + sep + b"t\xffwo\n3" + sep + b"three\n")
    for column in (None, "text"):
        source = text_source(str(path), text_column=column)
        assert list(source) == ["one", "three"]
        assert source.skips.as_dict() == {"not UTF-8": {"count": 1, "example": "row 1"}}


def test_an_empty_text_in_a_table_is_named_by_its_row(tmp_path):
    pq.write_table(pa.table({"text": ["one", " ", None, "two"]}), tmp_path / "t.parquet")
    source = text_source(str(tmp_path / "t.parquet"))
    assert list(source) == ["one", "two"]
    got = source.skips.as_dict()
    assert got["empty"]["example"] == "row 1" and got["missing field"]["example"] == "row 2: null"


def test_jsonl_skips_by_cause(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"text": "one"}),
                "{broken",
                json.dumps({"title": "no text"}),
                json.dumps({"text": "   "}),
                json.dumps({"text": "two"}),
            ]
        )
        + "\n"
    )
    source = text_source(str(path))
    assert list(source) == ["one", "two"]
    got = source.skips.as_dict()
    assert list(got) == ["invalid JSON", "missing field", "empty"]
    assert got["invalid JSON"]["count"] == 1 and got["invalid JSON"]["example"].startswith("line 2:")
    assert "line 3 has no string 'text' (fields: title)" == got["missing field"]["example"]
    assert got["empty"] == {"count": 1, "example": "line 4"}
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text(json.dumps({"text": "x"}) + "\n" + json.dumps({"body": 3}) * 0 + "{oops\n")
    wrong = text_source(str(nothing), text_column="body")
    with pytest.raises(
        DataError,
        match=r"no text documents \(1 invalid JSON.*1 missing field.*choose the field "
        "with text_column",
    ):
        list(wrong)


def _png(mode: str, seed: int, size: int = 24) -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).convert(mode)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_images_from_saved_datasets_and_arrow_with_skips_and_conversion(tmp_path):
    modes = ["RGB", "L", "RGBA", "P", "RGB", "RGB"]
    pictures = [Image.open(io.BytesIO(_png(m, i))) for i, m in enumerate(modes)]
    ds = datasets.Dataset.from_dict(
        {"picture": pictures, "label": list(range(len(modes)))},
        features=datasets.Features({"picture": datasets.Image(), "label": datasets.Value("int64")}),
    )
    saved = tmp_path / "saved"
    ds.save_to_disk(str(saved))
    source = image_source(str(saved))
    images = list(source)
    assert len(images) == 3 and source.skips.as_dict() == {"not RGB": {"count": 3, "example": "row 1: mode L"}}
    assert "column 'picture' (found by its name" in source.name and "RGB only" in source.policy
    scan = source.scan()
    assert (scan.usable, scan.scanned, scan.complete) == (3, 6, True)
    converted = image_source(str(saved), convert_rgb=True)
    images = list(converted)
    assert len(images) == 6 and converted.skipped == 0 and converted.converted == 3
    assert all(im.mode == "RGB" for im in images) and "torchvision" in converted.policy
    # the same as PIL's convert("RGB"), which torchvision's ImageFolder loader applies
    assert images[1].tobytes() == pictures[1].convert("RGB").tobytes()

    table = pa.table({"label": [0, 1, 2], "bytes_col": [_png("RGB", 1), b"junk", _png("RGB", 2)]})
    arrow = tmp_path / "images.arrow"
    with pa.ipc.new_stream(str(arrow), table.schema) as writer:  # the stream format save_to_disk writes
        writer.write_table(table)
    source = image_source(str(arrow))
    assert len(list(source)) == 2 and "the only image column" in source.name
    assert source.skips.as_dict()["unreadable"]["example"].startswith("row 1: ")


def test_cli_names_its_own_options(tmp_path, capsys, bert_dir):
    fields = tmp_path / "fields.jsonl"
    fields.write_text("".join(json.dumps({"a": "x", "b": "y"}) + "\n" for _ in range(3)))
    assert (
        main(
            [
                "check",
                str(bert_dir),
                "--data",
                str(fields),
                "--limit",
                "40",
                "--context-length",
                "16",
                "--variants",
                "random",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "choose one with --text-column" in err and "text_column" not in err and err.count("\n") == 1


def test_column_options_without_columns_are_refused(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("one\n\ntwo\n")
    with pytest.raises(InputError, match="text_column has no effect on a plain text file"):
        text_source(str(txt), text_column="body")
    with pytest.raises(InputError, match="text_column has no effect on the built-in text"):
        text_source(None, text_column="body")
    with pytest.raises(InputError, match="image_column and convert_rgb have no effect on the built-in images"):
        image_source(None, image_column="img", convert_rgb=True)
    (tmp_path / "pics").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "pics" / "x.png")
    with pytest.raises(InputError, match="image_column has no effect on an image folder"):
        image_source(str(tmp_path / "pics"), image_column="img")


def test_too_short_counts_documents_also_when_parts_were_joined(tmp_path):
    long = " ".join(f"w{i}" for i in range(30))
    path = tmp_path / "notes.txt"
    path.write_text(f"{long}\n\n{long} again\n\none two\n\nthree four\n\nfive\n")  # three short paragraphs at the end
    ex = gpt_window_examples(text_source(str(path)), FallbackTokenizer(500), n=8, count=2, seed=0)
    assert ex.skips == {"too short": {"count": 3, "example": "'one two' (5 tokens in 3 joined parts, 12 needed)"}}


def test_cli_reads_a_dataset_dict_split_and_names_it(tmp_path, capsys, bert_dir):
    paths = _containers(tmp_path, _documents(), column="passage_text")
    argv = [
        "check",
        str(bert_dir),
        "--data",
        str(paths["saved-dict"]),
        "--split",
        "test",
        "--limit",
        "20",
        "--context-length",
        "16",
        "--variants",
        "random",
        "--layers",
        "0",
        "--samples",
        "50",
        "--format",
        "json",
    ]
    assert main(argv) == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    assert (
        "(a DatasetDict saved with save_to_disk), split 'test', column 'passage_text' (the only string column"
        in meta["data"]
    )
    assert meta["skips"]["too short"]["count"] == 1 and meta["skips"]["too short"]["example"].startswith(
        "'too short' ("
    )

    ds = datasets.Dataset.from_dict({"title": ["t"] * 40, "abstract": _documents()})
    ds.save_to_disk(str(tmp_path / "two"))
    argv[3] = str(tmp_path / "two")
    del argv[4:6]  # a single Dataset: no --split
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "has 2 string columns (title, abstract)" in err and "choose one with --text-column" in err
    assert main([*argv, "--text-column", "abstract"]) == 0
    assert "column 'abstract' (as asked" in json.loads(capsys.readouterr().out)["meta"]["data"]


def test_split_without_splits_is_refused(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("one\n\ntwo\n")
    with pytest.raises(InputError, match="split 'test' has no effect on a file"):
        text_source(str(txt), split="test")
    with pytest.raises(InputError, match="split 'test' has no effect on the built-in images"):
        image_source(None, split="test")
    (tmp_path / "pics").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "pics" / "x.png")
    with pytest.raises(InputError, match="split 'validation' has no effect on an image folder"):
        image_source(str(tmp_path / "pics"), split="validation")


@pytest.mark.parametrize("command", ["capacity", "kruskal"])
def test_capacity_and_kruskal_take_the_column_options(tmp_path, capsys, bert_dir, command):
    """``capacity`` and ``kruskal --model`` choose the data's column as ``check`` does: an
    unfindable column is refused naming --text-column, and the option is then honoured."""
    fields = tmp_path / "fields.jsonl"
    fields.write_text("".join(json.dumps({"a": doc, "b": "y"}) + "\n" for doc in _documents(120)))
    base = (
        ["capacity", str(bert_dir), "--block", "1", "--variants", "random"]
        if command == "capacity"
        else ["kruskal", "--model", str(bert_dir), "--variants", "random", "--k", "3", "--samples", "20"]
    )
    args = [*base, "--data", str(fields), "--limit", "20", "--context-length", "16", "--format", "json"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "choose one with --text-column" in err and err.count("\n") == 1
    assert main([*args, "--text-column", "a"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["records"]


def test_image_paths_in_a_table_stay_inside_its_folder(tmp_path):
    """A table may name its images by path: only regular files inside the table's own folder are
    read; a path elsewhere (absolute, ``..``, a device) is an unreadable input, and whether such a
    file exists is not said."""
    from mhaaudit.sources.decoding import _decode

    inside = tmp_path / "data"
    inside.mkdir()
    (inside / "ok.png").write_bytes(_png("RGB", 1))
    (tmp_path / "secret.png").write_bytes(_png("RGB", 2))
    image, cause, _ = _decode({"bytes": None, "path": "ok.png"}, inside)
    assert image is not None and cause == ""
    for path in (str(tmp_path / "secret.png"), "../secret.png", "/dev/zero", "/nonexistent/secret"):
        image, cause, why = _decode({"bytes": None, "path": path}, inside)
        assert image is None and cause == "unreadable" and "outside the data's folder" in why, (path, why)
    image, cause, why = _decode({"bytes": None, "path": "ok.png"}, None)  # a streamed dataset: stored bytes only
    assert image is None and "streamed" in why


def test_a_corrupt_table_is_one_data_error(tmp_path):
    """A parquet file that turns out corrupt while its rows are read ends in a DataError naming it."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": _documents(200)}), path, compression="none")
    raw = bytearray(path.read_bytes())
    for i in range(len(raw) // 3, len(raw) // 3 + 64):
        raw[i] = 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError):
        list(text_source(str(path)))


def test_deeply_nested_jsonl_is_an_invalid_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("[" * 100000 + "]" * 100000 + "\n" + json.dumps({"text": "alpha beta"}) + "\n")
    src = text_source(str(path))
    assert list(src) == ["alpha beta"]
    assert src.skips.count("invalid JSON") == 1


@pytest.mark.parametrize("suffix", ["csv", "tsv", "parquet"])
def test_a_column_name_given_twice_is_one_data_error(tmp_path, suffix):
    """A header that names two columns ``text`` (a CSV's, or a parquet file's schema) cannot say which one is the
    text: refused as the data's fault, naming the file and the name (it was an internal error, a KeyError)."""
    path = tmp_path / f"t.{suffix}"
    docs = _documents(30)
    if suffix == "parquet":
        pq.write_table(pa.Table.from_arrays([pa.array(docs), pa.array(docs)], names=["text", "text"]), path)
    else:
        sep = "," if suffix == "csv" else "\t"
        path.write_text(f"text{sep}text\n" + "".join(f'"{d}"{sep}"{d}"\n' for d in docs))
    with pytest.raises(DataError, match=rf"^\w+ file {path} names more than one column 'text'"):
        list(text_source(str(path)))


def test_a_data_file_s_compression_is_known_where_the_datasets_library_keeps_its_rule_elsewhere(monkeypatch):
    """The compressed-line check asks the ``datasets`` library how it decompresses a file; a version that keeps
    that rule elsewhere (or not at all) falls back to the file's suffix, never to an ImportError (exit 3)."""
    import sys

    from mhaaudit.sources.folder_checks import _extraction_protocol

    assert _extraction_protocol("d/train.jsonl.gz") == "gzip" and _extraction_protocol("d/train.jsonl") is None
    monkeypatch.setitem(sys.modules, "datasets.utils.file_utils", None)
    monkeypatch.setitem(sys.modules, "datasets.download.streaming_download_manager", None)
    got = [_extraction_protocol(f"d/train.{s}") for s in ("jsonl.gz", "csv.BZ2", "txt.xz", "json.zst", "zip", "txt")]
    assert got == ["gzip", "bz2", "xz", "zstd", "zip", None]


def test_a_folder_of_compressed_data_files_is_read_as_a_data_set(tmp_path):
    """A local folder whose only data files are compressed (``train.jsonl.gz``, ``a.txt.gz``: the ``datasets``
    library decompresses them) is read as a data set, as with ``hf:``; it was taken for a folder of .txt files and
    refused ("holds no .txt files"). A folder with a plain .txt file is still read as .txt files."""
    import gzip

    docs = _documents(12)
    (tmp_path / "j").mkdir()
    with gzip.open(tmp_path / "j" / "train.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    (tmp_path / "t").mkdir()
    with gzip.open(tmp_path / "t" / "train.txt.gz", "wt") as f:
        f.write("\n".join(docs) + "\n")
    for name in ("j", "t"):
        folder = tmp_path / name
        src = text_source(str(folder), limit=5)
        assert src.name.startswith(f"dataset folder {folder}"), src.name
        assert list(src) == list(text_source(f"hf:{folder}", limit=5)) == docs[:5]
    (tmp_path / "t" / "notes.txt").write_text(docs[0] + "\n")
    assert text_source(str(tmp_path / "t")).name.startswith("text folder")


def test_compressed_text_in_a_data_set_folder_is_one_document_a_line_not_a_paragraph(tmp_path):
    """docs/guides/your-data.md says so: ``a.txt.gz`` in a folder is read by the ``datasets`` library, whose text
    reader gives one record a line, while the same text in a ``.txt`` file is split into documents at blank lines."""
    import gzip

    paragraphs = ["\n".join(f"line {i} of paragraph {p}" for i in range(3)) for p in range(4)]
    text = "\n\n".join(paragraphs) + "\n"
    (tmp_path / "gz").mkdir()
    with gzip.open(tmp_path / "gz" / "a.txt.gz", "wt") as f:
        f.write(text)
    (tmp_path / "a.txt").write_text(text)
    lines = [line for p in paragraphs for line in p.split("\n")]
    assert list(text_source(str(tmp_path / "gz"))) == lines
    assert list(text_source(str(tmp_path / "a.txt"))) == paragraphs


def test_what_a_text_file_holds_at_once_is_its_longest_line_or_paragraph(monkeypatch):
    """The scan of a data file finds what the ``datasets`` library holds at once: its longest line, or with
    ``sample_by: paragraph`` its longest paragraph (up to a blank line), whatever the chunks it is read in (a blank
    line split between two of them too): checked against splitting the whole text at once."""
    import io

    from mhaaudit.sources import folder_checks as _common

    rng = np.random.default_rng(3)
    for trial in range(60):
        text = b"".join(rng.choice([b"a", b"bb", b"\n", b"\n\n", b"ccc\n"], size=int(rng.integers(0, 80))))
        monkeypatch.setattr(_common, "SCAN_CHUNK", int(rng.integers(1, 9)))
        for paragraphs, sep in ((False, b"\n"), (True, b"\n\n")):
            *ends, rest = text.split(sep)
            want = max([len(p) + len(sep) for p in ends] + [len(rest)])
            held, words, whole = _common._most_held(io.BytesIO(text), 1, False, 10**9, 0, paragraphs)
            assert (held, whole) == (want, ""), (trial, text, paragraphs)
            assert words.startswith("its longest paragraph" if paragraphs else "its longest line")


def test_a_text_file_s_lines_end_as_its_reader_ends_them(monkeypatch):
    """The text reader opens its files with universal newlines: CR LF and a lone CR end a line as LF does, so a file
    of CR LF paragraphs is many paragraphs, not one. The scan's longest line and paragraph are those of the text
    Python's own reader gives, whatever the chunks (a CR LF split between two of them too)."""
    import io

    from mhaaudit.sources import folder_checks

    rng = np.random.default_rng(6)
    for trial in range(200):
        text = b"".join(rng.choice([b"a", b"bb", b"\n", b"\r", b"\r\n", b"c\r\n\r\n"], size=int(rng.integers(0, 80))))
        seen = io.TextIOWrapper(io.BytesIO(text), encoding="latin-1", newline=None).read().encode("latin-1")
        monkeypatch.setattr(folder_checks, "SCAN_CHUNK", int(rng.integers(1, 9)))
        for paragraphs, sep in ((False, b"\n"), (True, b"\n\n")):
            *ends, rest = seen.split(sep)
            want = max([len(p) + len(sep) for p in ends] + [len(rest)])
            held, _, _ = folder_checks._most_held(io.BytesIO(text), 1, False, 10**9, 0, paragraphs, universal=True)
            assert held == want, (trial, text, paragraphs)


def test_what_a_csv_batch_holds_counts_rows_not_lines(monkeypatch):
    """A CSV file is read ``chunksize`` rows at a time, and a quoted field may hold newlines: the scan's most bytes of
    that many consecutive rows is found by rows (checked against the rows as written), whatever the chunks it reads;
    counting lines would take a row of many lines for several rows."""
    import csv
    import io

    from mhaaudit.sources import folder_checks as _common

    rng = np.random.default_rng(4)
    for trial in range(40):
        rows = []
        for _ in range(int(rng.integers(1, 12))):
            field = "".join(rng.choice(["x", "yy", "\n", '"', ","], size=int(rng.integers(0, 12))))
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerow([field, "z"])
            rows.append(out.getvalue().encode())
        k = int(rng.integers(2, 4))
        want = max(sum(len(r) for r in rows[i : i + k]) for i in range(len(rows)))
        monkeypatch.setattr(_common, "SCAN_CHUNK", int(rng.integers(1, 9)))
        held, words, _ = _common._most_held(io.BytesIO(b"".join(rows)), k, False, 10**9, 0, quote=b'"')
        assert held == want, (trial, rows, k)
        assert words.startswith(f"its most bytes in {k} consecutive rows")


def test_a_later_json_batch_that_starts_a_list_is_read_to_the_end(monkeypatch):
    """The ``datasets`` library's JSON reader takes ``chunksize`` bytes and the rest of the line at a time, and reads
    the rest of the file at once where a batch starts with ``[``: the scan finds the batches' starts as the reader
    does (checked against reading with ``read`` and ``readline``), whatever chunks it reads, and counts what follows
    the first such batch as held whole."""
    import io

    from mhaaudit.sources import folder_checks as _common

    def reader(text: bytes, size: int) -> int | None:  # the first later batch that starts with "["
        f, at = io.BytesIO(text), 0
        while batch := f.read(size):
            if at and batch.startswith(b"["):
                return at
            batch += f.readline()
            at += len(batch)
        return None

    rng = np.random.default_rng(5)
    for trial in range(300):
        text = b"".join(rng.choice([b"a", b"{}", b"\n", b"[", b"xyz\n"], size=int(rng.integers(0, 60))))
        size = int(rng.integers(1, 12))
        want = reader(text, size)
        monkeypatch.setattr(_common, "SCAN_CHUNK", int(rng.integers(1, 9)))
        held, words, whole = _common._most_held(io.BytesIO(text), 1, False, 10**9, size, json_batches=True)
        if text.startswith(b"["):
            assert (held, whole) == (len(text), "it whole"), (trial, text, size)
        elif want is not None:  # the rest of it from there, or a longer line before it after its batch
            before = size + max([len(p) + 1 for p in text[:want].split(b"\n")[:-1]], default=0)
            assert held == max(len(text) - want, before), (trial, text, size, want)
            if len(text) - want >= before:
                assert whole == "the rest of it whole", (trial, text, size, want)
                assert words.startswith(f"the rest of it from byte {want}, where a batch starts with '['")
            else:
                assert (whole, words.split(",")[0]) == ("", "its longest line"), (trial, text, size, want)
        else:  # the batch and the longest line
            *ends, rest = text.split(b"\n")
            assert (held, whole) == (size + max([len(p) + 1 for p in ends] + [len(rest)]), ""), (trial, text, size)


def test_a_long_json_line_before_a_later_batch_that_starts_a_list_still_counts(monkeypatch):
    """The rest of a JSON file read whole from a later batch that starts with ``[`` does not hide a longer line
    before it: a line of 110 bytes (after a batch of 8) then a 4-byte ``[1]`` is held 118 bytes at once, its
    longest line, as the same file without the list; it read 4 bytes, the rest of it, and passed a limit of 60."""
    import io

    from mhaaudit.sources import folder_checks as _common

    head = b'{"a": "' + b"x" * 100 + b'"}\n' + b'{"b": 1}\n'
    for chunk in (1, 7, 1 << 20):
        monkeypatch.setattr(_common, "SCAN_CHUNK", chunk)
        held, words, whole = _common._most_held(io.BytesIO(head + b"[1]\n"), 1, False, 10**9, 8, json_batches=True)
        assert (held, whole) == (118, "") and words.startswith("its longest line"), chunk
        assert _common._most_held(io.BytesIO(head), 1, False, 10**9, 8, json_batches=True)[0] == 118
        held, words, _ = _common._most_held(io.BytesIO(head + b"[1]\n"), 1, False, 60, 8, json_batches=True)
        assert held > 60 and words.startswith("its longest line, at least"), chunk
