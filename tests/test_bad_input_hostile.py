"""The hostile-input catalogue: files and folders made by someone who wants a run to write over its
inputs, spend all the memory, read outside the folder named, hang, or crash. Each case runs through
the CLI and ends with exactly one line on stderr and exit status 2, with nothing written: no output,
no temporary, no input changed.

Each case names the arguments (``{imgs}`` and the like stand for the inputs made below; ``{out}``
for the test's own empty output folder) and a piece of the one error line. Named pipes are guarded:
a reader that opens one meets its end at once (a test fails, never hangs).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import threading
import warnings
import zipfile
import zlib

import numpy as np
import pytest
import torch
from clitools import ROOT, assert_one_error, run

pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

JSON = ["--format", "json"]
# The side of the images the bombs declare, more than mhaaudit decodes (sources.images.MAX_IMAGE_PIXELS).
BOMB_SIDE = 12000


class _RunsCode:
    """Unpickling this would create ``marker``: a checkpoint holding it must never be unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _png_bomb(side: int = BOMB_SIDE) -> bytes:
    """A 100-byte PNG whose header declares side x side RGB pixels (its data ends early: only a
    decoder that believes the header allocates 432 MB for it at BOMB_SIDE)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(4096))) + chunk(b"IEND", b"")
    )


def _docs(k: int = 60) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, size=int(rng.integers(20, 40)))) for _ in range(k)]


def _image_table(image_dir, n: int = 30):
    files = sorted(image_dir.glob("*.png"))[:n]
    return pa.table({"image": [{"bytes": f.read_bytes(), "path": None} for f in files]})


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, vit_dir, bert_dir, image_dir, timm_dir):
    """The hostile inputs the cases read (kept as they are: every case checks that none changed)."""
    d = tmp_path_factory.mktemp("hostile")
    p = {"vit": vit_dir, "bert": bert_dir, "timm": timm_dir}
    outside = d / "outside"
    outside.mkdir()
    p["marker"] = d / "UNPICKLED"
    # --- outputs over inputs: an image folder, its alias, a hub-style folder, a features file and a hard link
    imgs = d / "imgs"
    shutil.copytree(image_dir, imgs)
    (d / "imgs-alias").symlink_to(imgs)
    hub = d / "hub"
    (hub / "data").mkdir(parents=True)
    pq.write_table(_image_table(image_dir), hub / "data" / "train.parquet")
    X = np.random.default_rng(0).standard_normal((40, 8))
    pq.write_table(pa.table({f"c{i}": X[:, i] for i in range(8)}), d / "f.parquet")
    os.link(d / "f.parquet", d / "f-hard.parquet")
    p.update(imgs=imgs, imgs_alias=d / "imgs-alias", hub=hub, fpq=d / "f.parquet", fpq_hard=d / "f-hard.parquet")
    # --- size bombs, each declared in a header or in metadata
    bombs = d / "bombs"
    bombs.mkdir()
    (bombs / "b000.png").write_bytes(_png_bomb())
    for i in range(1, 40):
        os.link(bombs / "b000.png", bombs / f"b{i:03d}.png")
    pq.write_table(pa.table({f"c{i}": np.zeros(200_000) for i in range(8)}), d / "zeros.parquet")
    torch.save(torch.zeros(1000, 1000), d / "plain.pt")
    with zipfile.ZipFile(d / "plain.pt") as src, zipfile.ZipFile(d / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    shutil.copytree(vit_dir, d / "vitpre")
    (d / "vitpre" / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "ViTImageProcessor", "size": {"height": 20000, "width": 20000}})
    )
    p.update(bombs=bombs, zeros=d / "zeros.parquet", deflated=d / "deflated.pt", vitpre=d / "vitpre")
    # --- reads outside the folder named, through a data folder's metadata or links
    ds = datasets.Dataset.from_dict({"text": _docs()})
    ds.save_to_disk(str(d / "saved-out"))
    arrows = sorted((d / "saved-out").glob("*.arrow"))
    for k, arrow in enumerate(arrows):
        shutil.copy(arrow, outside / f"x{k}.arrow")
    state = json.loads((d / "saved-out" / "state.json").read_text())
    shutil.copytree(d / "saved-out", d / "saved-abs")
    state["_data_files"] = [{"filename": f"../outside/x{k}.arrow"} for k in range(len(arrows))]
    (d / "saved-out" / "state.json").write_text(json.dumps(state))
    state["_data_files"] = [{"filename": str(outside / f"x{k}.arrow")} for k in range(len(arrows))]
    (d / "saved-abs" / "state.json").write_text(json.dumps(state))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(d / "saved-dict"))
    shutil.move(d / "saved-dict" / "train", outside / "train-split")
    (d / "saved-dict" / "train").symlink_to(outside / "train-split")
    pq.write_table(_image_table(image_dir), outside / "images.parquet")
    (d / "hub-out" / "data").mkdir(parents=True)
    pq.write_table(_image_table(image_dir, 20), d / "hub-out" / "data" / "train.parquet")
    (d / "hub-out" / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: ../outside/*.parquet\n---\n"
    )
    shutil.copytree(image_dir, d / "imgs-link")
    shutil.copy(image_dir / "img_000.png", outside / "secret.png")
    (d / "imgs-link" / "zzz.png").symlink_to(outside / "secret.png")
    p.update(
        saved_out=d / "saved-out",
        saved_abs=d / "saved-abs",
        saved_dict=d / "saved-dict",
        hub_out=d / "hub-out",
        imgs_link=d / "imgs-link",
    )
    # --- timm: model_args that name a file, a checkpoint that would run code
    shutil.copytree(timm_dir, d / "timm-ckpt")
    cfg = json.loads((timm_dir / "config.json").read_text())
    cfg["model_args"]["checkpoint_path"] = str(outside / "code.pth")
    (d / "timm-ckpt" / "config.json").write_text(json.dumps(cfg))
    (outside / "code.pth").write_bytes(pickle.dumps(_RunsCode(str(p["marker"]))))
    p.update(timm_ckpt=d / "timm-ckpt", code_pth=outside / "code.pth")
    # --- named pipes where a file is read
    pipes = d / "pipes"
    pipes.mkdir()
    for name in ("f.npy", "f.parquet", "f.safetensors", "f.csv", "f.jsonl", "f.txt", "f.pt"):
        os.mkfifo(pipes / name)
    ds.save_to_disk(str(d / "saved-pipe"))
    for arrow in (d / "saved-pipe").glob("*.arrow"):
        arrow.unlink()
        os.mkfifo(arrow)
    torch_feats = d / "feat-pipe"
    torch_feats.mkdir()
    (torch_feats / "features.safetensors").write_bytes(b"")
    os.mkfifo(torch_feats / "meta.json")
    shutil.copytree(vit_dir, d / "vit-pipe")
    (d / "vit-pipe" / "config.json").unlink()
    os.mkfifo(d / "vit-pipe" / "config.json")
    shutil.copytree(timm_dir, d / "timm-pipe")
    (d / "timm-pipe" / "config.json").unlink()
    os.mkfifo(d / "timm-pipe" / "config.json")
    p.update(pipes=pipes, saved_pipe=d / "saved-pipe", feat_pipe=torch_feats, vit_pipe=d / "vit-pipe")
    p.update(timm_pipe=d / "timm-pipe")
    # --- what made the run end with a bug (status 3)
    deep_imgs, deep_text = d / "deep-imgs", d / "deep-text"  # listing them recursively reached Python's limit
    for top in (deep_imgs, deep_text):
        top.joinpath(*["d"] * 200).mkdir(parents=True)
    shutil.copy(image_dir / "img_000.png", deep_imgs.joinpath(*["d"] * 200, "x.png"))
    deep_text.joinpath(*["d"] * 200, "x.txt").write_text(_docs(1)[0])
    shutil.copytree(vit_dir, d / "vit-deep")
    (d / "vit-deep" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    torch.save(torch.empty(40, 8, device="meta"), d / "meta.pt")
    torch.save(torch.randn(40, 8).to_sparse(), d / "sparse.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR support is "in beta"
        torch.save({"queries": torch.randn(40, 8).to_sparse_csr()}, d / "csr.pt")
    pq.write_table(pa.table({"config_key": [1, 2], "heads": [1, 2]}), d / "resume-int.parquet")
    p.update(deep_imgs=deep_imgs, deep_text=deep_text, vit_deep=d / "vit-deep", meta_pt=d / "meta.pt")
    p.update(sparse_pt=d / "sparse.pt", csr_pt=d / "csr.pt", resume_int=d / "resume-int.parquet")
    return {k: str(v) for k, v in p.items()}


def _digest(folder: str) -> dict[str, str]:
    """Every file under ``folder`` (not following links) and a hash of its bytes: what a case must leave as it was."""
    out = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [x for x in dirs if not os.path.islink(os.path.join(root, x))]
        for name in names:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
            else:
                out[os.path.relpath(path, folder)] = oct(mode)
    return out


@pytest.fixture()
def pipes_guarded(hostile):
    """Writers waiting on every named pipe: a reader that opens one gets its end at once (the case then fails
    with a wrong message instead of hanging the suite). The writers are let go when the test ends."""
    fifos = [
        os.path.join(root, n)
        for root, _, names in os.walk(os.path.dirname(hostile["pipes"]))
        for n in names
        if stat.S_ISFIFO(os.lstat(os.path.join(root, n)).st_mode)
    ]

    def wait_for_reader(path: str) -> None:
        os.close(os.open(path, os.O_WRONLY))  # returns once a reader opened it; the reader then reads its end

    threads = [threading.Thread(target=wait_for_reader, args=(f,), daemon=True) for f in fifos]
    for t in threads:
        t.start()
    yield
    for f, t in zip(fifos, threads, strict=True):
        if t.is_alive():  # nobody read it: open the read end ourselves, so the writer returns
            fd = os.open(f, os.O_RDONLY | os.O_NONBLOCK)
            t.join(timeout=5)
            os.close(fd)


# (case id, arguments, a piece of the one error line).
CASES = [
    # --- outputs over inputs: compared by device and inode, never written
    ("plot-over-an-input-image", "check {vit} --data {imgs} --plot {imgs}/img_000.png", "lies inside"),
    ("out-over-the-hub-data-file", "check {vit} --data {hub} --out {hub}/data/train.parquet", "lies inside"),
    ("out-inside-a-folder-named-after-hf", "check {vit} --data hf:{hub} --out {hub}/r.parquet", "lies inside"),
    ("plot-into-the-input-through-a-link", "check {vit} --data {imgs} --plot {imgs_alias}/new.png", "lies inside"),
    ("save-features-into-the-input", "check {vit} --data {imgs} --save-features {imgs}/feat", "lies inside"),
    ("out-over-a-hard-link-of-the-input", "kruskal {fpq} --out {fpq_hard}", "is an input of this run"),
    ("kruskal-out-inside-the-model", "kruskal --model {vit} --limit 20 --out {vit}/o.parquet", "lies inside"),
    ("kruskal-plot-inside-the-model", "kruskal --model {vit} --limit 20 --plot {vit}/f.png", "lies inside"),
    (
        "reproduce-out-inside-the-model",
        "reproduce table1 --model vit={vit} --limit 20 --out {vit}/o.parquet",
        "lies inside",
    ),
    (
        "reproduce-plot-inside-the-model",
        "reproduce figure1 --model vit={vit} --limit 20 --plot {vit}/f.png",
        "lies inside",
    ),
    ("check-out-inside-the-model", "check {vit} --limit 20 --out {vit}/o.parquet", "lies inside"),
    (
        "out-and-save-features-the-same",
        "check {vit} --data {imgs} --out {out}/x.parquet --save-features {out}/x.parquet",
        "name the same path",
    ),
    (
        "plot-and-save-features-the-same",
        "check {vit} --data {imgs} --plot {out}/x.png --save-features {out}/x.png",
        "name the same path",
    ),
    # --- bombs: bounded by what headers and metadata declare, before the memory is spent
    ("png-pixel-bomb", "check {vit} --data {bombs} --limit 20", f"declares {BOMB_SIDE} x {BOMB_SIDE} pixels"),
    ("preprocessor-asks-for-huge-images", "check {vitpre} --data {imgs} --limit 20", "size height = 20000"),
    # --- reads outside the folder named
    ("state-json-names-dotdot", "check {bert} --data {saved_out} --context-length 16", "outside"),
    ("state-json-names-absolute", "check {bert} --data {saved_abs} --context-length 16", "outside"),
    ("split-folder-links-out", "check {bert} --data {saved_dict} --context-length 16", "symbolic link to"),
    ("readme-data-files-dotdot", "check {vit} --data {hub_out} --limit 20", "outside the folder"),
    ("image-folder-links-out", "check {vit} --data {imgs_link} --limit 20", "zzz.png is a symbolic link to"),
    ("timm-model-args-checkpoint-path", "check {timm_ckpt} --limit 20", "'checkpoint_path'"),
    (
        "timm-checkpoint-runs-code",
        "check {timm} --variants trained --weights {code_pth} --limit 20",
        "cannot read the timm checkpoint",
    ),
    # --- named pipes: refused before they are opened
    ("pipe-npy", "kruskal {pipes}/f.npy", "named pipe"),
    ("pipe-parquet", "kruskal {pipes}/f.parquet", "named pipe"),
    ("pipe-safetensors", "kruskal {pipes}/f.safetensors", "named pipe"),
    ("pipe-pt", "kruskal {pipes}/f.pt", "named pipe"),
    ("pipe-csv", "check {bert} --data {pipes}/f.csv --context-length 16", "named pipe"),
    ("pipe-jsonl", "check {bert} --data {pipes}/f.jsonl --context-length 16", "named pipe"),
    ("pipe-txt", "check {bert} --data {pipes}/f.txt --context-length 16", "named pipe"),
    ("pipe-saved-dataset-arrow", "check {bert} --data {saved_pipe} --context-length 16", "named pipe"),
    ("pipe-meta-json", "kruskal {feat_pipe}", "meta.json is a named pipe"),
    ("pipe-config-json", "check {vit_pipe}", "config.json is a named pipe"),
    ("pipe-timm-config-json", "check {timm_pipe}", "config.json is a named pipe"),
    ("pipe-weights", "check {vit} --variants trained --weights {pipes}/f.safetensors", "named pipe"),
    (
        "pipe-capacity-from",
        "capacity {vit} --from {pipes}/f.parquet --limit 20",
        "f.parquet is a named pipe",
    ),
    ("pipe-memorize-resume", "memorize --sizes 16 --device cpu --out {pipes}/f.parquet", "named pipe"),
    # --- input that ended as a bug (status 3) before
    ("deep-image-folder", "check {vit} --data {deep_imgs} --limit 20", "nested more than 64 folders deep"),
    ("deep-text-folder", "check {bert} --data {deep_text} --context-length 16", "nested more than 64 folders deep"),
    ("config-nested-100000-deep", "check {vit_deep}", "nested too deeply"),
    ("pt-meta-tensor", "kruskal {meta_pt}", "on the meta device"),
    ("pt-sparse-tensor", "kruskal {sparse_pt}", "sparse_coo, not a dense tensor"),
    ("pt-sparse-csr-tensor", "kruskal {csr_pt} --key queries", "sparse_csr, not a dense tensor"),
    ("memorize-resume-integer-keys", "memorize --sizes 16 --device cpu --out {resume_int}", "holds int64, not text"),
]


@pytest.mark.parametrize("case, args, match", CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_line(capsys, hostile, pipes_guarded, tmp_path, case, args, match):
    out = tmp_path / "out"
    out.mkdir()
    before = _digest(os.path.dirname(hostile["imgs"]))
    words = shlex.split(args.format(out=out, **hostile))
    rc, stdout, err = run(capsys, words[0], *JSON, *words[1:])
    assert_one_error(rc, err, match)
    assert stdout == ""
    assert _digest(os.path.dirname(hostile["imgs"])) == before, "an input was changed"
    assert os.listdir(out) == [], "a file was left behind"
    assert not os.path.exists(hostile["marker"]), "a pickle was unpickled"


def test_every_case_has_its_own_id():
    assert len({c[0] for c in CASES}) == len(CASES)


def test_an_output_through_a_bind_mount_of_an_input_folder_is_refused(capsys, hostile, tmp_path):
    """The same folder under another real path (same device and inode): a path comparison would let it by."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "--bind", hostile["imgs"], str(mnt)], capture_output=True, check=False).returncode
    ):
        pytest.skip("cannot bind-mount here")
    try:
        before = (mnt / "img_000.png").read_bytes()
        rc, stdout, err = run(capsys, "check", hostile["vit"], "--data", hostile["imgs"], "--plot", mnt / "img_000.png")
        assert_one_error(rc, err, "lies inside")
        rc, stdout, err = run(capsys, "check", hostile["vit"], "--data", mnt, "--out", f"{hostile['imgs']}/r.parquet")
        assert_one_error(rc, err, "lies inside")
        assert (mnt / "img_000.png").read_bytes() == before and stdout == ""
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, check=False)


