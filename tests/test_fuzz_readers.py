"""Every reader, fed malformed and hostile files through the real CLI: one line and exit 2, never a bug.

Each reader gets files made from a valid one by byte mutations (flips, overwrites, cuts,
insertions), files whose structure is rebuilt with hostile values (npy and safetensors headers,
JSON documents with values of every type), and plain random bytes. ``mhaaudit`` runs in-process
on each, as a user would run it. A file it refuses must give exit 2 and exactly one ``Error:``
line on stderr; a file that stays valid may give 0 (or 1), with a JSON document on stdout. Exit 3,
an internal error or a traceback fails the test.

The short run (a few examples a reader, derandomized so that it is the same on every run) is part
of the default suite. The long run is marked ``fuzz`` and runs only when asked:

    MHAAUDIT_FUZZ=500 python -m pytest -m fuzz tests/test_fuzz_readers.py

(``MHAAUDIT_FUZZ``: the examples a reader, 300 when it is set to a non-number.)
"""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from clitools import assert_one_error, run
from conftest import strict_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as st_save

from mhaaudit.features import reduce_tokens

_LONG = os.environ.get("MHAAUDIT_FUZZ", "").strip()
LONG_EXAMPLES = int(_LONG) if _LONG.isdigit() else 300

PROFILES = [
    pytest.param("short", id="short"),
    pytest.param(
        "long",
        id="long",
        marks=[
            pytest.mark.fuzz,
            pytest.mark.skipif(
                not _LONG, reason="the long fuzz run: set MHAAUDIT_FUZZ (the examples a reader) and select -m fuzz"
            ),
        ],
    ),
]


def fuzz(profile: str, short: int, strategy, check) -> None:
    """Run ``check`` on examples of ``strategy``: ``short`` of them (always the same), or the long run's."""
    long_run = profile == "long"
    conf = settings(
        max_examples=LONG_EXAMPLES if long_run else short,
        deadline=None,
        derandomize=not long_run,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=long_run,
    )
    given(strategy)(conf(check))()


def assert_clean(rc: int, out: str, err: str) -> None:
    """Refused in one line (exit 2), or ran with a JSON document on stdout; never a bug."""
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc in (0, 1, 2), (rc, err)
    if rc == 2:
        assert_one_error(rc, err)
        assert out == "", out
    else:
        doc = strict_json(out)
        assert isinstance(doc, dict) and doc, out
        assert "Error:" not in err, err


class Files:
    """A fresh folder for each example under the test's tmp_path."""

    def __init__(self, root):
        self.root, self.count = root, itertools.count()

    def folder(self):
        d = self.root / f"ex{next(self.count)}"
        d.mkdir()
        return d


# --------------------------------------------------------------------------- strategies

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
# Numbers near the edges a reader must check, without mid-sized values that would only make a run slow.
edge_numbers = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([0, -1, 2**31, 2**63, 10**12, 2**17 + 1]),
    st.floats(-2, 50),
    st.just(float("nan")),
    st.text(max_size=4),
    st.none(),
    st.lists(st.integers(-2, 40), max_size=3),
)


@st.composite
def mutated(draw, seed: bytes, head: int | None = None):
    """``seed`` with a few byte mutations, most of them in its first ``head`` bytes (the header)."""
    data = bytearray(seed)
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
                st.integers(0, head if head is not None else max(len(seed) - 1, 0)),
                st.binary(min_size=1, max_size=12),
            ),
            min_size=1,
            max_size=4,
        )
    )
    for op, pos, blob in ops:
        pos = min(pos, len(data))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] ^= blob[0] or 0x80
        elif op == "set":
            data[pos : pos + len(blob)] = blob
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = blob
        else:
            del data[pos : pos + len(blob)]
    return bytes(data)


def _replace_fields(valid: dict, values) -> st.SearchStrategy:
    """``valid`` with some of its fields replaced by ``values``, some removed, or another document altogether."""
    keys = sorted(valid)
    edits = st.dictionaries(st.sampled_from(keys), values, min_size=1, max_size=3)
    drops = st.lists(st.sampled_from(keys), max_size=2)
    changed = st.builds(lambda e, d: {k: v for k, v in {**valid, **e}.items() if k not in d}, edits, drops)
    return st.one_of(changed, changed, json_values)


def _json_bytes(doc) -> bytes:
    return json.dumps(doc).encode() if not isinstance(doc, bytes) else doc


