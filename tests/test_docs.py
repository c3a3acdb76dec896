"""The docs site is tested like code: it builds strictly, its links and pictures resolve, a real browser
renders it (pictures loaded, search working, the API reference present), its pictures are made by
``docs/gen_figures.py`` and stamped, and the README, the changelog, ``--version`` and the package
metadata agree. The pages' Python blocks and command lines are run and parsed by ``tests/test_readme.py``.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import load_script

import mhaaudit

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
IMAGES = DOCS / "images"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# --------------------------------------------------------------------------- the build


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with ``mkdocs build --strict`` (a warning, a broken link or an unresolved API
    reference fails it), into a temporary folder."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('the docs extra is not installed (pip install -e ".[docs]")')
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_every_nav_page_is_built(site):
    import yaml

    def pages(nav):
        for item in nav:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from pages(value) if isinstance(value, list) else [value]

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(pages(config["nav"]))
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert listed == on_disk  # no page left out of the navigation, none missing
    for page in listed:
        built = site / (page.removesuffix(".md").removesuffix("index") + "/index.html").lstrip("/")
        assert built.is_file(), page


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("canonical", "alternate")):
                self.links.append((tag, a[key]))


@functools.cache
def _parsed(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_every_internal_link_and_picture_resolves(site):
    """Parsed from the built HTML: each internal link and image names a file of the site, and each
    #anchor an id on its page (the check that stands when no browser is at hand)."""
    broken = []
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        for tag, link in _parsed(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:", "javascript:")):
                continue
            base = site if parts.path.startswith("/") else page.parent  # 404.html links from the site's root
            target = (base / unquote(parts.path).lstrip("/")).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            missing = not target.is_file()
            no_anchor = not missing and bool(parts.fragment) and target.suffix == ".html"
            no_anchor = no_anchor and parts.fragment not in _parsed(target).ids
            empty_picture = not missing and tag == "img" and target.stat().st_size == 0
            if missing or no_anchor or empty_picture:
                broken.append((page.relative_to(site).as_posix(), link))
    assert not broken, broken[:20]


def test_the_generated_parts_are_filled_in(site):
    home = (site / "index.html").read_text()
    assert "images/check-vit-base.svg" in home and "Recorded by" in home
    schema = (site / "reference" / "schema" / "index.html").read_text()
    assert "witness_singular_values" in schema and "<!-- schema" not in schema
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "measured by" in bench and "what (GPU)" in bench
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("audit", "estimate_kruskal_rank", "capacity_audit", "run_memorize_grid", "reproduce_paper"):
        assert 'id="mhaaudit.' in api and re.search(rf'id="mhaaudit\.[\w.]*\b{name}"', api), name
    public = [n for n in mhaaudit.__all__ if n != "__version__"]  # the page says it covers them all
    missing = [n for n in public if not re.search(rf'id="mhaaudit\.[\w.]*\b{n}"', api)]
    assert not missing, f"public names without an entry in the API reference: {missing}"
    for cls in ("AuditResult", "KruskalResult", "CapacityResult", "MemorizeGrid", "SeedsResult"):
        assert re.search(rf'id="mhaaudit\.[\w.]*{cls}\.from_json"', api), cls
        assert re.search(rf'id="mhaaudit\.[\w.]*{cls}\.from_parquet"', api), cls
    changelog = (site / "changelog" / "index.html").read_text()
    assert "Unreleased" in changelog and "0.1.0" in changelog
    assert not re.search(r":(class|func|meth|mod|data|attr|exc):<code>", api), "a Sphinx role shown as written"


def test_a_sphinx_role_shows_as_the_code_it_names():
    hooks = load_script(DOCS / "hooks.py", "mhaaudit_docs_hooks", fresh=True)
    assert hooks.shown_roles(":class:<code>~mhaaudit.errors.InputError</code>") == "<code>InputError</code>"
    assert hooks.shown_roles("See :mod:<code>mhaaudit.request</code>.") == "See <code>mhaaudit.request</code>."


def test_a_directive_without_its_data_stops_the_build():
    hooks = load_script(DOCS / "hooks.py", "mhaaudit_docs_hooks", fresh=True)
    with pytest.raises(ValueError, match="unknown directive"):
        hooks.expand("<!-- benchmarks: tpu -->")
    with pytest.raises(ValueError, match="no recorded picture"):
        hooks.expand("<!-- stamp: nowhere.svg -->")
    with pytest.raises(ValueError, match="no column"):
        hooks.expand("<!-- schema: nosuchcommand -->")
    assert hooks.expand("text <!-- schema --> inline") == "text <!-- schema --> inline"  # a line of its own only


# --------------------------------------------------------------------------- a real browser


def _playwright():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    return sync_playwright


@contextlib.contextmanager
def _served(folder: Path):
    """The folder over HTTP on the loopback interface (search runs in a web worker: file:// will not do)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the base class's signature
        pass


def test_the_site_in_a_headless_browser(site):
    """Chromium renders the home page with its pictures loaded, search finds ``witness``, and the API
    page lists ``audit``."""
    sync_playwright = _playwright()
    with _served(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url) if r.url.startswith(base) else None)
            page.goto(base + "/", wait_until="load")
            assert page.locator("article h1").first.inner_text().strip().rstrip("¶").strip() == "mhaaudit"
            images = page.locator("article img")
            assert images.count() >= 1
            sizes = page.eval_on_selector_all("article img", "els => els.map(e => [e.complete, e.naturalWidth])")
            assert sizes and all(done and width > 0 for done, width in sizes), sizes
            assert not failed, failed

            page.locator("input.md-search__input").click()
            page.keyboard.type("witness", delay=20)  # typed: the search listens to the keys
            results = page.locator(".md-search-result__item")
            results.first.wait_for(timeout=30_000)
            assert results.count() >= 1
            assert "witness" in page.locator(".md-search-result").inner_text().lower()

            page.goto(base + "/reference/api/", wait_until="load")
            headings = page.locator("article h2, article h3").all_inner_texts()
            assert any(re.search(r"\baudit\b", h) for h in headings), headings
            assert page.locator('[id="mhaaudit.auditing.audit"]').count() == 1
        finally:
            browser.close()


# --------------------------------------------------------------------------- the pictures


def _pictures_named() -> set[str]:
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")])
    return set(re.findall(r"images/([\w.-]+\.(?:svg|png))", text))


def test_every_picture_is_recorded_and_stamped():
    """Each picture a page shows is one gen_figures.py made from a real run (not --quick), stamped with
    its command, commit and machine; and nothing is in the folder that no page shows."""
    stamps = json.loads((IMAGES / "figures.json").read_text())
    assert stamps["quick"] is False and stamps["generator"] == "docs/gen_figures.py"
    named = _pictures_named()
    assert {"check-vit-base.svg", "kruskal-sweep.svg", "capacity-vit-base.svg", "seeds.svg"} <= named
    assert {"figure1-sweep.png", "depth.png"} <= named
    on_disk = {p.name for p in IMAGES.iterdir() if p.suffix in (".svg", ".png")}
    assert named == on_disk == set(stamps["figures"])
    for name, s in stamps["figures"].items():
        assert s["command"].startswith("mhaaudit ") and re.fullmatch(r"[0-9a-f]{7,}", s["commit"]), (name, s)
        assert s["machine"]["cores"] and s["machine"]["cpu"] and s["machine"]["torch"], name
        assert (IMAGES / name).stat().st_size < 400_000, f"{name}: keep the pictures small"
    for svg in (p for p in IMAGES.glob("*.svg")):
        assert svg.read_text().lstrip().startswith("<svg"), svg.name  # rich's own export
    for png in IMAGES.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png.name
    check = (IMAGES / "check-vit-base.svg").read_text()
    assert "General" in check and "Assumption" in check  # the report's table, as text in the SVG


def test_gen_figures_records_every_picture(vit4, tmp_path, monkeypatch):
    """The script's own run at small sizes on a tiny model: every picture written, stamped --quick,
    and never into the docs' own folder; its work folder is removed."""
    gen = load_script(DOCS / "gen_figures.py", "mhaaudit_gen_figures", fresh=True)
    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert gen.main(["--quick", "--model", str(vit4)]) == 2  # --quick would replace the docs' pictures
    out = tmp_path / "figs"
    assert gen.main(["--quick", "--model", str(vit4), "--out", str(out)]) == 0
    stamps = json.loads((out / "figures.json").read_text())
    assert stamps["quick"] is True
    assert set(stamps["figures"]) == {p.name for p in out.iterdir() if p.suffix in (".svg", ".png")}
    assert set(stamps["figures"]) == {
        "check-vit-base.svg",
        "kruskal-sweep.svg",
        "figure1-sweep.png",
        "capacity-vit-base.svg",
        "depth.png",
        "seeds.svg",
    }
    check = (out / "check-vit-base.svg").read_text()
    assert check.startswith("<svg") and "Assumption" in check and "Memorisation" in check
    assert "mhaaudit check MODEL --limit 40" in stamps["figures"]["check-vit-base.svg"]["command"]
    assert gen.main(["--only", "nope", "--out", str(out)]) == 2
    assert os.listdir(scratch) == []


# --------------------------------------------------------------------------- the front page


README = (ROOT / "README.md").read_text()


def test_the_readme_is_the_front_page():
    lines = README.splitlines()
    assert len(lines) <= 150, len(lines)
    assert "(docs/images/check-vit-base.svg)" in README and (IMAGES / "check-vit-base.svg").is_file()
    assert 'pip install -e ".[dev]" && mhaaudit check vit-base' in README
    assert "\npytest\n" in README
    assert 'pip install -e ".[docs]" && mkdocs serve' in README and "mkdocs build --strict" in README
    assert "@inproceedings{" in README and "Memorization Capacity of Multi-Head Attention" in README
    assert "MIT" in README and (ROOT / "LICENSE").is_file()
    examples = re.findall(r"^mhaaudit \w+", README, re.M)
    assert 5 <= len(examples) <= 8, examples


def test_the_code_layout_names_every_module():
    """The development page's code layout names each top-level module and package of mhaaudit (a new
    one is placed in its layer there), and no file that is gone."""
    page = (DOCS / "development.md").read_text()
    block = re.search(r"^## Code layout\n.*?^```\n(.*?)^```", page, re.S | re.M).group(1)
    package = ROOT / "mhaaudit"
    modules = [p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "_version.py")]
    modules += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    unnamed = [m for m in modules if not re.search(rf"(?<![\w/.]){re.escape(m)}", block)]
    assert not unnamed, f"add to the code layout of docs/development.md: {unnamed}"
    named = re.findall(r"(?<![\w/.])(\w+\.py|\w+/)(?=[\s,;)]|$)", block, re.M)
    gone = [n for n in named if not any((d / n).exists() for d in [package, *package.iterdir()] if d.is_dir())]
    assert not gone, f"the code layout names what is not in mhaaudit: {gone}"


