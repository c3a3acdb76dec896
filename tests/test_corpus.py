"""Tests for mhaaudit.sources.corpus: the built-in text read from the installed packages'
docstrings, offline, deterministic, free of code and repeated paragraphs, cached on disk."""

from __future__ import annotations

import gzip
import itertools
import os
import platform
import re
import stat
import sys

import pytest
from clitools import run_python

from mhaaudit.sources import corpus as corpus_module
from mhaaudit.sources.corpus import DEFAULT_PACKAGES, docstring_corpus

SMALL = ("json", "textwrap", "argparse")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache folder, and no corpus remembered from earlier tests."""
    monkeypatch.setenv("MHAAUDIT_CACHE", str(tmp_path))
    monkeypatch.setattr(corpus_module, "_LOADED", {})
    return tmp_path / "corpus"


def _paragraphs(corpus):
    return [p for _, _, text in corpus.documents for p in text.split("\n\n")]


def test_small_corpus_from_installed_modules(cache):
    corpus = docstring_corpus(SMALL)
    version = platform.python_version()
    assert corpus.packages == tuple((name, version) for name in SMALL)
    groups = [g for g, _, _ in corpus.documents]
    assert groups == sorted(groups, key=SMALL.index)  # packages in the order asked, modules together
    modules = [m for _, m, _ in corpus.documents]
    assert "json/__init__.py" in modules and "textwrap.py" in modules and "argparse.py" in modules
    assert [m for m in modules if m.startswith("json/")] == sorted(m for m in modules if m.startswith("json/"))
    assert corpus.words == sum(len(t.split()) for _, _, t in corpus.documents) > 2000
    assert "json (Python" in corpus.description and "not Wikipedia" in corpus.description
    assert f"{len(corpus.documents):,} documents" in corpus.description
    json_doc = next(t for g, m, t in corpus.documents if m == "json/__init__.py")
    assert json_doc.startswith("JSON (JavaScript Object Notation)")


def test_deterministic_and_free_of_code_and_repeats(cache):
    corpus = docstring_corpus(SMALL, cache=False)
    assert corpus == docstring_corpus(SMALL, cache=False)
    assert corpus.code > 0 and corpus.duplicates > 0  # json.dump and json.dumps share paragraphs
    paragraphs = _paragraphs(corpus)
    keys = [" ".join(p.lower().split()) for p in paragraphs]
    assert len(keys) == len(set(keys))
    for p in paragraphs:
        assert "\n" not in p and p == p.strip()
        assert not re.search(r">>>|```|\.\. code-block::|\.\. doctest::", p), p
        assert not re.match(r"(import |from \w+ import |def |class \w+[(:])", p), p


def test_nothing_is_imported(cache, tmp_path, monkeypatch):
    package = tmp_path / "lib" / "trap_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""A package that must never be imported by the corpus."""\nraise RuntimeError("imported")\n'
    )
    (package / "part.py").write_text('def f():\n    """The part explains what the function does here."""\n')
    tests = package / "tests"
    tests.mkdir()
    (tests / "test_part.py").write_text('"""Tests are not documentation and stay out of the corpus."""\n')
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    corpus = docstring_corpus(("trap_package", "no_such_package_xyz"))
    assert "trap_package" not in sys.modules
    assert corpus.packages == (("trap_package", "(version unknown)"),)
    assert [(g, m) for g, m, _ in corpus.documents] == [
        ("trap_package", "trap_package/__init__.py"),
        ("trap_package", "trap_package/part.py"),
    ]


def test_cached_and_reused(cache, monkeypatch):
    first = docstring_corpus(SMALL)
    files = list(cache.glob("docstrings-*.json.gz"))
    assert len(files) == 1 and not list(cache.glob("*.tmp"))
    assert docstring_corpus(SMALL) is first  # remembered in the process

    def refuse(*args, **kwargs):
        raise AssertionError("rebuilt although the cache is valid")

    monkeypatch.setattr(corpus_module, "_LOADED", {})
    monkeypatch.setattr(corpus_module, "_build", refuse)
    assert docstring_corpus(SMALL) == first  # read back from the file
    # another set of packages (or versions) is another key
    monkeypatch.undo()
    monkeypatch.setenv("MHAAUDIT_CACHE", str(cache.parent))
    docstring_corpus(("json",))
    assert len(list(cache.glob("docstrings-*.json.gz"))) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other key", "wrong words", "deep", "too large"])