X = np.random.default_rng(0).standard_normal((12, 4))


def _npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _npy_with_header(header: str, body: bytes) -> bytes:
    raw = header.encode("latin1", "replace")
    pad = (64 - (10 + len(raw) + 1) % 64) % 64
    raw = raw + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + body


npy_headers = st.builds(
    lambda descr, fortran, shape: repr({"descr": descr, "fortran_order": fortran, "shape": shape}),
    st.sampled_from(["<f8", ">f8", "<f4", ">i4", "|b1", "<c16", "<f2", "O", "<U3", "|V8", "zz", "<M8[s]"]),
    st.one_of(st.booleans(), st.integers(0, 2)),
    st.one_of(
        st.tuples(st.integers(-2, 20), st.integers(-2, 20)),
        st.tuples(st.integers(0, 10**12)),
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
        st.just(()),
        st.just((12, 4)),
    ),
)
NPY = st.one_of(
    mutated(_npy_bytes(X), head=128),
    st.builds(_npy_with_header, npy_headers, st.binary(max_size=400)),
    st.binary(max_size=300),
)

ST_VALID = st_save({"x": torch.from_numpy(X)})
safetensors_headers = st.dictionaries(
    st.sampled_from(["x", "y", "__metadata__"]),
    st.one_of(
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(
                    ["F64", "F32", "F16", "BF16", "I64", "I8", "BOOL", "F8_E4M3", "C64", "U8", "XX"]
                ),
                "shape": st.lists(st.integers(-1, 10**12) | st.sampled_from([0, 1, 4, 12]), max_size=3),
                "data_offsets": st.lists(
                    st.integers(-1, 10**12) | st.sampled_from([0, 96, 384]), min_size=0, max_size=3
                ),
            }
        ),
        json_values,
    ),
    max_size=3,
)