# --------------------------------------------------------------------------- facts stated twice


def test_the_readme_s_gpu_table_is_its_run_s_records():
    """The front page's GPU table is ``gpu_report.table`` of the committed run it names, and its words on that
    run (the three largest phases of ``check vit-base``, the GPU's busy share) are that run's."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        g = load_script(ROOT / "benchmarks" / "gpu_report.py", "gpu_report_readme", fresh=True)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    m = re.search(r"^<!-- gpu-report: (\S+) -->\n(.*?)\n<!-- /gpu-report -->$", README, re.S | re.M)
    assert m, "the README has no GPU table between its markers"
    path = ROOT / m.group(1)
    assert path.parent == ROOT / "benchmarks" / "results" / "gpu" and path.is_file(), path
    records = g.read_records(path)
    (key,) = {json.dumps(r["key"], sort_keys=True) for r in records if r.get("key") and r["part"] in g.PARTS}
    parts = g.latest(records, json.loads(key))
    stamp = next(r["stamp"] for r in reversed(records) if r.get("stamp") and r["part"] in parts)
    assert m.group(2) == g.table(parts, stamp)
    run = parts["check-vit-base"]["result"]
    phases = {k: v for k, v in run["phases_s"].items() if k not in ("total", "other")}
    largest = sorted(phases, key=phases.get, reverse=True)[:3]
    words = {
        "imports": "imports",
        "model build": "the model build",
        "data": "the data",
        "duplicate keys": "the duplicate keys",
        "forward": "the forward pass",
        "reduction": "the Assumption 2 reduction",
        "whole-set statistics": "the whole-set statistics",
        "draws": "the draws",
        "witness": "the witnesses",
    }
    after = README[m.end() :]
    flat = " ".join(after.split())
    said = re.search(r"spends most of its time in (.*?), with the GPU busy for (\d+) % of it", flat)
    assert said, "the README's words on its GPU run"
    named = re.split(r",\s+|\s+and\s+", " ".join(said.group(1).split()))
    assert named == [words[p] for p in largest]
    assert sum(phases[p] for p in largest) > run["phases_s"]["total"] / 2  # most of its time
    assert int(said.group(2)) == round(100 * run["gpu_busy_fraction"])
    te = parts["tests"]["result"]
    # what the README says of the run's tests and targets (edit both together)
    tests = re.search(r"Of the suite's CUDA tests, (\d+) passed there and (\d+) failed", flat)
    assert tests and (int(tests.group(1)), int(tests.group(2))) == (te["passed"], te["failed"])
    counts = ["No", "One", "Two", "Three", "Four", "Five"]
    targets = g.targets(parts, stamp.get("gpu"))
    met = re.search(r"(\w+) of the (\w+) targets (?:is|are) met", flat)
    assert met and met.groups() == (counts[sum(s == "PASS" for *_, s in targets)], counts[len(targets)].lower())


def _tables(page: str) -> list[list[list[str]]]:
    """The markdown tables of a page: each a list of rows, each row its cells (the rule row left out)."""
    tables, rows = [], []
    for line in [*(DOCS / page).read_text().splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            tables, rows = [*tables, rows], []
    return tables


def _checks_table(page: str) -> list[list[str]]:
    found = [t for t in _tables(page) if t[0] == ["check", "question", "how"]]
    assert len(found) == 1, f"{page}: no single table of the four checks with its header row"
    return found[0]


def test_the_four_checks_read_the_same_on_every_page():
    """The front page's table of the checks is the concepts page's, row for row; the concepts page
    quotes the report's own words (``check_words.CHECK_MEANING``) for every check."""
    from mhaaudit.check_words import CHECK_MEANING, CHECK_TITLES

    table = _checks_table("concepts/checks.md")
    assert _checks_table("index.md") == table
    checks = ["general_position", "assumption_1", "assumption_2", "assumption_3"]
    assert [row[0] for row in table[1:]] == [CHECK_TITLES[c] for c in checks]
    page = (DOCS / "concepts" / "checks.md").read_text()
    for check in checks:
        assert f"\n- {CHECK_TITLES[check]}: {CHECK_MEANING[check]}.\n" in page, check