def test_corrupt_cache_is_rebuilt(cache, monkeypatch, damage):
    first = docstring_corpus(SMALL)
    (path,) = cache.glob("docstrings-*.json.gz")
    raw, limit = path.read_bytes(), corpus_module.MAX_CACHE_BYTES
    if damage == "garbage":
        path.write_bytes(b"not a gzip file")
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "deep":  # nested deeper than Python parses
        path.write_bytes(gzip.compress(b"[" * 100_000 + b"]" * 100_000))
    elif damage == "too large":  # more than a cache file is read to once decompressed
        monkeypatch.setattr(corpus_module, "MAX_CACHE_BYTES", len(gzip.decompress(raw)) - 1)
    else:
        text = gzip.decompress(raw).decode()
        if damage == "other key":
            text = re.sub(r'"key": "[0-9a-f]+"', '"key": "0000"', text)
        else:
            text = re.sub(r'"words": \d+', '"words": 7', text)
        path.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(corpus_module, "_LOADED", {})
    assert docstring_corpus(SMALL) == first
    monkeypatch.setattr(corpus_module, "_LOADED", {})
    monkeypatch.setattr(corpus_module, "MAX_CACHE_BYTES", limit)
    monkeypatch.setattr(corpus_module, "_build", lambda *a, **k: pytest.fail("the rebuilt cache was not written"))
    assert docstring_corpus(SMALL) == first


def test_a_planted_cache_file_or_lock_is_neither_read_nor_written_through(cache, tmp_path, monkeypatch):
    """A link at the build's lock file is never opened (it would truncate the file it leads to), and a named pipe
    at the cache file or the lock never blocks the run: the corpus is built again."""
    first = docstring_corpus(SMALL)
    (path,) = cache.glob("docstrings-*.json.gz")
    lock = path.with_name(path.name + ".lock")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path.unlink()
    lock.unlink()
    lock.symlink_to(victim)
    monkeypatch.setattr(corpus_module, "_LOADED", {})
    assert docstring_corpus(SMALL) == first
    assert victim.read_text() == "precious" and lock.is_symlink()
    path.unlink()
    lock.unlink()
    os.mkfifo(path)
    os.mkfifo(lock)
    child = run_python(  # in a child: were a pipe opened, the run would block (the timeout fails the test)
        "import os; from mhaaudit.sources.corpus import docstring_corpus; "
        f"os.environ['MHAAUDIT_CACHE'] = {str(cache.parent)!r}; print(docstring_corpus({SMALL!r}).words)"
    )
    assert child.returncode == 0 and int(child.stdout) == first.words, child.stderr
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # a named pipe is never replaced by the cache file


def test_unwritable_cache_still_gives_the_corpus(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MHAAUDIT_CACHE", str(blocker))  # the cache folder cannot be made under a file
    monkeypatch.setattr(corpus_module, "_LOADED", {})
    assert docstring_corpus(("json",)).documents


def test_blocks_cover_the_corpus_in_order(cache):
    corpus = docstring_corpus(SMALL)
    blocks = corpus.blocks(min_words=500)
    assert len(blocks) > 3
    assert blocks[0][0] == 0 and blocks[-1][1] == len(corpus.documents)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    for start, stop in blocks:
        assert len({g for g, _, _ in corpus.documents[start:stop]}) == 1  # one package per block
        words = sum(len(t.split()) for _, _, t in corpus.documents[start:stop])
        last_of_package = stop == len(corpus.documents) or corpus.documents[stop][0] != corpus.documents[start][0]
        assert words >= 500 or last_of_package
        assert stop - start == 1 or sum(len(t.split()) for _, _, t in corpus.documents[start : stop - 1]) < 500


def test_default_corpus_is_large_enough_for_the_paper():
    corpus = docstring_corpus()
    names = [name for name, _ in corpus.packages]
    assert names[0] == "stdlib" and set(names) <= set(DEFAULT_PACKAGES)
    assert {"numpy", "torch", "transformers"} <= set(names)  # dependencies of mhaaudit
    # 2000 GPT-2 windows of 1024 tokens need 2 million tokens; English averages over 1.3 tokens a word
    assert corpus.words > 2_000_000
    for _name, version in corpus.packages:
        assert version in corpus.description
    assert not any(">>>" in text for _, _, text in corpus.documents)  # no doctest anywhere


def test_a_build_says_what_it_does_and_that_it_caches(cache, capsys):
    """With progress on, the first build names what it reads and where it caches it; the cached
    corpus is read back without a word; without progress nothing is said."""
    docstring_corpus(SMALL, progress=True)
    said = " ".join(capsys.readouterr().err.split())
    assert "Building the built-in text corpus from the docstrings of json, textwrap, argparse" in said
    assert f"once; the result is cached in {cache}" in said
    corpus_module._LOADED.clear()
    docstring_corpus(SMALL, progress=True)  # from the cache file
    assert capsys.readouterr().err == ""
    docstring_corpus(("json",), progress=False)  # another key: a build, but nobody watches
    assert capsys.readouterr().err == ""


def test_a_corpus_larger_than_a_cache_file_is_read_to_is_not_written(cache, monkeypatch, capsys):
    """A cache file beyond MAX_CACHE_BYTES would never be read back: it is not written, and stderr says why."""
    monkeypatch.setattr(corpus_module, "MAX_CACHE_BYTES", 1000)
    corpus = docstring_corpus(SMALL, progress=True)
    assert corpus.words > 2000 and not list(cache.glob("docstrings-*.json.gz"))
    assert "is not cached" in capsys.readouterr().err
