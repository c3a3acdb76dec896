"""Tests for mhaaudit.models.checkpoints: reading state files and loading only what fits."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from torch import nn

from mhaaudit.errors import ModelError, OfflineError
from mhaaudit.models import checkpoints, misfit


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))


def test_read_state_file_formats(tmp_path):
    from safetensors.torch import save_file

    sd = {k: v.clone() for k, v in _net().state_dict().items()}
    save_file(sd, str(tmp_path / "a.safetensors"))
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "b.pth")
    for name in ("a.safetensors", "b.pth"):
        got = checkpoints.read_state_file(str(tmp_path / name))
        assert set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    assert sorted(checkpoints.state_file_keys(str(tmp_path / "a.safetensors"))) == sorted(sd)
    assert sorted(checkpoints.state_file_keys(str(tmp_path / "b.pth"))) == sorted(sd)


def test_unreadable_state_files(tmp_path):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="cannot read the checkpoint"):
        checkpoints.read_state_file(str(garbage))
    assert checkpoints.state_file_keys(str(garbage)) == []
    torch.save({"weights": [1, 2, 3]}, tmp_path / "list.pt")
    with pytest.raises(ModelError, match="does not hold a state dict of tensors"):
        checkpoints.read_state_file(str(tmp_path / "list.pt"))
    assert checkpoints.state_file_keys(str(tmp_path / "list.pt")) == []


def test_state_shapes_are_had_without_the_tensors_data(tmp_path):
    """A checkpoint file's tensors' names and shapes, from a safetensors header or a torch checkpoint's pickle
    (unwrapped as read_state unwraps it): a zip file's storages mapped, a legacy file's tensors fake (its data,
    which follows its pickle, never read: a legacy file cut short in its data still gives them)."""
    from safetensors.torch import save_file

    sd = {k: v.clone() for k, v in _net().state_dict().items()}
    want = {k: tuple(v.shape) for k, v in sd.items()}
    save_file(sd, str(tmp_path / "a.safetensors"))
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "b.pth")
    torch.save(sd, tmp_path / "c.bin", _use_new_zipfile_serialization=False)
    loads = []
    real_load = torch.load
    torch_load = lambda *a, **k: loads.append(k) or real_load(*a, **k)  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "load", torch_load)
        assert checkpoints.state_shapes(str(tmp_path / "a.safetensors")) == want
        assert checkpoints.state_shapes(str(tmp_path / "b.pth")) == want
        assert checkpoints.state_shapes(str(tmp_path / "c.bin")) == want
    # the zip file's pickle alone, no code run, its storages mapped (a stream's would be read: torch < 2.10); the
    # legacy file's pickle alone, no code run either
    assert loads == [
        {"map_location": "meta", "mmap": True, "weights_only": True},
        {"map_location": "meta", "weights_only": True},
    ]
    legacy = (tmp_path / "c.bin").read_bytes()
    sizes = sum(v.numel() * v.element_size() for v in sd.values())
    (tmp_path / "d.bin").write_bytes(legacy[: len(legacy) - sizes + 8])  # the pickles, not the tensors' bytes
    assert checkpoints.state_shapes(str(tmp_path / "d.bin")) == want
    with pytest.raises(ModelError, match="cannot read the checkpoint"):  # the load reads the bytes, and refuses
        checkpoints.read_state_file(str(tmp_path / "d.bin"))
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "e.pth", _use_new_zipfile_serialization=False)
    assert checkpoints.state_shapes(str(tmp_path / "e.pth")) == want
    torch.save([1, 2, 3], tmp_path / "f.bin", _use_new_zipfile_serialization=False)
    with pytest.raises(ModelError, match="does not hold a state dict of tensors"):
        checkpoints.state_shapes(str(tmp_path / "f.bin"))
    torch.save({"weights": [1, 2, 3]}, tmp_path / "list.pt")
    with pytest.raises(ModelError, match="does not hold a state dict of tensors"):
        checkpoints.state_shapes(str(tmp_path / "list.pt"))
    (tmp_path / "garbage.bin").write_bytes(b"\x80\x02 not a checkpoint")
    assert checkpoints.state_shapes(str(tmp_path / "garbage.bin")) is None  # no zip archive: read when loaded


def test_a_torch_checkpoint_cut_short_is_refused_in_words(tmp_path):
    """A zip checkpoint with its end cut off (a copy or download that stopped) is no legacy torch file: its
    shapes are refused, not left to the load, and both say it is cut short (torch says ``[Errno 22]``)."""
    torch.save(_net().state_dict(), tmp_path / "whole.bin")
    data = (tmp_path / "whole.bin").read_bytes()
    for name, size in (("cut.bin", len(data) - 100), ("half.pt", len(data) // 2), ("head.pt", 10)):
        (tmp_path / name).write_bytes(data[:size])
        for read in (checkpoints.state_shapes, checkpoints.read_state_file):
            with pytest.raises(ModelError, match=f"{name}: the file begins as a zip archive .* it is cut short"):
                read(str(tmp_path / name))


def test_first_misfit_compares_the_tensors_the_model_loads():
    """Only names the model has (directly, or after a task model's prefix) are compared, in name order."""
    model = {"embeddings.weight": (10, 4), "block.0.weight": (4, 4)}
    assert misfit.first_misfit({"embeddings.weight": (10, 4), "head.weight": (3, 8)}, model, "vit") is None
    assert misfit.first_misfit({"vit.block.0.weight": (8, 8)}, model, "vit") == (
        "vit.block.0.weight",
        (8, 8),
        (4, 4),
    )
    assert misfit.first_misfit({"bert.block.0.weight": (8, 8)}, model, "vit") is None
    # the model's own name loads where the checkpoint has it: a prefixed copy beside it loads into nothing
    assert misfit.first_misfit({"block.0.weight": (4, 4), "vit.block.0.weight": (8, 8)}, model, "vit") is None
    assert misfit.first_misfit({"block.0.weight": (4, 8), "vit.block.0.weight": (4, 4)}, model, "vit") == (
        "block.0.weight",
        (4, 8),
        (4, 4),
    )


@pytest.mark.parametrize("form", ["bin", "legacy", "safetensors"])
def test_a_weights_file_of_another_width_is_refused_before_the_model_is_built(
    vit_dir, vit_dir_wide, tmp_path, monkeypatch, form
):
    """``--weights FILE`` carries no config: its tensors' shapes (a torch file's pickle, in the zip form or the
    legacy one, a safetensors header) are held against the model's before the model is built and before any
    tensor of the file is read."""
    from safetensors.torch import load_file, save_file

    from mhaaudit.models import hf, load_model

    wide = tmp_path / ("wide.safetensors" if form == "safetensors" else f"wide-{form}.bin")
    sd = load_file(str(vit_dir_wide / "model.safetensors"))
    if form == "safetensors":
        save_file(sd, str(wide))
    else:
        torch.save(sd, wide, _use_new_zipfile_serialization=form == "bin")
    built = []
    real_build = hf._build
    monkeypatch.setattr(hf, "_build", lambda *a, **k: built.append(a) or real_build(*a, **k))
    says = rf"{wide} do not fit {vit_dir}: embeddings.cls_token has shape \(1, 1, 48\), the model expects \(1, 1, 32\)"
    with pytest.raises(ModelError, match=says):
        load_model(str(vit_dir), weights="trained", weights_path=str(wide), device="cpu")
    assert built == []


def test_a_weights_file_whose_blocks_are_wider_is_refused_before_the_model_is_built(vit_dir, tmp_path, monkeypatch):
    """A tensor of a block, which the library writes under another name than the model's module has for it
    (``encoder.layer.0.intermediate.dense.bias`` for ``layers.0.mlp...``), is held against the model's shape
    under that name too, not only the embeddings, whose names are the same in both."""
    from safetensors.torch import load_file, save_file

    from mhaaudit.models import hf, load_model

    sd = load_file(str(vit_dir / "model.safetensors"))
    key = "encoder.layer.0.intermediate.dense.bias"
    assert key in sd, sorted(sd)  # the name the library writes
    wide = tmp_path / "ffn.safetensors"
    save_file({**sd, key: torch.zeros(2 * sd[key].shape[0])}, str(wide))
    built = []
    real_build = hf._build
    monkeypatch.setattr(hf, "_build", lambda *a, **k: built.append(a) or real_build(*a, **k))
    want = tuple(sd[key].shape)
    says = rf"{wide} do not fit {vit_dir}: {key} has shape \({2 * want[0]},\), the model expects \({want[0]},\)"
    with pytest.raises(ModelError, match=says):
        load_model(str(vit_dir), weights="trained", weights_path=str(wide), device="cpu")
    assert built == []


def test_a_weights_file_lacking_a_block_tensor_names_that_one(vit_dir, tmp_path):
    """A file that lacks one tensor of a block, which the library writes under another name than its module's
    (read through the library's renaming), is said to lack that one, named as it is stored: not every tensor
    whose name the direct load did not find."""
    from safetensors.torch import load_file, save_file

    from mhaaudit.models import load_model

    sd = load_file(str(vit_dir / "model.safetensors"))
    key = "encoder.layer.0.attention.attention.query.weight"
    lacking = tmp_path / "lacking.safetensors"
    save_file({k: v for k, v in sd.items() if k != key}, str(lacking))
    with pytest.raises(ModelError, match=r"do not fit .*: 1 parameter\(s\) missing \(e\.g\. .*" + re.escape(key)):
        load_model(str(vit_dir), weights="trained", weights_path=str(lacking), device="cpu")


def test_load_fitting():
    src, dst = _net(), nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    checkpoints.load_fitting(dst, {**src.state_dict(), "extra.weight": torch.zeros(1)}, "misfit")
    assert all(torch.equal(a, b) for a, b in zip(src.state_dict().values(), dst.state_dict().values(), strict=False))
    wrong = {**src.state_dict(), "1.weight": torch.zeros(3, 4)}
    with pytest.raises(ModelError, match=r"misfit: 1.weight has shape \(3, 4\), the model expects \(2, 4\)"):
        checkpoints.load_fitting(dst, wrong, "misfit")
    partial = {k: v for k, v in src.state_dict().items() if k != "0.bias"}
    with pytest.raises(ModelError, match=r"misfit: 1 parameter\(s\) missing \(e.g. 0.bias\)"):
        checkpoints.load_fitting(dst, partial, "misfit")
    # of two misfits, the first by name is named, whatever the file's order: as the check before any work names it
    two = {
        "1.weight": torch.zeros(3, 4),
        "0.weight": torch.zeros(5, 3),
        "0.bias": torch.zeros(4),
        "1.bias": torch.zeros(2),
    }
    with pytest.raises(ModelError, match=r"^misfit: 0.weight has shape \(5, 3\), the model expects \(4, 3\)$"):
        checkpoints.load_fitting(dst, two, "misfit")
    assert (
        misfit.first_misfit(
            {k: v.shape for k, v in two.items()}, {k: v.shape for k, v in dst.state_dict().items()}, ""
        )[0]
        == "0.weight"
    )


def test_ignorable_parameters_may_be_missing():
    class Headless(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.pooler = nn.Linear(2, 2), nn.Linear(2, 2)

    m = Headless()
    checkpoints.load_fitting(m, {k: v for k, v in m.state_dict().items() if k.startswith("body.")}, "misfit")
    assert checkpoints.is_ignorable("embeddings.mask_token") and not checkpoints.is_ignorable("encoder.0.weight")


def test_find_checkpoint(tmp_path):
    assert checkpoints.find_checkpoint(tmp_path) is None
    (tmp_path / "model.pth").write_bytes(b"")
    assert checkpoints.find_checkpoint(tmp_path) == str(tmp_path / "model.pth")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert checkpoints.find_checkpoint(tmp_path) == str(tmp_path / "model.safetensors")


def test_offline_weights_error():
    err = checkpoints.offline_weights_error("vit-base", "timm vit_base_patch16_224")
    assert isinstance(err, OfflineError) and "pass weights PATH" in str(err) and "vit-base" in str(err)


def test_load_fitting_refuses_complex_values_for_real_parameters():
    """The check of a whole state dict loaded into a module: a complex entry for a real parameter is refused
    (``load_state_dict`` would copy its real part), a complex entry for a complex parameter is loaded."""
    real = nn.Linear(3, 2)
    sd = {k: v.clone() for k, v in real.state_dict().items()}
    with pytest.raises(ModelError, match=r"^misfit: weight holds complex values, the model's are real$"):
        checkpoints.load_fitting(real, {**sd, "weight": torch.complex(sd["weight"], sd["weight"])}, "misfit")
    cplx = nn.Linear(3, 2, dtype=torch.complex64)
    value = torch.complex(torch.randn(2, 3), torch.randn(2, 3))
    checkpoints.load_fitting(cplx, {**cplx.state_dict(), "weight": value}, "misfit")
    assert torch.equal(cplx.weight.detach(), value)


@pytest.mark.parametrize("form", ["safetensors", "pt"])
def test_a_complex_tensor_the_model_never_loads_is_no_reason_to_refuse(vit_dir, tmp_path, capsys, form):
    """A checkpoint file may hold tensors the model has no parameter for (a training run's buffers); one of complex
    values among them is left alone, and the audit is that of the same file without it."""
    import json

    from clitools import run
    from safetensors.torch import load_file, save_file

    sd = load_file(str(vit_dir / "model.safetensors"))
    extra = {**sd, "rotary.freqs_cis": torch.polar(torch.ones(4, 2), torch.randn(4, 2))}
    records = []
    for i, state in enumerate((sd, extra)):
        path = tmp_path / f"w{i}.{form}"
        save_file(state, str(path)) if form == "safetensors" else torch.save(state, path)
        rc, out, err = run(
            capsys, "check", vit_dir, "--weights", path, "--variants", "trained", "--limit", 20, "--samples", 10,
            "--device", "cpu", "--format", "json",
        )  # fmt: skip
        assert rc == 0, err
        records.append(json.loads(out)["records"])
    assert records[0] and records[0] == records[1]


@pytest.mark.parametrize("form", ["folder", "file.pt", "series"])
def test_complex_weights_are_refused_not_cast_to_real(vit_dir, tmp_path, capsys, form):
    """A checkpoint whose tensors hold complex values is refused: copying them into the model's real
    parameters would drop the imaginary parts and audit other weights than the checkpoint's."""
    import shutil

    from clitools import assert_one_error, run
    from safetensors.torch import load_file, save_file

    sd = load_file(str(vit_dir / "model.safetensors"))
    odd = {k: torch.complex(v, torch.ones_like(v)) if v.is_floating_point() else v for k, v in sd.items()}
    folder = tmp_path / "ckpt-1"
    folder.mkdir()
    shutil.copy(vit_dir / "config.json", folder)
    save_file(odd, str(folder / "model.safetensors"))
    torch.save(odd, tmp_path / "ckpt-2.pt")
    weights = {"folder": ["--weights", folder], "file.pt": ["--weights", tmp_path / "ckpt-2.pt"]}
    args = weights.get(form, ["--checkpoints", folder])
    rc, out, err = run(capsys, "check", vit_dir, "--limit", 20, "--samples", 10, "--device", "cpu", *args)
    assert out == ""
    assert_one_error(rc, err, "complex values")


@pytest.mark.parametrize("form, whole", [("safetensors", False), ("safetensors", True), ("bin", False)])
def test_a_run_reads_a_weights_files_shapes_once(vit_dir, image_dir, tmp_path, monkeypatch, form, whole):
    """A run on one weights file reads its tensors' names and shapes (a safetensors header, a torch file's pickle
    onto the meta device) once: for the check before the first column, the load's own check before the build and
    the list of tensors that the partial read follows, or, for a file whose names the partial read cannot map (it
    is loaded whole), the dtype the report says the file stores (read from the header a second time before)."""
    import sys

    from safetensors.torch import load_file, save_file

    from mhaaudit import feature_files
    from mhaaudit.auditing import audit
    from mhaaudit.models.shards import Checkpoint, NotPartial

    path = tmp_path / f"weights.{form}"
    sd = load_file(str(vit_dir / "model.safetensors"))
    torch.save(sd, path) if form == "bin" else save_file(sd, str(path))
    reads: list[str] = []
    real_header, real_load = feature_files.safetensors_header, torch.load

    def header(p):
        reads.append(os.path.realpath(p))
        return real_header(p)

    def load(f, *a, **k):
        if k.get("map_location") == "meta":
            reads.append(os.path.realpath(f))
        return real_load(f, *a, **k)

    for module in list(sys.modules.values()):  # wherever the reader was imported into
        if (
            getattr(module, "__name__", "").startswith("mhaaudit")
            and vars(module).get("safetensors_header") is real_header
        ):
            monkeypatch.setattr(module, "safetensors_header", header)
    monkeypatch.setattr(torch, "load", load)
    if whole:

        def unmapped(*_args, **_kwargs):
            raise NotPartial(f"no tensor for a parameter in {path}")

        monkeypatch.setattr(Checkpoint, "keys_for", unmapped)
    result = audit(
        str(vit_dir), variants=["trained"], weights=str(path), data=str(image_dir), limit=20, samples=50, device="cpu"
    )
    assert [c.status for c in result.columns] == ["ok"]
    assert result.columns[0].weights_read.method == ("whole" if whole or form == "bin" else "partial")
    assert result.columns[0].weights_read.stored_dtype == "float32"
    assert reads.count(os.path.realpath(path)) == 1, reads


def test_read_once_keeps_a_files_shapes_while_open_and_reads_a_replaced_file_anew(tmp_path, monkeypatch):
    """Within ``read_once`` a file's header is read once; a file written again meanwhile (another identity) is read
    anew, and nothing is kept once the outermost ``read_once`` closes."""
    from safetensors.torch import save_file

    from mhaaudit.models.file_reads import read_once

    path = str(tmp_path / "w.safetensors")
    save_file({"a": torch.zeros(2, 3)}, path)
    reads: list[str] = []
    real = checkpoints.safetensors_header
    monkeypatch.setattr(checkpoints, "safetensors_header", lambda p: reads.append(p) or real(p))
    with read_once():
        with read_once():  # an inner one keeps nothing of its own
            assert checkpoints.state_shapes(path) == {"a": (2, 3)}
        assert checkpoints.state_shapes(path) == {"a": (2, 3)} and len(reads) == 1
        save_file({"a": torch.zeros(4, 3)}, path)
        assert checkpoints.state_shapes(path) == {"a": (4, 3)} and len(reads) == 2
    checkpoints.state_shapes(path)
    assert len(reads) == 3


def test_read_once_reads_anew_a_file_rewritten_in_place_at_its_size_and_modification_time(tmp_path, monkeypatch):
    """A file rewritten in place (same inode) to the same size, its modification time then set back, is another
    file: its change time, which no caller can set, tells it apart, and ``read_once`` reads it anew."""
    import time

    from safetensors.torch import save_file

    from mhaaudit.models.file_reads import read_once

    path = str(tmp_path / "w.safetensors")
    save_file({"a": torch.zeros(2, 3)}, path)
    before = os.stat(path)
    with read_once():
        assert checkpoints.state_shapes(path) == {"a": (2, 3)}
        time.sleep(0.05)  # past the file system's clock tick: the rewrite's change time is another
        other = str(tmp_path / "other.safetensors")
        save_file({"b": torch.zeros(3, 2)}, other)
        with open(other, "rb") as src, open(path, "r+b") as dst:  # in place: the inode is kept
            dst.write(src.read())
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        assert checkpoints.state_shapes(path) == {"b": (3, 2)}


def test_read_once_keeps_its_reads_to_the_thread_that_opened_it(tmp_path, monkeypatch):
    """What ``read_once`` keeps is its opener's thread's alone: another thread, which opened none, reads the file
    each time it asks, and the opener's next ask is answered from its own first read."""
    import threading

    from safetensors.torch import save_file

    from mhaaudit.models.file_reads import read_once

    path = str(tmp_path / "w.safetensors")
    save_file({"a": torch.zeros(2, 3)}, path)
    reads: list[str] = []
    opener, real = threading.current_thread(), checkpoints.safetensors_header

    def header(p):
        reads.append("opener" if threading.current_thread() is opener else "other")
        return real(p)

    monkeypatch.setattr(checkpoints, "safetensors_header", header)

    def elsewhere():
        for _ in range(2):
            checkpoints.state_shapes(path)

    with read_once():
        checkpoints.state_shapes(path)
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join()
        checkpoints.state_shapes(path)
    assert reads == ["opener", "other", "other"]


def test_a_safetensors_headers_entries_are_checked_in_whole_numbers(tmp_path):
    """``header_shapes``: each entry's dtype, sizes and byte span checked, the span in integers (a float would
    round 10^24 * 4 bytes), and the first malformed entry named."""
    from mhaaudit.models.checkpoints import header_shapes

    def header(name, entry):
        raw = json.dumps({"x": entry}).encode()
        (tmp_path / name).write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 8)
        return str(tmp_path / name)

    assert header_shapes(header("ok", {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})) == {"x": (2,)}
    huge = header("huge", {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 0]})
    with pytest.raises(ValueError, match=r"^tensor 'x' .* takes 4000000000000000000000000 bytes; .* span 0$"):
        header_shapes(huge)
    from safetensors.torch import save_file

    saved = 0
    for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}:  # each dtype safetensors saves
        try:
            save_file({"x": torch.zeros(3, 5, dtype=dtype)}, str(tmp_path / "each.safetensors"))
        except Exception:  # noqa: BLE001  (a dtype safetensors or torch will not write)
            continue
        assert list(header_shapes(str(tmp_path / "each.safetensors"))) == ["x"], dtype  # (float4 packs two a byte)
        saved += 1
    assert saved >= 15, saved
    for entry, says in (
        ({"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}, "has dtype 'F33', which safetensors does not store"),
        ({"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 8]}, "has shape [-1, 2], with a negative size"),
        ({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 8]}, "has shape [1.5], not a list of sizes"),
        ({"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}, "takes 2 bytes; its data offsets span 1"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            header_shapes(header("bad", entry))