def _family_rows() -> list[tuple[list[str], str, str, list[str]]]:
    """The family table's rows: (the families' names, the backend, the query token, the names in backticks)."""
    (table,) = [
        t
        for t in _tables("reference/families.md")
        if t[0][:3] == ["Family", "Backend (`model_type` / timm name)", "Query token"]
    ]
    return [(row[0].split(", "), row[1].split()[0], row[2], re.findall(r"`([^`]+)`", row[1])) for row in table[1:]]


_QUERY_WORDS = {"first": ("first", "class token"), "last": ("last",), "none": ("none",)}


def test_the_family_table_is_the_registry():
    """Every family registered in ``mhaaudit/models/families.py`` has its row in the family table, with
    the query token it is probed at, and every transformers ``model_type`` the table names is registered."""
    from mhaaudit.models.families import FAMILIES, TIMM_FAMILIES

    rows = _family_rows()
    for backend, label, query, key in [
        *(("transformers", f.label, f.query, name) for name, f in FAMILIES.items()),
        *(("timm", f.label.removesuffix(" (timm)"), f.query, None) for _, _, f in TIMM_FAMILIES),
    ]:
        mine = [r for r in rows if r[1] == backend and (key is None or key in r[3]) and label in r[0]]
        assert len(mine) == 1, f"docs/reference/families.md: no single {backend} row for {label} ({key})"
        assert mine[0][2].startswith(_QUERY_WORDS[query]), (label, mine[0][2], query)
    named = {name for names, backend, _, ticked in rows if backend == "transformers" for name in ticked}
    assert named == set(FAMILIES), named ^ set(FAMILIES)