def test_a_config_that_is_a_character_device_is_refused(capsys, vit_dir, timm_dir, tmp_path):
    """/dev/zero as config.json (a root tar extraction keeps such a node) would be read without end."""
    for name, src in (("vit", vit_dir), ("timm", timm_dir)):
        shutil.copytree(src, tmp_path / name)
        (tmp_path / name / "config.json").unlink()
        try:
            os.mknod(tmp_path / name / "config.json", stat.S_IFCHR | 0o644, os.makedev(1, 5))
        except (PermissionError, OSError):
            pytest.skip("cannot make a device node here")
        rc, stdout, err = run(capsys, "check", tmp_path / name, *JSON)
        assert_one_error(rc, err, "config.json is a character device")
        assert stdout == ""


@pytest.mark.parametrize("variants", ["random", "random,trained"])
def test_a_folder_whose_tokenizer_or_preprocessing_cannot_be_read_is_refused(
    capsys, vit_dir, bert_dir, tmp_path, variants
):
    """A truncated tokenizer.json (or preprocessor_config.json) was taken for no tokenizer (no processor): a random
    column was fed another vocabulary and said the model shipped none, a trained one was refused as having no
    tokenizer files; images were resized as the config says. Each is one line naming the file, and exit 2."""
    bert, vit = tmp_path / "bert", tmp_path / "vit"
    shutil.copytree(bert_dir, bert)
    shutil.copytree(vit_dir, vit)
    (bert / "tokenizer.json").write_text('{"version": "1.0", "model": {\n')
    (vit / "preprocessor_config.json").write_text('{"size": ')
    common = ["--variants", variants, "--limit", "20", "--samples", "20", *JSON]
    rc, stdout, err = run(capsys, "check", bert, "--context-length", "16", *common)
    assert_one_error(rc, err, f"the tokenizer files of {bert} (tokenizer.json, vocab.txt) cannot be read: Expecting")
    assert stdout == ""
    rc, stdout, err = run(capsys, "check", vit, *common)
    assert_one_error(rc, err, f"the preprocessor_config.json of {vit} cannot be read: ")
    assert stdout == ""