def _safetensors_with_header(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + body


SAFETENSORS = st.one_of(
    mutated(ST_VALID, head=96),
    st.builds(_safetensors_with_header, safetensors_headers, st.binary(max_size=400)),
    st.binary(max_size=200),
)


def _pt_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


PT = st.one_of(
    mutated(_pt_bytes(torch.from_numpy(X))),
    mutated(_pt_bytes({"queries": torch.from_numpy(X)}), head=200),
    st.binary(max_size=300),
)


# --------------------------------------------------------------------------- feature files


@pytest.mark.parametrize(
    "ext, files", [(".npy", NPY), (".safetensors", SAFETENSORS), (".pt", PT)], ids=["npy", "safetensors", "pt"]
)
@pytest.mark.parametrize("profile", PROFILES)
def test_feature_files(capsys, tmp_path, profile, ext, files):
    where = Files(tmp_path)

    def check(content: bytes):
        path = where.folder() / f"f{ext}"
        path.write_bytes(content)
        assert_clean(*run(capsys, "kruskal", path, "--k", "2", "--samples", "10", "--format", "json"))

    fuzz(profile, 30, files, check)


@pytest.fixture(scope="module")
def saved_features(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "feat"
    fs = reduce_tokens(torch.randn(12, 3, 4, generator=torch.Generator().manual_seed(0)), 0, meta={"model": "m"})
    fs.save(folder)
    return folder


@pytest.mark.parametrize("profile", PROFILES)
def test_meta_json(capsys, tmp_path, saved_features, profile):
    valid = json.loads((saved_features / "meta.json").read_text())
    where = Files(tmp_path)
    docs = st.one_of(
        _replace_fields(valid, json_values), _replace_fields(valid, edge_numbers), mutated(json.dumps(valid).encode())
    )

    def check(doc):
        folder = where.folder() / "feat"
        shutil.copytree(saved_features, folder)
        (folder / "meta.json").write_bytes(_json_bytes(doc))
        assert_clean(*run(capsys, "kruskal", folder, "--k", "2", "--samples", "10", "--format", "json"))

    fuzz(profile, 30, docs, check)


@pytest.mark.parametrize("profile", PROFILES)
def test_saved_features_body(capsys, tmp_path, saved_features, profile):
    """The features.safetensors of a saved folder: mutated, or tensors of other shapes."""
    where = Files(tmp_path)
    valid = (saved_features / "features.safetensors").read_bytes()

    def check(content: bytes):
        folder = where.folder() / "feat"
        shutil.copytree(saved_features, folder)
        (folder / "features.safetensors").write_bytes(content)
        assert_clean(*run(capsys, "kruskal", folder, "--k", "2", "--samples", "10", "--format", "json"))

    fuzz(profile, 20, st.one_of(mutated(valid, head=600), st.binary(max_size=100)), check)


@pytest.mark.parametrize("profile", PROFILES)
def test_parquet_metadata_of_features(capsys, tmp_path, profile):
    """The ``mhaaudit`` key of a parquet file's schema metadata: anything there is a results file or not,
    never a bug."""
    where = Files(tmp_path)
    table = pa.table({"v": pa.array(X.tolist(), type=pa.list_(pa.float64()))})

    def check(meta):
        path = where.folder() / "f.parquet"
        pq.write_table(table.replace_schema_metadata({b"mhaaudit": _json_bytes(meta)}), path)
        assert_clean(*run(capsys, "kruskal", path, "--k", "2", "--samples", "10", "--format", "json"))

    fuzz(profile, 20, st.one_of(json_values, st.binary(max_size=40)), check)


# --------------------------------------------------------------------------- model folders


@pytest.fixture(scope="module")
def check_results(tmp_path_factory, vit_dir, image_dir):
    """A results file of 'mhaaudit check --out' on the tiny ViT, for capacity --from."""
    from mhaaudit.cli.app import main

    path = tmp_path_factory.mktemp("from") / "check.parquet"
    rc = main(
        [
            "check",
            str(vit_dir),
            "--data",
            str(image_dir),
            "--limit",
            "20",
            "--samples",
            "10",
            "--variants",
            "random",
            "--layers",
            "1",
            "--out",
            str(path),
            "--format",
            "json",
        ]
    )
    assert rc == 0 and path.is_file()
    return path


@pytest.mark.parametrize("profile", PROFILES)
def test_parquet_metadata_of_results(capsys, tmp_path, check_results, vit_dir, image_dir, profile):
    """capacity --from reads a results file's metadata (its columns, limit, model) and its rows."""
    table = pq.read_table(check_results)
    valid = json.loads(table.schema.metadata[b"mhaaudit"])
    where = Files(tmp_path)
    metas = st.one_of(
        _replace_fields(valid, json_values),
        _replace_fields(valid, edge_numbers),
        st.builds(lambda c: {**valid, "columns": c}, json_values),
        st.binary(max_size=30),
    )

    def check(meta):
        path = where.folder() / "r.parquet"
        pq.write_table(table.replace_schema_metadata({b"mhaaudit": _json_bytes(meta)}), path)
        assert_clean(
            *run(
                capsys,
                "capacity",
                vit_dir,
                "--data",
                image_dir,
                "--limit",
                "20",
                "--from",
                path,
                "--variants",
                "random",
                "--block",
                "2",
                "--format",
                "json",
            )
        )

    fuzz(profile, 12, metas, check)


VIT_FIELDS = (
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
    "image_size",
    "patch_size",
    "num_channels",
    "layer_norm_eps",
    "hidden_act",
    "qkv_bias",
    "model_type",
    "encoder_stride",
    "hidden_dropout_prob",
)


@pytest.mark.parametrize("profile", PROFILES)
def test_model_config(capsys, tmp_path, vit_dir, image_dir, profile):
    """A model folder's config.json with sizes at the edges, values of other types, or not JSON at all."""
    valid = json.loads((vit_dir / "config.json").read_text())
    where = Files(tmp_path)
    values = st.one_of(edge_numbers, json_values, st.sampled_from(["vit", "bert", "gpt2", "nope", ""]))
    edits = st.dictionaries(st.sampled_from(VIT_FIELDS), values, min_size=1, max_size=3)
    docs = st.one_of(
        st.builds(lambda e: {**valid, **e}, edits),
        st.builds(lambda e: {**valid, **e}, edits),
        json_values,
        mutated(json.dumps(valid).encode()),
    )

    fuzz(profile, 15, docs, _config_check(capsys, where, vit_dir, image_dir))


@pytest.mark.parametrize("profile", PROFILES)
def test_timm_config(capsys, tmp_path, timm_dir, image_dir, profile):
    """A timm folder's config.json: its architecture and build arguments at the edges or of other types."""
    valid = json.loads((timm_dir / "config.json").read_text())
    where = Files(tmp_path)
    args = st.builds(
        lambda e: {**valid["model_args"], **e},
        st.dictionaries(
            st.sampled_from(
                ["img_size", "patch_size", "embed_dim", "depth", "num_heads", "in_chans", "mlp_ratio", "class_token"]
            ),
            edge_numbers,
            min_size=1,
            max_size=3,
        ),
    )
    docs = st.one_of(
        st.builds(lambda a: {**valid, "model_args": a}, args),
        st.builds(lambda a: {**valid, "model_args": a}, args),
        _replace_fields(valid, json_values),
    )

    fuzz(profile, 12, docs, _config_check(capsys, where, timm_dir, image_dir))


def _config_check(capsys, where, model_dir, image_dir):
    """A check of one config.json document: a copy of ``model_dir`` with it, audited by the CLI."""

    def check(doc):
        folder = where.folder() / "model"
        shutil.copytree(model_dir, folder)
        (folder / "config.json").write_bytes(_json_bytes(doc))
        assert_clean(
            *run(
                capsys,
                "check",
                folder,
                "--data",
                image_dir,
                "--variants",
                "random",
                "--layers",
                "1",
                "--limit",
                "20",
                "--samples",
                "10",
                "--format",
                "json",
            )
        )

    return check


@pytest.fixture(scope="module")
def sharded_vit(tmp_path_factory):
    """The tiny ViT saved in shards, with its index."""
    import transformers
    from conftest import TINY_VIT

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("sharded_vit")
    transformers.ViTModel(transformers.ViTConfig(**TINY_VIT)).eval().save_pretrained(str(folder), max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    return folder


@pytest.mark.parametrize("profile", PROFILES)
def test_safetensors_index(capsys, tmp_path, sharded_vit, image_dir, profile):
    """The weight_map of a sharded checkpoint: names outside the folder, missing, of other types; other documents."""
    valid = json.loads((sharded_vit / "model.safetensors.index.json").read_text())
    names = sorted(valid["weight_map"])
    where = Files(tmp_path)
    shard_names = st.one_of(
        st.sampled_from(sorted(set(valid["weight_map"].values()))),
        st.sampled_from(
            [
                "../outside.safetensors",
                "/etc/passwd",
                "",
                ".",
                "sub/../../x",
                "missing.safetensors",
                "config.json",
                "C:\\x",
                "a\x00b",
                "~/x",
            ]
        ),
        st.text(max_size=12),
        json_values,
    )
    maps = st.one_of(
        st.builds(
            lambda e: {**valid["weight_map"], **e},
            st.dictionaries(st.sampled_from(names), shard_names, min_size=1, max_size=3),
        ),
        st.just({}),
        st.builds(lambda keep: {k: valid["weight_map"][k] for k in keep}, st.lists(st.sampled_from(names), max_size=4)),
    )
    docs = st.one_of(
        st.builds(
            lambda m, t: {"metadata": {"total_size": t}, "weight_map": m},
            maps,
            st.one_of(st.just(valid["metadata"]["total_size"]), json_values),
        ),
        _replace_fields(valid, json_values),
        mutated(json.dumps(valid).encode()),
    )

    def check(doc):
        folder = where.folder() / "model"
        shutil.copytree(sharded_vit, folder)
        (folder / "model.safetensors.index.json").write_bytes(_json_bytes(doc))
        (folder / "outside.safetensors").unlink(missing_ok=True)
        assert_clean(
            *run(
                capsys,
                "check",
                folder,
                "--data",
                image_dir,
                "--variants",
                "trained",
                "--layers",
                "1",
                "--limit",
                "20",
                "--samples",
                "10",
                "--format",
                "json",
            )
        )

    fuzz(profile, 12, docs, check)


@pytest.mark.parametrize("profile", PROFILES)
def test_checkpoint_bodies(capsys, tmp_path, vit_dir, image_dir, profile):
    """A model folder's model.safetensors, mutated in its header or body, or random bytes."""
    valid = (vit_dir / "model.safetensors").read_bytes()
    head = int.from_bytes(valid[:8], "little") + 8
    where = Files(tmp_path)

    def check(content: bytes):
        folder = where.folder() / "model"
        shutil.copytree(vit_dir, folder)
        (folder / "model.safetensors").write_bytes(content)
        assert_clean(
            *run(
                capsys,
                "check",
                folder,
                "--data",
                image_dir,
                "--variants",
                "trained",
                "--layers",
                "1",
                "--limit",
                "20",
                "--samples",
                "10",
                "--format",
                "json",
            )
        )

    fuzz(profile, 12, st.one_of(mutated(valid, head=head), st.binary(max_size=64)), check)