# --------------------------------------------------------------------------- the changelog


CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def _releases() -> list[tuple[str, str | None]]:
    return re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", CHANGELOG, re.M)


def test_the_changelog_keeps_a_changelog():
    releases = _releases()
    assert releases[0] == ("Unreleased", "")
    assert releases[1][0] == "0.1.0" and releases[1][1], releases  # the first release, dated
    unreleased = CHANGELOG.split("## [Unreleased]")[1].split("\n## [")[0]
    assert re.findall(r"^### (\w+)$", unreleased, re.M)[:4] == ["Added", "Changed", "Fixed", "Removed"]
    body = CHANGELOG[CHANGELOG.index("## [Unreleased]") :]
    for line in body.splitlines():  # one line per change: no paragraph continues on the next line
        assert not line or line.startswith(("- ", "### ", "## [")), line
    released = CHANGELOG[CHANGELOG.index("## [0.1.0]") :]
    entries = [ln for ln in released.splitlines() if ln.startswith("- ")]
    assert len(entries) > 200 and max(map(len, entries)) <= 200, "short entries: the detail is in the docs"
    assert (DOCS / "release-notes" / "0.1.0.md").is_file()
    pending = [ln for ln in unreleased.splitlines() if ln.startswith("- ")]
    assert pending and max(map(len, pending)) <= 200, [e for e in pending if len(e) > 200]
    assert (DOCS / "release-notes" / "unreleased.md").is_file()  # the entries in full


