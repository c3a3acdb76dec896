"""The typed run facts of a result (mhaaudit.facts): each stores what the JSON meta always gave,
in its order, and reads back from the result document equal to what was written."""

from __future__ import annotations

import json

import pytest

from mhaaudit import batching
from mhaaudit.documents import decode_result, encode_result
from mhaaudit.facts import (
    AuditSettings,
    BatchChoice,
    CapacitySettings,
    CaptureFacts,
    DuplicateInputs,
    JobFacts,
    ModelFacts,
    ReadFacts,
    SkipCounts,
)
from mhaaudit.models.probe import ModelInfo
from mhaaudit.settings import Settings

INFO = ModelInfo(
    name="tiny",
    resolved="/models/tiny",
    backend="hf",
    family="vit",
    modality="image",
    d=32,
    n=17,
    query_index=0,
    num_layers=2,
    num_heads=4,
    head_dim=8,
    weights="random",
    weights_source="random init",
)
READ = {
    "method": "partial",
    "stored_dtype": "float32",
    "bytes_read": 10,
    "bytes_total": 20,
    "files_read": 1,
    "files_total": 1,
    "tensors_read": 4,
    "tensors_total": None,
}


def _again(tp, value):
    """``value`` written as a result document (through JSON text) and read back as ``tp``."""
    return decode_result(tp, json.loads(json.dumps(encode_result(value))))


def test_model_facts_give_model_info_and_each_weights_read_as_the_meta_did():
    facts = ModelFacts.of(INFO).with_weights("random", "random init", None).with_weights("trained", "hub", READ)
    legacy = {**INFO.to_dict(), "random_weights_source": "random init", "trained_weights_source": "hub"}
    legacy["trained_weights_read"] = READ
    assert facts.as_dict() == legacy and list(facts.as_dict()) == list(legacy)
    assert facts.n == 17 and facts.as_dict()["trained_weights_read"] == READ
    assert not hasattr(facts, "get") and not hasattr(facts, "__getitem__")  # fields are read as attributes
    assert [w.init for w in facts.weights_used] == ["random", "trained"]
    assert facts.weights_used[1].read == ReadFacts(**READ) and facts.weights_used[0].read is None
    assert encode_result(facts) == legacy
    assert _again(ModelFacts, facts) == facts


def test_model_facts_refuse_a_key_they_do_not_know():
    with pytest.raises(ValueError, match="no field colour"):
        ModelFacts.from_document({**INFO.to_dict(), "colour": "blue"})


def test_audit_settings_keep_the_meta_order_and_leave_out_what_does_not_apply():
    plain = AuditSettings.of(
        Settings.resolve(samples=50, device="cpu").as_dict(),
        limit=40,
        batch_size=8,
        batch_size_choice="given",
        layer=1,
        layers=None,
    )
    doc = encode_result(plain)
    assert "weights_seed" not in doc and "distributed" not in doc
    assert list(doc)[:6] == ["device", "samples", "threshold", "seed", "tolerance", "stop_when_decided"]
    assert list(doc)[6:] == ["limit", "batch_size", "batch_size_choice", "layer", "layers"]
    assert plain.tolerance.rule == doc["tolerance"]["rule"] and plain.samples == 50
    assert _again(AuditSettings, plain) == plain

    apart = AuditSettings.of(
        Settings.resolve(samples=50, device="cpu", weights_seed=3).as_dict(),
        limit=40,
        batch_size="auto",
        batch_size_choice=None,
        layer=1,
        layers=(0, 2),
        distributed=JobFacts.of({"distributed": {"world_size": 2, "backend": "gloo"}}),
    )
    doc = encode_result(apart)
    assert doc["weights_seed"] == 3 and list(doc).index("weights_seed") == 6
    assert doc["layers"] == [0, 2] and doc["distributed"] == {"world_size": 2, "backend": "gloo"}
    assert apart.as_dict()["layers"] == [0, 2]
    assert _again(AuditSettings, apart) == apart
    assert JobFacts.of({}) is None


def test_capacity_settings_read_back_equal():
    s = CapacitySettings(
        layer=2,
        attention="model",
        shared_context=True,
        heads=(1, 2),
        head_dim=8,
        samples=50,
        threshold=0.99,
        seed=0,
        device="cpu",
        limit=30,
        batch_size=8,
        batch_size_choice="given",
        from_path=None,
        z_tolerance="z rule",
        assumption_tolerance="a rule",
        tokens="input of block 2",
    )
    assert list(s.as_dict())[:4] == ["layer", "attention", "shared_context", "heads"]
    assert s.as_dict()["heads"] == [1, 2] and s.from_path is None and s.as_dict()["from_path"] is None
    assert _again(CapacitySettings, s) == s


def test_skips_and_duplicates_read_as_records_and_store_as_before():
    legacy = {"not RGB": {"count": 3, "example": "a.png: mode L"}, "unreadable": {"count": 1, "example": "b.jpg"}}
    skips = SkipCounts.of(legacy)
    assert skips["not RGB"].count == 3 and "unreadable" in skips and "too short" not in skips and skips.total == 4
    assert encode_result(skips) == legacy and list(skips.as_dict()) == list(legacy)
    assert _again(SkipCounts, skips) == skips
    assert not SkipCounts.of({}) and encode_result(SkipCounts()) == {}
    with pytest.raises(KeyError):
        skips["too short"]
    with pytest.raises(ValueError, match="count and example"):
        SkipCounts.from_document({"unreadable": {"count": 1}})

    dups = DuplicateInputs.of({"total": 40, "repeats": 2, "dropped": 2, "example": [3, 7]})
    assert dups is not None and dups.example == (3, 7) and dups.dropped == 2
    assert dups.as_dict() == {"total": 40, "repeats": 2, "dropped": 2, "example": [3, 7]}
    assert _again(DuplicateInputs, dups) == dups
    assert DuplicateInputs.of({}) is None


def test_a_capture_leaves_out_what_it_did_not_do():
    none = CaptureFacts()
    assert not none and none.as_dict() == {} and encode_result(none) == {}
    assert _again(CaptureFacts, none) == none
    batch = {"size": 8, "asked": "auto", "how": "halving"}
    cap = CaptureFacts.of(batch, None)
    assert cap and cap.batch is not None and cap.batch.asked == "auto" and cap.as_dict() == {"batch": batch}
    assert _again(CaptureFacts, cap) == cap
    read = CaptureFacts.of(batch, READ)
    assert read.weights_read is not None and read.weights_read.tensors_total is None
    assert read.as_dict() == {"batch": batch, "weights_read": READ} and _again(CaptureFacts, read) == read
    assert CaptureFacts.of(BatchChoice(8, "auto", "halving"), None) == cap  # the record, as its dict
    assert batching.BatchChoice is BatchChoice and BatchChoice.of({}) is None