def test_a_png_bomb_is_never_decoded(monkeypatch, capsys, hostile):
    """The header is believed only as far as it is checked: no image declaring more pixels than the cap reaches PIL's
    decoder (40 links to one bomb reached 7.1 GB)."""
    from PIL import ImageFile

    from mhaaudit.sources import images

    real = ImageFile.ImageFile.load

    def load(self):
        assert self.size[0] * self.size[1] <= images.MAX_IMAGE_PIXELS, "a bomb reached the decoder"
        return real(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    rc, _, err = run(capsys, "check", hostile["vit"], "--data", hostile["bombs"], "--limit", "20", *JSON)
    assert_one_error(rc, err, "only 0 usable images of 40")


def test_a_skipped_bomb_adds_no_library_warning_to_stderr(hostile, tmp_path):
    """An image declaring more pixels than PIL decodes without question (BOMB_SIDE^2, between PIL's limit and twice
    it) is skipped and named in the report, on the command line without PIL's warning (a path into its source and
    the line that warned) beside it on stderr."""
    from PIL import Image

    from mhaaudit.sources import decoding

    assert decoding.MAX_IMAGE_PIXELS < Image.MAX_IMAGE_PIXELS < BOMB_SIDE**2 <= 2 * Image.MAX_IMAGE_PIXELS
    folder = tmp_path / "imgs"
    folder.mkdir()
    for f in sorted(os.listdir(hostile["imgs"]))[:24]:
        shutil.copy(os.path.join(hostile["imgs"], f), folder / f)
    (folder / "a-bomb.png").write_bytes(_png_bomb())
    proc = subprocess.run(
        [sys.executable, "-m", "mhaaudit", "check", hostile["vit"], "--data", folder, "--limit", "20", *JSON],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "DecompressionBomb" not in proc.stderr and "warn" not in proc.stderr.lower(), proc.stderr
    said = json.dumps(json.loads(proc.stdout))
    assert f"a-bomb.png: its header declares {BOMB_SIDE} x {BOMB_SIDE} pixels" in said


@pytest.mark.parametrize("kind", ["parquet", "pt"])
def test_what_a_file_declares_is_bounded_before_it_is_read(monkeypatch, capsys, hostile, kind):
    """A 1.4 MB parquet of zeros declaring 40M x 8 values, a .pt of deflated records: the memory they declare is
    checked against the memory available before a byte is decoded (here the memory available is made small)."""
    import pyarrow.parquet as pqm

    from mhaaudit import hostmem

    def trap(*a, **k):
        raise AssertionError("the file was read before its declared size was checked")

    monkeypatch.setattr(hostmem, "available_memory", lambda: 3_000_000)
    monkeypatch.setattr(pqm, "read_table", trap)
    monkeypatch.setattr(torch, "load", trap)
    path = hostile["zeros"] if kind == "parquet" else hostile["deflated"]
    assert os.path.getsize(path) < 3_000_000
    rc, _, err = run(capsys, "kruskal", path, *JSON)
    words = "its footer declares 200000 rows of 8 columns" if kind == "parquet" else "of them compressed"
    line = assert_one_error(rc, err, words)
    assert ("more than the 3.0 MB available" if kind == "parquet" else "3.0 MB are available") in line


def test_a_timm_checkpoint_is_read_with_weights_only(monkeypatch, capsys, hostile):
    """timm's own loader defaulted to weights_only=False before 1.0.24: mhaaudit always passes True."""
    import timm.models

    seen = []
    real = timm.models.load_state_dict

    def spy(path, *a, **k):
        seen.append(k.get("weights_only"))
        return real(path, *a, **k)

    monkeypatch.setattr(timm.models, "load_state_dict", spy)
    rc, _, err = run(
        capsys, "check", hostile["timm"], "--variants", "trained", "--weights", hostile["code_pth"], "--limit", "20"
    )
    assert_one_error(rc, err, "cannot read the timm checkpoint")
    # read twice, each with weights_only: the check before any work (fake tensors), then the load, which refuses
    assert seen == [True, True] and not os.path.exists(hostile["marker"])


def test_every_torch_load_passes_weights_only_explicitly():
    """Whatever torch defaults to (False before 2.6), every torch.load of a file names weights_only=True; the one
    exception reads what the job's own processes sent one another."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "mhaaudit"
    calls = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("torch.load", "load_state_dict"):
                kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if ast.unparse(node.func) == "load_state_dict" and "use_ema" not in kw:
                    continue  # a module's own load_state_dict, not timm's reader
                calls.append((path.name, kw.get("weights_only")))
    assert calls and all(w == "True" for name, w in calls if name != "collectives.py"), calls
    assert [w for name, w in calls if name == "collectives.py"] == ["False"]


def test_a_wide_csv_header_is_read_and_a_too_long_one_refused_for_what_it_is(monkeypatch, tmp_path):
    """A 1.3 MB header (200k columns) was refused as "Empty CSV file" (pyarrow's 1 MB block)."""
    from pathlib import Path

    from mhaaudit.errors import DataError
    from mhaaudit.sources import containers

    n = 200_000
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(["text", *(f"c{i}" for i in range(n))]) + "\n" + ",".join(["hello", *["1"] * n]) + "\n")
    assert os.path.getsize(wide) > 1 << 20
    table = containers.table_of(Path(wide))
    assert len(table.kinds) == n + 1 and table.kinds["text"] == "text" and list(table.values("text")) == ["hello"]
    monkeypatch.setattr(containers, "MAX_CSV_HEADER", 1 << 20)
    with pytest.raises(DataError, match="its first line \\(the header\\) is longer than 1 MiB"):
        containers.table_of(Path(wide))


def test_decoded_images_alive_at_once_are_bounded(monkeypatch, tmp_path):
    """Images are decoded ahead of the pass only within a budget of bytes (the next image the pass takes always
    decodes, so one larger than the budget still passes); the images and their order are those of an unbounded
    pass."""
    import time

    from PIL import Image

    from mhaaudit.sources import images

    for i in range(16):
        Image.fromarray(np.full((64, 48, 3), i * 9, np.uint8), "RGB").save(tmp_path / f"i{i:02d}.png")
    one = 64 * 48 * 4
    monkeypatch.setattr(images, "DECODE_AHEAD_SHARE", 1)
    monkeypatch.setattr(images, "DECODE_AHEAD_MAX", 3 * one)
    peak = []
    real = images.DecodeBudget.acquire

    def acquire(self, index, size):
        real(self, index, size)
        peak.append(self.held)

    monkeypatch.setattr(images.DecodeBudget, "acquire", acquire)
    got = []
    for image in images.ImageFolder(tmp_path, limit=16):
        time.sleep(0.01)  # a slow pass: the workers run ahead as far as the budget lets them
        got.append(np.asarray(image)[0, 0, 0])
        del image
    assert got == [i * 9 for i in range(16)]
    assert peak and max(peak) <= 4 * one  # the budget, and at most the one image the pass takes next
    monkeypatch.setattr(images, "DECODE_AHEAD_MAX", one // 2)  # smaller than one image: each still passes
    assert len(list(images.ImageFolder(tmp_path, limit=16))) == 16


def test_an_image_declaring_too_many_pixels_is_skipped_by_its_header(tmp_path):
    from mhaaudit.sources import images

    Image = pytest.importorskip("PIL.Image")
    for i in range(3):
        Image.fromarray(np.full((20, 20, 3), i, np.uint8), "RGB").save(tmp_path / f"ok{i}.png")
    (tmp_path / "zz-bomb.png").write_bytes(_png_bomb())
    src = images.ImageFolder(tmp_path, limit=10)
    scan = src.scan()
    assert scan.usable == 3 and scan.skips.count("unreadable") == 1
    assert len(list(src)) == 3
    assert f"{BOMB_SIDE} x {BOMB_SIDE} pixels, more than the" in src.skips.describe()


def test_an_image_past_pil_s_own_ceiling_is_named_as_any_other(tmp_path):
    """An image declaring more than twice PIL's MAX_IMAGE_PIXELS makes PIL itself refuse to open it: the report
    said so in PIL's words, naming PIL's ceiling (178956970) as the limit instead of the documented 2^26."""
    from PIL import Image

    from mhaaudit.sources import images

    side = 30000
    assert side * side > 2 * Image.MAX_IMAGE_PIXELS
    Image.fromarray(np.zeros((20, 20, 3), np.uint8), "RGB").save(tmp_path / "ok.png")
    (tmp_path / "zz-huge.png").write_bytes(_png_bomb(side))
    src = images.ImageFolder(tmp_path, limit=10)
    scan = src.scan()
    assert scan.usable == 1
    said = scan.skips.describe()
    assert f"zz-huge.png: its header declares {side * side} pixels, more than the {images.MAX_IMAGE_PIXELS}" in said
    assert "DOS" not in said and str(2 * Image.MAX_IMAGE_PIXELS) not in said


@pytest.fixture()
def specials(tmp_path):
    """Outputs that are not regular files: a character device (root only), a named pipe, a socket and a
    symbolic link to a device; each must be left as it is."""
    import socket

    d = tmp_path / "specials"
    d.mkdir()
    made = {}
    if os.geteuid() == 0:
        os.mknod(d / "dev.parquet", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        made["dev.parquet"] = "a character device"
    os.mkfifo(d / "pipe.png")
    made["pipe.png"] = "a named pipe"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock"))
    made["sock"] = "a socket"
    (d / "null.parquet").symlink_to("/dev/null")
    made["null.parquet"] = "a symbolic link to a character device"
    before = {name: os.lstat(d / name).st_mode for name in made}
    yield d, made
    sock.close()
    assert {name: os.lstat(d / name).st_mode for name in made} == before, "an output replaced a special file"
    assert sorted(os.listdir(d)) == sorted(made), "a file was left behind"


def test_an_output_that_is_a_device_pipe_or_socket_is_refused(capsys, hostile, vit_series_dirs, specials, no_model):
    """Every output (--out, --plot, --save-features, a resume file) that stands at a device node, a named pipe
    or a socket (or a link to one) is refused before any work: the rename would put a file in its place."""
    d, made = specials
    dev = "dev.parquet" if "dev.parquet" in made else "null.parquet"
    vit, first, second = vit_series_dirs
    cases = [
        (("kruskal", hostile["fpq"], "--out", d / dev), dev),
        (("kruskal", hostile["fpq"], "--out", d / "null.parquet"), "null.parquet"),
        (("check", vit, "--plot", d / "pipe.png"), "pipe.png"),
        (("check", vit, "--save-features", d / "sock"), "sock"),
        (("check", vit, "--save-features", d / "pipe.png"), "pipe.png"),
        (("capacity", vit, "--plot", d / "pipe.png"), "pipe.png"),
        (("memorize", "--sizes", 16, "--device", "cpu", "--out", d / dev), dev),  # its resume file
        (("check", vit, "--checkpoints", f"{first},{second}", "--out", d / dev), dev),  # the series' resume file
    ]
    for args, name in cases:
        rc, stdout, err = run(capsys, args[0], *JSON, *args[1:])
        line = assert_one_error(rc, err, f"{d / name}")
        assert made[name] in line, line
        assert stdout == ""


def test_a_column_folder_that_is_a_pipe_is_refused_before_the_work(capsys, vit_dir, tmp_path, no_model):
    """--save-features FOLDER writes FOLDER/random/features.safetensors: a pipe or a file there is refused first."""
    feats = tmp_path / "feats"
    (feats / "trained").mkdir(parents=True)
    os.mkfifo(feats / "random")
    os.mkfifo(feats / "trained" / "meta.json")
    rc, stdout, err = run(capsys, "check", vit_dir, *JSON, "--save-features", feats)
    assert_one_error(rc, err, "random is a named pipe")
    assert stdout == ""
    os.unlink(feats / "random")
    rc, stdout, err = run(capsys, "check", vit_dir, *JSON, "--save-features", feats)
    assert_one_error(rc, err, "meta.json is a named pipe")
    assert stdout == ""
    assert sorted(os.listdir(feats)) == ["trained"] and os.listdir(feats / "trained") == ["meta.json"]


def test_save_features_through_a_link_into_an_input_folder_is_refused(capsys, hostile, tmp_path, no_model):
    """The link is compared by where it leads: a folder inside the input folder (made or not yet) is inside it."""
    data = tmp_path / "imgs"
    shutil.copytree(hostile["imgs"], data)
    (data / "sub").mkdir()
    (tmp_path / "to-sub").symlink_to(data / "sub")
    (tmp_path / "to-new").symlink_to(data / "new")
    for link in ("to-sub", "to-new"):
        args = ("--data", data, "--save-features", tmp_path / link)
        rc, stdout, err = run(capsys, "check", hostile["vit"], *JSON, *args)
        assert_one_error(rc, err, "lies inside")
        assert stdout == ""
    assert os.listdir(data / "sub") == [] and not os.path.exists(data / "new")


def test_a_refused_output_touches_nothing_in_the_input_folder(capsys, hostile, monkeypatch, tmp_path, no_model):
    """The overlap is refused before an output's folder is tried for writing: no probe file or folder is
    made (and removed) in an input folder."""
    import tempfile

    touched = []
    for name in ("mkstemp", "mkdtemp"):
        real = getattr(tempfile, name)

        def spy(*a, _real=real, **k):
            touched.append(os.path.realpath(k.get("dir") or "."))
            return _real(*a, **k)

        monkeypatch.setattr(tempfile, name, spy)
    imgs = os.path.realpath(hostile["imgs"])
    cases = [
        ("check", hostile["vit"], "--data", imgs, "--plot", f"{imgs}/new.png"),
        ("check", hostile["vit"], "--data", imgs, "--out", f"{imgs}/r.parquet"),
        ("check", hostile["vit"], "--data", imgs, "--save-features", f"{imgs}/feats"),
        ("check", hostile["vit"], "--data", imgs, "--save-features", hostile["imgs_alias"]),
        ("capacity", hostile["vit"], "--data", imgs, "--plot", f"{imgs}/new.png"),
        ("kruskal", hostile["fpq"], "--out", hostile["fpq_hard"]),
    ]
    for args in cases:
        rc, stdout, err = run(capsys, args[0], *JSON, *args[1:])
        assert_one_error(rc, err)
        assert stdout == ""
        assert not [t for t in touched if t == imgs or t.startswith(imgs + os.sep)], (args, touched)
        assert os.path.dirname(os.path.realpath(hostile["fpq"])) not in touched, (args, touched)


@pytest.fixture()
def no_model(monkeypatch):
    """Fail the test if a model is loaded or a draw is made: the outputs are refused first."""
    from mhaaudit import pipeline

    def refuse(*a, **k):
        raise AssertionError("work began before the output was refused")

    monkeypatch.setattr(pipeline, "load", refuse)


@pytest.fixture()
def vit_series_dirs(vit_dir, tmp_path):
    """The tiny ViT and two copies of it as checkpoints (a series' specs)."""
    for name in ("ckpt-1", "ckpt-2"):
        shutil.copytree(vit_dir, tmp_path / name)
    return vit_dir, tmp_path / "ckpt-1", tmp_path / "ckpt-2"


def _repeating(path, rows: int, width: int, *names: str):
    """A parquet file of a few KB whose text columns ``names`` repeat one string of ``width`` characters on every
    row (dictionary-encoded, as ``pq.write_table`` writes text): rows x width bytes once read."""
    value = pa.array(["z" * width] * rows)
    pq.write_table(pa.table(dict.fromkeys(names, value)), path)
    assert os.path.getsize(path) < 100_000
    return path


@pytest.mark.parametrize(
    "case, args, words",
    [
        ("capacity-from", "capacity {vit} --from {file} --limit 20", "--from {file}: reading it needs at least"),
        ("memorize-resume", "memorize --sizes 16 --device cpu --out {file}", "existing results file {file}: reading"),
        ("data-text", "check {bert} --data {file} --context-length 16", "256 rows of its column 'text' decode to"),
    ],
)
def test_dictionary_text_is_sized_as_it_decodes(monkeypatch, capsys, hostile, tmp_path, case, args, words):
    """A few KB of parquet that repeat one long string through a dictionary decode to one copy a row: every read of
    such a file is refused in one line, before it is decoded, once what it takes exceeds the memory available
    (made 10 MB here); the footer's sizes alone (a few KB) let it through before."""
    from mhaaudit import files

    def trap(*a, **k):
        raise AssertionError("the file was read before its decoded size was checked")

    monkeypatch.setattr(files, "memory_limit", lambda: 10_000_000)
    monkeypatch.setattr(pq, "read_table", trap)
    if case == "data-text":  # read 256 rows at a time: one batch of 100 KB strings takes 25 MB
        path = _repeating(tmp_path / "d.parquet", 600, 100_000, "text")
    else:  # read whole: 20000 rows of 10 KB strings, 200 MB a column
        path = _repeating(tmp_path / "d.parquet", 20_000, 10_000, "check", "variant", "config_key")
    words = words.format(file=path)
    rc, out, err = run(capsys, *shlex.split(args.format(file=path, **hostile)))
    line = assert_one_error(rc, err, words)
    assert "more than the 10.0 MB available" in line and out == ""


def test_results_read_back_are_sized_first(monkeypatch, hostile, tmp_path):
    """``MemorizeGrid.from_parquet`` reads the rows whole: refused as the resume file is; a result's own
    ``from_parquet`` (``AuditResult``) reads only the footer's metadata, never a row."""
    from mhaaudit import AuditResult, files
    from mhaaudit.errors import InputError
    from mhaaudit.memorize import MemorizeGrid

    path = _repeating(tmp_path / "d.parquet", 20_000, 10_000, "config_key")
    monkeypatch.setattr(files, "memory_limit", lambda: 10_000_000)
    with pytest.raises(InputError, match=r"d\.parquet: reading it needs at least .* more than the 10\.0 MB available"):
        MemorizeGrid.from_parquet(path)
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("a row was read"))
    with pytest.raises(InputError, match=r"d\.parquet"):
        AuditResult.from_parquet(path)


_CONFIGS = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/*.parquet\n---\n"


def _dataset_folder(folder, groups: list[list[str]]):
    """A dataset folder as the hub stores them (``README.md`` listing ``data/*.parquet``) whose one data file holds a
    row group for each list of ``groups``, its text dictionary-encoded (as ``pq.write_table`` writes it)."""
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text(_CONFIGS)
    with pq.ParquetWriter(folder / "data" / "train.parquet", pa.schema([("text", pa.string())])) as writer:
        for docs in groups:
            writer.write_table(pa.table({"text": docs}))
    return folder


def test_a_dataset_folders_row_groups_are_sized_before_they_are_read(monkeypatch, capsys, hostile, tmp_path):
    """The datasets library reads a dataset folder's parquet file a row group at a time, each decoded whole: a row
    group of a few KB that repeats a 100 KB string on 600 rows (60 MB once read) is refused in one line naming the
    file, the row group, what it takes and the memory available (made 10 MB here), before the library reads a row;
    it was read whole before. A folder larger than that limit in all, a row group at a time within it, is read."""
    from mhaaudit import files
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    def trap(*a, **k):
        raise AssertionError("the dataset was read before its row groups were sized")

    big = _dataset_folder(tmp_path / "big", [["z" * 100_000] * 600])
    assert os.path.getsize(big / "data" / "train.parquet") < 100_000
    monkeypatch.setattr(files, "memory_limit", lambda: 10_000_000)
    streaming = datasets.builder.DatasetBuilder.as_streaming_dataset
    monkeypatch.setattr(datasets.builder.DatasetBuilder, "as_streaming_dataset", trap)
    args = ("--limit", "20", "--samples", "20", "--context-length", "16")
    rc, out, err = run(capsys, "check", hostile["bert"], "--data", big, *args)
    words = f"dataset folder {big}: its data file {big / 'data' / 'train.parquet'} (split train): reading it a row"
    line = assert_one_error(rc, err, words + " group at a time needs at least 1")
    assert "(its row group 0 (of 1) declares 600 rows of 1 columns, its dictionary-encoded text decodes to" in line
    assert "more than the 10.0 MB available; the datasets library decodes a row group whole" in line and out == ""
    with pytest.raises(DataError, match=r"train\.parquet \(split train\): reading it a row group at a time"):
        text_source(str(big))
    monkeypatch.setattr(datasets.builder.DatasetBuilder, "as_streaming_dataset", streaming)
    docs = [" ".join([d] * 300) for d in _docs(200)]  # 60 KB each, 600 KB a row group of 10
    ok = _dataset_folder(tmp_path / "ok", [docs[i : i + 10] for i in range(0, 200, 10)])
    assert pq.read_table(ok / "data" / "train.parquet").nbytes > 10_000_000  # larger than the limit, read all the same
    assert list(text_source(str(ok), limit=3)) == docs[:3]
    rc, out, err = run(capsys, "check", hostile["bert"], "--data", ok, *args, "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["records"]


def test_a_json_data_file_whose_later_batch_starts_a_list_is_sized_to_its_end(monkeypatch, tmp_path):
    """The datasets library's JSON reader reads the rest of a file at once where a batch (10 MB, then the rest of the
    line) starts with ``[``: 6 MB of JSON lines, then 60.5 MB of lines that each start a list (a few KB of gzip), is
    refused before it reads it, naming the byte that batch starts at; the same lines as objects read as before."""
    import gzip

    from mhaaudit import files
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    def folder(name: str, later: str):
        (tmp_path / name / "data").mkdir(parents=True)
        (tmp_path / name / "README.md").write_text(_CONFIGS.replace("*.parquet", "train.jsonl.gz"))
        with gzip.open(tmp_path / name / "data" / "train.jsonl.gz", "wt") as f:
            f.write(('{"text": "' + "y" * 48 + '"}\n') * 100_000)  # 6 MB
            f.write(later * 1_100_000)  # 60.5 MB
        return tmp_path / name

    monkeypatch.setattr(files, "memory_limit", lambda: 200_000_000)  # 50 MB at once
    lists = folder("lists", '["' + "z" * 50 + '"]\n')
    with pytest.raises(DataError, match=r"\(the rest of it from byte 1048\d{4}, where a batch starts with '\[', at "
                       r"least 5\d\.\d MB: .* reads the rest of it whole$"):  # fmt: skip
        text_source(f"hf:{lists}")
    objects = folder("objects", '{"text": "' + "z" * 46 + '"}\n')
    assert next(iter(text_source(f"hf:{objects}", limit=1))) == "y" * 48


def test_a_text_dataset_read_by_paragraph_is_sized_by_its_longest_paragraph(monkeypatch, tmp_path):
    """A text data set whose metadata says ``sample_by: paragraph`` is read a paragraph at a time (lines up to a blank
    one): a few KB of gzip holding 45 MB of short lines and no blank line is one paragraph the datasets library would
    hold whole, and is refused before it reads it, naming the paragraph; the same lines read line by line, and
    paragraphs of a few lines, read as before."""
    import gzip

    from mhaaudit import files
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    def folder(name: str, text: str, sample_by: str):
        (tmp_path / name / "data").mkdir(parents=True)
        config = _CONFIGS.replace("path: data/*.parquet", f"path: data/train.txt.gz\n  sample_by: {sample_by}")
        (tmp_path / name / "README.md").write_text(config)
        with gzip.open(tmp_path / name / "data" / "train.txt.gz", "wt") as f:
            f.write(text)
        return tmp_path / name

    monkeypatch.setattr(files, "memory_limit", lambda: 200_000_000)  # 50 MB at once: 10 MB a batch, then the rest
    lines = ("z" * 59 + "\n") * 750_000  # 45 MB
    big = folder("big", lines, "paragraph")
    with pytest.raises(DataError, match=r"holds at least 5\d\.\d MB at once \(its longest paragraph, at least .*"
                       r"reads a paragraph whole$"):  # fmt: skip
        text_source(f"hf:{big}")
    assert next(iter(text_source(f"hf:{folder('by-line', lines, 'line')}", limit=1))) == "z" * 59
    docs = [f"paragraph {i}\nof two lines" for i in range(20)]
    ok = folder("ok", "\n\n".join(docs) + "\n", "paragraph")
    assert list(text_source(f"hf:{ok}", limit=3)) == docs[:3]


def test_a_text_or_csv_data_file_that_starts_with_a_bracket_is_read_line_by_line(monkeypatch, tmp_path):
    """Only the JSON reader reads a file that starts with ``[`` whole (a JSON array): a text data set's first line
    ``[a note]`` before 60 MB of short lines (a few KB of gzip) is read a line at a time, as the datasets library
    reads it, not refused as read whole; so is a CSV file whose header starts with ``[``."""
    import gzip

    from mhaaudit import files
    from mhaaudit.sources import text_source

    def folder(name: str, data: str, text: str):
        (tmp_path / name / "data").mkdir(parents=True)
        (tmp_path / name / "README.md").write_text(_CONFIGS.replace("*.parquet", data))
        with gzip.open(tmp_path / name / "data" / data, "wt") as f:
            f.write(text)
        return tmp_path / name

    monkeypatch.setattr(files, "memory_limit", lambda: 200_000_000)  # 50 MB at once
    lines = folder("text", "train.txt.gz", "[a note in brackets]\n" + ("z" * 59 + "\n") * 1_000_000)
    assert list(text_source(f"hf:{lines}", limit=2)) == ["[a note in brackets]", "z" * 59]
    rows = folder("csv", "train.csv.gz", "[text]\n" + ("z" * 59 + "\n") * 1_000_000)
    assert next(iter(text_source(f"hf:{rows}", limit=1, text_column="[text]"))) == "z" * 59


def test_a_csv_file_read_a_row_at_a_time_is_sized_by_its_longest_row(monkeypatch, tmp_path):
    """A CSV data set whose metadata says ``chunksize: 1`` is read a row at a time, and a row's quoted field may run
    over many lines: a row of 60 MB of short lines inside quotes (a few KB of gzip) is refused before it is read,
    naming the row; it was sized by its longest line (60 bytes) and read whole. A CSV file of 10000-row batches says
    so in its refusal."""
    import gzip

    from mhaaudit import files
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    def folder(name: str, chunksize: str, text: str):
        (tmp_path / name / "data").mkdir(parents=True)
        config = _CONFIGS.replace("path: data/*.parquet", "path: data/train.csv.gz" + chunksize)
        (tmp_path / name / "README.md").write_text(config)
        with gzip.open(tmp_path / name / "data" / "train.csv.gz", "wt") as f:
            f.write(text)
        return tmp_path / name

    monkeypatch.setattr(files, "memory_limit", lambda: 200_000_000)  # 50 MB at once
    text = 'text\n"' + ("z" * 59 + "\n") * 1_000_000 + '"\nshort\n'
    with pytest.raises(DataError, match=r"\(its longest row, at least 5\d\.\d MB: .* reads a row whole$"):
        text_source("hf:" + str(folder("row", chunksize="\n  chunksize: 1", text=text)))
    with pytest.raises(DataError, match=r"\(its most bytes in 10000 consecutive rows, .* reads 10000 rows at once$"):
        text_source("hf:" + str(folder("rows", chunksize="", text=text)))


def test_a_dataset_folders_compressed_lines_are_sized_before_they_are_read(monkeypatch, capsys, hostile, tmp_path):
    """The datasets library decompresses a dataset folder's .jsonl.gz (.bz2, .xz, .zip) as it streams and holds its
    batch (10 MB) and the rest of a line whole: a few KB of gzip holding one line of 60 MB is refused in one line
    naming the file, the line's length and the limit (a quarter of the 200 MB made available here), before the library
    reads a line, the scan stopping early; it was read whole before. A compressed file larger than that limit once
    decompressed, of short lines, reads as before, and so do a JSON array (read whole) and a plain file within it."""
    import bz2
    import gzip
    import lzma

    from mhaaudit import files
    from mhaaudit.errors import DataError
    from mhaaudit.sources import text_source

    def trap(*a, **k):
        raise AssertionError("the dataset was read before its lines were sized")

    def folder(name: str, suffix: str, text: str, opener=gzip.open):
        (tmp_path / name / "data").mkdir(parents=True)
        (tmp_path / name / "README.md").write_text(_CONFIGS.replace("*.parquet", "train.*"))
        path = tmp_path / name / "data" / f"train.{suffix}"
        if suffix == "zip":
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("train.jsonl", text)
        else:
            with opener(path, "wt") as f:
                f.write(text)
        return tmp_path / name, path

    monkeypatch.setattr(files, "memory_limit", lambda: 200_000_000)  # 50 MB a batch: 10 MB, then the line
    big, path = folder("big", "jsonl.gz", '{"text": "' + "z" * 60_000_000 + '"}\n')
    assert os.path.getsize(path) < 100_000
    streaming = datasets.builder.DatasetBuilder.as_streaming_dataset
    monkeypatch.setattr(datasets.builder.DatasetBuilder, "as_streaming_dataset", trap)
    args = ("--limit", "20", "--samples", "20", "--context-length", "16")
    rc, out, err = run(capsys, "check", hostile["bert"], "--data", f"hf:{big}", *args)
    line = assert_one_error(rc, err, f"dataset folder {big}: its data file {path} (split train): reading it, ")
    assert (
        "reading it, decompressed (gzip), holds at least 50.3 MB at once (its longest line, at least 39.8 MB: the"
        in line
    )
    assert (
        ": the scan stopped after 39.8 MB decompressed, after a batch of 10.5 MB), more than the 50.0 MB allowed"
        in line
    )
    assert "more than the 50.0 MB allowed (a quarter of the 200.0 MB available)" in line and out == ""
    for name, suffix, opener in [("b", "jsonl.bz2", bz2.open), ("x", "jsonl.xz", lzma.open), ("zp", "zip", gzip.open)]:
        where, path = folder(name, suffix, '{"text": "short"}\n' + '{"text": "' + "y" * 42_000_000 + '"}\n', opener)
        with pytest.raises(DataError, match=r"train\.(jsonl\.(bz2|xz)|zip).*: reading it, decompressed .*longest line"):
            text_source(f"hf:{where}")
    monkeypatch.setattr(datasets.builder.DatasetBuilder, "as_streaming_dataset", streaming)
    docs = [" ".join([d] * 150) for d in _docs(2400)]  # 25 KB each
    ok, path = folder("ok", "jsonl.gz", "".join(json.dumps({"text": d}) + "\n" for d in docs))
    with gzip.open(path, "rb") as f:
        assert len(f.read()) > 50_000_000  # larger than the limit once decompressed, in short lines
    assert list(text_source(f"hf:{ok}", limit=3)) == docs[:3]
    rc, out, err = run(capsys, "check", hostile["bert"], "--data", f"hf:{ok}", *args, "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["records"]
    array, _ = folder("array", "json.gz", json.dumps([{"text": d} for d in docs[:10]]))  # read whole, 250 KB
    assert list(text_source(f"hf:{array}", limit=2)) == docs[:2]
    array, _ = folder("arrays", "json.gz", json.dumps([{"text": d} for d in docs]))  # read whole, 60 MB
    with pytest.raises(
        DataError, match=r"holds at least 50\.[0-9] MB at once \(all of it, at least .* reads it whole$"
    ):
        text_source(f"hf:{array}")
    plain = tmp_path / "plain" / "data"
    plain.mkdir(parents=True)
    (tmp_path / "plain" / "README.md").write_text(_CONFIGS.replace("*.parquet", "train.*"))
    (plain / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:10]))
    assert list(text_source(f"hf:{plain.parent}", limit=2)) == docs[:2]