def test_version_metadata_and_changelog_agree():
    """The version is the changelog's latest release, or, while changes wait under Unreleased, a development
    release of a later one: a file the release wrote is never taken for one this code wrote."""
    from packaging.version import Version

    latest, version = _releases()[1][0], Version(mhaaudit.__version__)
    unreleased = CHANGELOG.split("## [Unreleased]")[1].split("\n## [")[0]
    if any(ln.startswith("- ") for ln in unreleased.splitlines()):
        assert version.is_devrelease and version > Version(latest), (mhaaudit.__version__, latest)
    else:
        assert mhaaudit.__version__ == latest
    proc = subprocess.run(
        [sys.executable, "-m", "mhaaudit", "--version"], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"mhaaudit {mhaaudit.__version__}", proc.stderr
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'version = {attr = "mhaaudit._version.__version__"}' in pyproject and 'dynamic = ["version"]' in pyproject
    from importlib import metadata

    with contextlib.suppress(metadata.PackageNotFoundError):  # an installed copy says the same
        assert metadata.version("mhaaudit") == mhaaudit.__version__


def test_the_docs_extra_lists_what_the_site_needs():
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^docs = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    for package in ("mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python", "pymdown-extensions"):
        assert f'"{package}>=' in extra, package


def test_ci_builds_the_site_strictly_and_installs_the_browser():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "mkdocs build --strict" in ci and "chromium" in ci and "playwright" in ci and ".[dev,docs]" in ci


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_the_stamps_name_commits_of_this_repository():
    stamps = json.loads((IMAGES / "figures.json").read_text())["figures"]
    for name, s in stamps.items():
        sha = s["commit"].split()[0]
        proc = subprocess.run(["git", "cat-file", "-t", sha], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0 and "not a git repository" in proc.stderr:
            pytest.skip("not a git checkout")
        assert proc.stdout.strip() == "commit", (name, sha)


def test_the_memorize_guide_s_gpu_time_of_figure_2a_is_the_readme_s_run_s():
    """The memorize guide says how long the Figure 2a grid took on a GPU as the README's committed run records
    it (``gpu_report``'s own words for the time, the run's commit), not an older run's."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        g = load_script(ROOT / "benchmarks" / "gpu_report.py", "gpu_report_memorize_guide", fresh=True)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    m = re.search(r"^<!-- gpu-report: (\S+) -->$", README, re.M)
    assert m, "the README names no GPU run"
    records = g.read_records(ROOT / m.group(1))
    (key,) = {json.dumps(r["key"], sort_keys=True) for r in records if r.get("key") and r["part"] in g.PARTS}
    part = g.latest(records, json.loads(key))["memorize"]
    guide = " ".join((ROOT / "docs" / "guides" / "memorize.md").read_text(encoding="utf-8").split())
    commit = part["key"]["commit"][:7]
    if part["status"] == "done":
        done = part["result"]
        said = f"at {commit}: {g._s(done['seconds'])} for its {done['points']} points, one seed"
    else:
        said = f"left it unfinished after {g._s(g._spent(part))} at {commit}"
    assert said in guide, f"docs/guides/memorize.md should say: {said!r}"
