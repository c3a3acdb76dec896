"""The built-in text corpus: the documentation that the installed packages carry.

Offline, no large English corpus is guaranteed to be present, but every machine where mhaaudit
installs holds the source files of Python's standard library and of mhaaudit's dependencies,
and their docstrings are English prose written by people: technical, about programming and
numerical computing, not encyclopaedic. :func:`docstring_corpus` reads them with ``ast`` (no
package is imported), keeps their prose (:mod:`.docstrings` drops code examples), removes
repeated paragraphs, and returns a :class:`Corpus` of documents, one per module: the module's
docstrings in source order.

Which packages: :data:`DEFAULT_PACKAGES`, those of them that are installed, found with
``importlib.util.find_spec`` (which locates a top-level package without importing it). The
standard library is the modules in ``sys.stdlib_module_names`` that are Python source, less
tests and tools. Files are read in sorted order, packages in the order listed, so the corpus is
a function of the installed versions alone. A paragraph that occurred before (compared after
folding case and white space) is dropped: the boilerplate that modules share (parameter
descriptions copied between functions, licence notes) is kept once, where it first appears.

The corpus is cached in ``$XDG_CACHE_HOME/mhaaudit/corpus`` (``~/.cache`` by default;
``$MHAAUDIT_CACHE`` overrides the ``mhaaudit`` folder) under a key made of the mhaaudit version,
:data:`CORPUS_FORMAT`, the Python version and the versions of the packages read; it is written
atomically, and a cache file that cannot be read back (or is not a regular file, or holds more than
:data:`MAX_CACHE_BYTES`) is rebuilt; the build's lock file is never opened through a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..errors import OutputError
from ..progress import log, task
from ..staging import atomic_path
from ._common import cache_dir
from .docstrings import module_docstrings, prose_paragraphs

__all__ = ["BLOCK_WORDS", "CORPUS_FORMAT", "DEFAULT_PACKAGES", "Corpus", "docstring_corpus"]

STDLIB = "stdlib"
# The standard library first, then dependencies of mhaaudit (direct, or through datasets for
# pandas) whose documentation is mostly English prose; together about 3 million words.
DEFAULT_PACKAGES = (STDLIB, "numpy", "scipy", "sklearn", "pandas", "torch", "transformers")
# The built-in source reads the corpus in blocks of consecutive modules of one package of at
# least this many words (about 3 GPT-2 windows of 1024 tokens), in a seeded order.
BLOCK_WORDS = 3000
# The most bytes a cache file is read to once decompressed (the corpus of the default packages is tens of MB).
MAX_CACHE_BYTES = 256 << 20
# Bump when the extraction or cleaning rules change: the cache key includes it.
CORPUS_FORMAT = 1

# Folders and stdlib modules that hold tests, tools or vendored copies rather than documentation.
_SKIP_DIRS = frozenset(
    {
        "test",
        "tests",
        "testing",
        "__pycache__",
        "_vendor",
        "vendored",
        "externals",
        "site-packages",
        "dist-packages",
        "benchmarks",
    }
)
_SKIP_STDLIB = frozenset(
    {"test", "idlelib", "turtledemo", "lib2to3", "ensurepip", "pydoc_data", "__phello__", "this", "antigravity"}
)


@dataclass(frozen=True)
class Corpus:
    """The built-in text, one document per module.

    ``documents``: ``(group, module, text)`` triples in corpus order, ``group`` naming the
    package (``"stdlib"`` for the standard library), ``module`` the source file relative to its
    package, ``text`` its prose paragraphs separated by blank lines. ``packages``: the
    ``(package, version)`` pairs read, in order. ``words``: white-space separated words of all
    documents. ``duplicates``: paragraphs dropped because they occurred before; ``code``: code
    blocks dropped.
    """

    documents: tuple[tuple[str, str, str], ...]
    packages: tuple[tuple[str, str], ...]
    words: int
    duplicates: int
    code: int

    def blocks(self, min_words: int = BLOCK_WORDS) -> list[tuple[int, int]]:
        """``(start, stop)`` ranges of :attr:`documents`: runs of consecutive modules of one
        package with at least ``min_words`` words (a package's last run may have fewer)."""
        out: list[tuple[int, int]] = []
        start = words = 0
        for i, (group, _, text) in enumerate(self.documents):
            if i > start and group != self.documents[start][0]:
                out.append((start, i))
                start, words = i, 0
            words += len(text.split())
            if words >= min_words:
                out.append((start, i + 1))
                start, words = i + 1, 0
        if start < len(self.documents):
            out.append((start, len(self.documents)))
        return out

    @functools.cached_property
    def sha256(self) -> str:
        """The SHA-256 of the packages read and of every document's parts, in corpus order; computed once for
        each corpus (the seeds of one process share it)."""
        h = hashlib.sha256(b"built-in text\0")
        h.update(json.dumps(self.packages).encode())
        for document in self.documents:
            for part in document:
                data = part.encode("utf-8", "surrogatepass")
                h.update(len(data).to_bytes(8, "little") + data)
        return h.hexdigest()

    @property
    def description(self) -> str:
        """Plain words for the report: what the text is, its size and the versions read."""
        versions = ", ".join(
            f"the Python {v} standard library"
            if name == STDLIB
            else f"{name} (Python {v} standard library)"
            if name in sys.stdlib_module_names
            else f"{name} {v}"
            for name, v in self.packages
        )
        return (
            f"built-in: technical English from the docstrings of installed package documentation ({versions}): "
            f"{len(self.documents):,} documents (one per module), {self.words:,} words; code examples and "
            f"{self.duplicates:,} repeated paragraphs removed; not Wikipedia (offline default)"
        )


def _module_files(root: Path) -> list[Path]:
    """The ``.py`` files under a package folder, tests and tools left out, in sorted order."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found.extend(
            Path(folder) / name
            for name in sorted(files)
            if name.endswith(".py")
            and not name.startswith("test_")
            and not name.endswith("_test.py")
            and name != "conftest.py"
        )
    return found


def _spec(name: str):
    """The import spec of an installed top-level module when it is Python source (located, not
    imported), else None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not (spec.submodule_search_locations or (spec.origin or "").endswith(".py")):
        return None
    return spec


def _module_paths(name: str) -> list[tuple[str, Path]]:
    """``(module path, file)`` for the source files of an installed top-level module; the module
    path is relative to the folder that holds the module (``torch/nn/functional.py``)."""
    spec = _spec(name)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        roots = sorted(Path(p) for p in spec.submodule_search_locations if Path(p).is_dir())
        return [(f.relative_to(root.parent).as_posix(), f) for root in roots for f in _module_files(root)]
    origin = Path(spec.origin)
    return [(origin.name, origin)] if origin.is_file() else []


def _stdlib_names() -> list[str]:
    return [name for name in sorted(sys.stdlib_module_names) if name not in _SKIP_STDLIB]


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _version(name: str) -> str:
    for dist in _distributions().get(name, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "(version unknown)"


def _installed(packages: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(package, version)`` for those of ``packages`` that are installed as Python source."""
    out = []
    for name in packages:
        if name == STDLIB or (name in sys.stdlib_module_names and _spec(name) is not None):
            out.append((name, platform.python_version()))
        elif _spec(name) is not None:
            out.append((name, _version(name)))
    return out


def _files(packages: list[tuple[str, str]]) -> list[tuple[str, str, Path]]:
    """``(group, module path, file)`` of every source file to read, in corpus order."""
    files: list[tuple[str, str, Path]] = []
    for name, _ in packages:
        names = _stdlib_names() if name == STDLIB else [name]
        files.extend((name, module, path) for each in names for module, path in _module_paths(each))
    return files


def _build(versions: list[tuple[str, str]], progress: bool = False, cached_in: Path | None = None) -> Corpus:
    files = _files(versions)
    log(
        "Building the built-in text corpus from the docstrings of "
        + ", ".join(n for n, _ in versions)
        + (f" (once; the result is cached in {cached_in})" if cached_in is not None else ""),
        progress,
    )
    with task("reading docstrings", len(files), progress) as advance:
        documents, words, duplicates, code = _read_files(files, advance)
    return Corpus(tuple(documents), tuple(versions), words, duplicates, code)


def _read_files(files: list[tuple[str, str, Path]], advance) -> tuple[list, int, int, int]:
    """The documents of ``files`` and the counts (words kept, paragraphs repeated, code blocks dropped)."""
    seen: set[bytes] = set()
    documents = []
    words = duplicates = code = 0
    for group, module, path in files:
        advance(1)
        try:
            source = path.read_bytes()
        except OSError:
            continue
        kept = []
        for doc in module_docstrings(source):
            paragraphs, dropped = prose_paragraphs(doc)
            code += dropped
            for paragraph in paragraphs:
                key = hashlib.blake2b(" ".join(paragraph.lower().split()).encode(), digest_size=16).digest()
                if key in seen:
                    duplicates += 1
                    continue
                seen.add(key)
                kept.append(paragraph)
        if kept:
            text = "\n\n".join(kept)
            words += len(text.split())
            documents.append((group, module, text))
    return documents, words, duplicates, code


def _cache_key(versions: list[tuple[str, str]]) -> str:
    facts = {
        "mhaaudit": __version__,
        "format": CORPUS_FORMAT,
        "python": platform.python_version(),
        "packages": versions,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def _read_cache(path: Path, key: str) -> Corpus | None:
    """The cached corpus, or None when the file is missing, unreadable, not this key's, or not what a cache
    file is: anything but a regular file (a named pipe would block the read), more than
    :data:`MAX_CACHE_BYTES` once decompressed, or nested deeper than Python parses."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a named pipe put here opens at once, then is refused
        with open(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # the file opened, not a name looked up before
                return None
            with gzip.GzipFile(fileobj=file, mode="rb") as handle:
                raw = handle.read(MAX_CACHE_BYTES + 1)
        if len(raw) > MAX_CACHE_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
        if data.get("key") != key:
            return None
        documents = tuple((str(g), str(m), str(t)) for g, m, t in data["documents"])
        packages = tuple((str(n), str(v)) for n, v in data["packages"])
        corpus = Corpus(documents, packages, int(data["words"]), int(data["duplicates"]), int(data["code"]))
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    if sum(len(t.split()) for _, _, t in documents) != corpus.words:
        return None
    return corpus


def _write_cache(path: Path, key: str, corpus: Corpus, progress: bool = False) -> None:
    data = {
        "key": key,
        "documents": corpus.documents,
        "packages": corpus.packages,
        "words": corpus.words,
        "duplicates": corpus.duplicates,
        "code": corpus.code,
    }
    raw = json.dumps(data).encode("utf-8")
    if len(raw) > MAX_CACHE_BYTES:  # _read_cache would refuse it: writing it would cost the disk and save nothing
        log(f"the corpus ({len(raw) >> 20} MiB) is larger than a cache file is read to; it is not cached", progress)
        return
    try:
        payload = gzip.compress(raw, compresslevel=3)
        with atomic_path(path, now=True) as tmp:
            tmp.write_bytes(payload)
    except (OSError, OutputError):
        pass  # a cache that cannot be written costs a rebuild next time, nothing else


@contextlib.contextmanager
def _build_lock(path: Path):
    """An exclusive lock beside ``path`` while the corpus is built, so that runs started
    together build it once (POSIX ``flock``; elsewhere, or when the lock file cannot be made,
    no lock)."""
    try:  # never through a link, never truncating, never blocking on a named pipe: a regular file or no lock
        fd = os.open(
            path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644
        )
    except OSError:
        yield
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        yield
        return
    with open(fd, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_LOADED: dict[Path, Corpus] = {}


def docstring_corpus(
    packages: tuple[str, ...] | list[str] | None = None, *, cache: bool = True, progress: bool = False
) -> Corpus:
    """The corpus of the installed ``packages`` (default :data:`DEFAULT_PACKAGES`; ``"stdlib"``
    is the standard library, any other name a top-level module), cached on disk (``cache``).

    Packages that are not installed are left out; the corpus names those read and their
    versions. Loaded corpora are also kept for the life of the process. With ``progress``, a
    build (the first run; tens of seconds) says on stderr what it reads and where it caches it,
    and shows a bar.
    """
    versions = _installed(tuple(DEFAULT_PACKAGES if packages is None else packages))
    if not cache:
        return _build(versions, progress)
    key = _cache_key(versions)
    path = cache_dir("corpus") / f"docstrings-{key}.json.gz"
    corpus = _LOADED.get(path) or _read_cache(path, key)
    if corpus is None:
        with _build_lock(path):
            corpus = _read_cache(path, key)  # another process may have built it meanwhile
            if corpus is None:
                corpus = _build(versions, progress, cached_in=path.parent)
                _write_cache(path, key, corpus, progress)
    _LOADED[path] = corpus
    return corpus
