"""The single capture loop: every batch reaches every consumer, in order, as a direct capture gives it."""

from __future__ import annotations

import pytest
import torch

from mhaaudit import distributed, pipeline
from mhaaudit.errors import DataError, InputError
from mhaaudit.pipeline import DataRequest, ModelRequest
from mhaaudit.settings import Settings

pytest.importorskip("transformers")


@pytest.fixture()
def settings():
    return Settings.resolve(device="cpu", seed=0)


def test_stream_feeds_every_consumer_the_direct_capture(vit_dir, image_dir, settings):
    req = ModelRequest(str(vit_dir))
    pm = pipeline.load(req, "random", settings, max_layer=2)
    data = DataRequest(data=str(image_dir), limit=21, batch_size=8)
    seen_a, seen_b = [], []
    fed = pipeline.stream(
        pm,
        data,
        [0, 2],
        [lambda t: seen_a.append(t), lambda t: seen_b.append({k: v.clone() for k, v in t.items()})],
        settings,
        notes=[],
    )
    assert fed.count == 21 and [len(t[0]) for t in seen_a] == [8, 8, 5]
    assert fed.name and fed.skipped == 0 and fed.seconds >= 0
    # The same examples captured directly, one batch: the pipeline changed nothing but the batching.
    _info, raw = pipeline.example_batches(
        pm, DataRequest(data=str(image_dir), limit=21, batch_size=21), settings.seed, []
    )
    direct = pm.capture(pm.preprocess(next(raw)), [0, 2])
    for layer in (0, 2):
        got = torch.cat([t[layer] for t in seen_b])
        torch.testing.assert_close(got, direct[layer])
        assert torch.equal(torch.cat([t[layer] for t in seen_a]), got)


def test_stream_runs_text_models_with_segments(tmp_path, settings):
    import transformers

    cfg = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=30522,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(cfg).eval().save_pretrained(str(tmp_path))
    pm = pipeline.load(ModelRequest(str(tmp_path), context_length=16), "trained", settings, max_layer=1)
    notes: list[str] = []
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(" ".join(f"word{i}x{j}" for j in range(60)) for i in range(30)))
    # a trained text model needs its own tokenizer files; the loader's error type is its own
    with pytest.raises(Exception):  # noqa: B017
        pipeline.stream(pm, DataRequest(data=str(text), limit=6, batch_size=4), [1], [lambda t: None], settings, notes)
    pm_random = pipeline.load(ModelRequest(str(tmp_path), context_length=16), "random", settings, max_layer=1)
    shapes = []
    fed = pipeline.stream(
        pm_random,
        DataRequest(data=str(text), limit=6, batch_size=4),
        [1],
        [lambda t: shapes.append(tuple(t[1].shape))],
        settings,
        notes,
    )
    assert fed.count == 6 and shapes == [(4, 16, 32), (2, 16, 32)]
    assert any(n.startswith("tokenizer:") for n in notes)


def test_empty_source_is_a_data_error(vit_dir, tmp_path, settings):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "note.txt").write_text("not an image")
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    with pytest.raises(DataError):
        pipeline.stream(pm, DataRequest(data=str(empty), limit=5), [1], [lambda t: None], settings, notes=[])


def test_query_index_is_checked_against_n(vit_dir, settings):
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    assert pipeline.query_index(pm, ModelRequest(str(vit_dir))) == 0
    assert pipeline.query_index(pm, ModelRequest(str(vit_dir), query_index=-1)) == pm.info.n - 1
    with pytest.raises(InputError, match="out of range"):
        pipeline.query_index(pm, ModelRequest(str(vit_dir), query_index=pm.info.n))


def test_load_builds_only_to_the_deepest_probe(vit_dir, settings):
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    assert pm.built_layers == 1 and pm.device == settings.device


def test_duplicate_images_are_dropped_before_the_forward_pass_unless_kept(vit_dir, image_dir, tmp_path, settings):
    folder = tmp_path / "dups"
    folder.mkdir()
    names = sorted(p.name for p in image_dir.iterdir())[:12]
    for name in names:
        (folder / name).write_bytes((image_dir / name).read_bytes())
    (folder / "zz_copy_a.png").write_bytes((image_dir / names[3]).read_bytes())
    (folder / "zz_copy_b.png").write_bytes((image_dir / names[5]).read_bytes())
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    sizes: list[int] = []
    fed = pipeline.stream(
        pm,
        DataRequest(data=str(folder), limit=14, batch_size=5),
        [1],
        [lambda t: sizes.append(len(t[1]))],
        settings,
        notes=[],
    )
    assert fed.count == 12 == sum(sizes)
    assert fed.duplicates["repeats"] == 2 and fed.duplicates["dropped"] == 2 and fed.duplicates["example"] == [3, 12]
    assert "2 of 14 images repeat" in fed.duplicates_line
    kept = pipeline.stream(
        pm,
        DataRequest(data=str(folder), limit=14, batch_size=5, keep_duplicates=True),
        [1],
        [lambda t: None],
        settings,
        notes=[],
    )
    assert kept.count == 14 and kept.duplicates["repeats"] == 2 and kept.duplicates["dropped"] == 0


def _precision() -> tuple:
    from mhaaudit.numerics.rule import _precision_settings

    return (torch.get_float32_matmul_precision(), *(obj.fp32_precision for obj in _precision_settings()))


def test_capture_and_consumers_run_at_full_float32_precision_and_restore_it(vit_dir, image_dir, settings):
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    before = _precision()
    torch.set_float32_matmul_precision("high")  # a user's setting, TF32 allowed
    try:
        allowed = _precision()
        seen = []
        pipeline.stream(
            pm,
            DataRequest(data=str(image_dir), limit=4, batch_size=2),
            [1],
            [lambda t: seen.append(_precision())],
            settings,
            notes=[],
        )
        assert seen and all(p[0] == "highest" and all(x == "ieee" for x in p[1:]) for p in seen)
        assert _precision() == allowed
    finally:
        torch.set_float32_matmul_precision(before[0])


def test_inputs_are_staged_through_pinned_memory_only_for_cuda(vit_dir, image_dir, settings):
    assert pipeline.staged(torch.device("cuda")) and pipeline.staged(torch.device("cuda:1"))
    assert not pipeline.staged(torch.device("cpu"))
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    _info, raw = pipeline.example_batches(pm, DataRequest(data=str(image_dir), limit=3, batch_size=3), 0, [])
    inputs = pipeline._prepare(pm, next(raw))
    assert inputs["pixel_values"].device == pm.device
    assert not inputs["pixel_values"].is_pinned() or pm.device.type == "cuda"
    on_cpu = pm.preprocess(
        next(pipeline.example_batches(pm, DataRequest(data=str(image_dir), limit=3), 0, [])[1]), device="cpu"
    )
    assert on_cpu["pixel_values"].device.type == "cpu"
    assert torch.equal(on_cpu["pixel_values"], inputs["pixel_values"].cpu())


def test_batches_are_prepared_on_several_threads_in_order(vit_dir, image_dir, settings, monkeypatch):
    """Several helper threads (a CUDA model's) give the batches one thread gives, in their order, an empty turn
    passed through where it was; the CPU's default is one thread, a CUDA model's CUDA_PREPARE_WORKERS."""
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    _info, raw = pipeline.example_batches(pm, DataRequest(data=str(image_dir), limit=9, batch_size=2), 0, [])
    raws = list(enumerate(raw))
    raws.insert(2, (None, None))
    one = list(pipeline._prefetched(pm, raws, workers=1))
    three = list(pipeline._prefetched(pm, raws, workers=3))
    assert [i for i, _ in three] == [i for i, _ in one] == [0, 1, None, 2, 3, 4]
    assert all(
        (a is None and b is None) or torch.equal(a["pixel_values"], b["pixel_values"])
        for (_, a), (_, b) in zip(one, three, strict=True)
    )
    sizes = []
    real = pipeline.worker_pool
    monkeypatch.setattr(pipeline, "worker_pool", lambda n, name: sizes.append(n) or real(n, name))
    list(pipeline._prefetched(pm, raws[:1]))
    monkeypatch.setattr(pipeline, "staged", lambda device: True)
    monkeypatch.setattr(pipeline, "_prepare", lambda pm, raw: {"raw": raw})
    list(pipeline._prefetched(pm, raws[:1]))
    assert sizes == [1, pipeline.CUDA_PREPARE_WORKERS]


def test_a_batch_on_the_model_s_device_is_prepared_there_and_others_are_staged(monkeypatch):
    """With staging (a CUDA model), a list of images is preprocessed on the host and pinned; a tensor batch on the
    model's device is preprocessed where it is ("cuda" is the current device, where tensors say "cuda:0")."""
    calls = []

    class Model:  # on the meta device, standing for a GPU: the host is not where the model is
        device = torch.device("meta")
        info = type("Info", (), {"modality": "image"})()

        def preprocess(self, raw, device):
            calls.append(str(device))
            return {"pixel_values": torch.zeros(1)}

    monkeypatch.setattr(pipeline, "staged", lambda device: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    pipeline._prepare(Model(), torch.zeros(1, 3, 4, 4, dtype=torch.uint8, device="meta"))
    inputs = pipeline._prepare(Model(), ["an image"])
    assert calls == ["meta", "cpu"]  # the first where it is (the model's device), the second on the host
    assert inputs["pixel_values"].device.type == "meta"  # then copied to the model's device
    assert pipeline.is_on(torch.zeros(1), "cpu") and pipeline.is_on(torch.zeros(1), torch.device("cpu"))
    if torch.cuda.is_available():
        t = torch.zeros(1, device="cuda")
        assert pipeline.is_on(t, "cuda") and pipeline.is_on(t, f"cuda:{torch.cuda.current_device()}")
        assert not pipeline.is_on(t, "cpu") and not pipeline.is_on(torch.zeros(1), "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs_come_through_pinned_memory(vit_dir, image_dir):
    cuda = Settings.resolve(device="cuda", seed=0)
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", cuda, max_layer=1)
    _info, raw = pipeline.example_batches(pm, DataRequest(data=str(image_dir), limit=3), 0, [])
    batch = next(raw)
    inputs = pipeline._prepare(pm, batch)
    assert inputs["pixel_values"].device.type == "cuda"
    torch.testing.assert_close(
        inputs["pixel_values"].cpu(), pm.preprocess(batch, device="cpu")["pixel_values"], rtol=0, atol=0
    )


def test_builtin_images_are_made_on_the_models_device_and_read_ahead(vit_dir, settings):
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    info, _raw = pipeline.example_batches(pm, DataRequest(limit=5, batch_size=2), 0, [])
    assert info.source.device == str(pm.device)
    # the single-process loop reads the source on a helper thread, in order
    import threading

    readers = []
    original = info.source._generate

    def spy():
        readers.append(threading.current_thread().name)
        yield from original()

    info2, raw2 = pipeline._assigned(pm, DataRequest(limit=5, batch_size=2), settings, [], distributed.SingleProcess())
    info2.source._generate = spy
    batches = list(raw2)
    assert [i for i, _ in batches] == [0, 1, 2] and [len(b) for _, b in batches] == [2, 2, 1]
    assert readers == ["mhaaudit-read"]


def test_freed_memory_is_handed_back_during_and_after_the_capture(vit_dir, image_dir, settings, monkeypatch):
    """The capture releases freed host memory (mhaaudit.hostmem) while it runs and once at the end,
    each time after the batch's consumers are done with it."""
    from mhaaudit import hostmem

    events = []
    monkeypatch.setattr(hostmem, "release", lambda: events.append("release") or True)
    monkeypatch.setattr(pipeline, "_prefetched", _recording(pipeline._prefetched, events))
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    pipeline.stream(
        pm,
        DataRequest(data=str(image_dir), limit=9, batch_size=4),
        [1],
        [lambda t: events.append("consumed")],
        settings,
        notes=[],
    )
    # The first batch releases at once (the Trimmer's first call), later ones at most once a second,
    # and the end of the capture always does.
    assert events[:3] == ["batch", "consumed", "release"]
    assert events[-1] == "release" and events.count("consumed") == 3
    assert all(events[i - 1] in ("consumed", "release") for i, e in enumerate(events) if e == "release")


def _recording(prefetched, events):
    def wrapped(pm, raw):
        for item in prefetched(pm, raw):
            events.append("batch")
            yield item

    return wrapped


# --------------------------------------------------------------------------- what the data gives


def _mixed_folder(folder, rgb: int, other: int, corrupt: int):
    """``rgb`` RGB images, ``other`` grayscale / RGBA / paletted ones and ``corrupt`` broken files."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (folder / "cls").mkdir(parents=True)
    modes = ["RGB"] * rgb + [("L", "RGBA", "P")[i % 3] for i in range(other)]
    for i, mode in enumerate(modes):
        Image.fromarray(rng.integers(0, 256, (36, 36, 3), dtype=np.uint8)).convert(mode).save(
            folder / "cls" / f"{i:03d}.png"
        )
    for i in range(corrupt):
        (folder / "cls" / f"broken{i}.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    return folder


def test_too_few_usable_images_refused_before_the_forward_pass(tmp_path, vit_dir, monkeypatch, capsys):
    from mhaaudit.auditing import audit
    from mhaaudit.cli.app import main

    folder = _mixed_folder(tmp_path / "photos", rgb=12, other=9, corrupt=2)  # tiny ViT: n = 17
    monkeypatch.setattr(pipeline, "_prepare", lambda *a, **k: pytest.fail("a batch was prepared for the model"))
    with pytest.raises(DataError) as caught:
        audit(str(vit_dir), data=str(folder), limit=40, variants=["embedding"], samples=20)
    message = str(caught.value)
    assert "only 12 usable images of 23" in message and "--limit" not in message and "raise" not in message
    assert "9 not RGB (e.g. cls/012.png: mode L)" in message and "2 unreadable (e.g. cls/broken0.jpg" in message
    assert "convert the other modes to RGB with convert_rgb" in message
    assert main(["check", str(vit_dir), "--data", str(folder), "--limit", "40", "--variants", "embedding"]) == 2
    err = capsys.readouterr().err
    assert "with --convert-rgb" in err and err.count("\n") == 1


def test_asking_for_more_than_there_is_is_said(tmp_path, vit_dir, capsys):
    import json

    from mhaaudit.auditing import audit
    from mhaaudit.cli.app import main

    folder = _mixed_folder(tmp_path / "photos", rgb=12, other=9, corrupt=2)
    result = audit(str(vit_dir), data=str(folder), limit=500, variants=["embedding"], samples=20, convert_rgb=True)
    T = result.columns[0].features.T
    assert T == 21
    assert any(
        "500 examples were asked for (limit)" in note and "T = 21" in note and "2 unreadable" in note
        for note in result.notes
    )
    assert result.skips["unreadable"].count == 2 and "not RGB" not in result.skips
    assert "torchvision" in result.image_policy
    assert result.meta()["skips"] == result.skips.as_dict() and result.meta()["image_policy"] == result.image_policy
    html = result._repr_html_()
    assert "T = 21 examples (500 asked; the data gave no more)" in html
    assert (
        main(
            [
                "check",
                str(vit_dir),
                "--data",
                str(folder),
                "--limit",
                "500",
                "--variants",
                "embedding",
                "--samples",
                "20",
                "--convert-rgb",
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert any("500 examples were asked for (--limit)" in n for n in doc["meta"]["notes"])


def _save_text_model(kind: str, folder) -> None:
    import transformers

    base = dict(hidden_size=32, num_attention_heads=4, vocab_size=100, max_position_embeddings=64)
    cfg = {
        "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64),
        "opt": lambda: transformers.OPTConfig(
            num_hidden_layers=2,
            ffn_dim=64,
            word_embed_proj_dim=32,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            **base,
        ),
        "bert": lambda: transformers.BertConfig(num_hidden_layers=2, intermediate_size=64, **base),
        "distilbert": lambda: transformers.DistilBertConfig(
            dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=100, max_position_embeddings=64
        ),
    }[kind]()
    torch.manual_seed(0)
    transformers.AutoModel.from_config(cfg).eval().save_pretrained(str(folder))


@pytest.mark.parametrize("kind", ["gpt2", "opt", "bert", "distilbert"])
@pytest.mark.parametrize("n", [1, 16])
def test_decoder_is_decided_at_load_and_every_reader_follows_it(tmp_path, settings, kind, n):
    """Whether a model is a decoder is decided once at load (``ModelInfo.decoder``, from its family);
    the text examples, the attention adapters and capacity's random heads read it. The guesses it
    replaced (from the query position) took a decoder read at one token (``--context-length 1``)
    for an encoder: BERT pairs were built for GPT-2."""
    from mhaaudit.capacity.audit import attention_for
    from mhaaudit.models import first_attention
    from mhaaudit.models.families import family_of

    _save_text_model(kind, tmp_path)
    pm = pipeline.load(ModelRequest(str(tmp_path), context_length=n), "random", settings, max_layer=1)
    decoder = family_of(kind).decoder
    assert pm.info.decoder is decoder and pm.info.n == n
    assert "decoder" not in pm.info.to_dict()  # the meta keeps its keys
    assert first_attention(pm, 1).causal is decoder
    assert attention_for(pm, 1, "random", 0).causal is decoder
    if n > 1:
        info, _ = pipeline.example_batches(pm, DataRequest(limit=4, batch_size=4), settings.seed, [])
        assert ("GPT-style windows" in info.name) is decoder


def test_kept_inputs_prepare_the_data_once_for_the_passes_of_one_model(vit_dir, image_dir, settings, monkeypatch):
    """Within ``kept_inputs(pm)`` the first pass of ``pm`` keeps the inputs it fed (duplicates dropped);
    a later pass of ``pm`` over the same data feeds them again, unread, with the same description and
    the same tokens, even after the model's weights changed; other data, or another model, is read."""
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    data = DataRequest(data=str(image_dir), limit=21, batch_size=8)
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))

    def tokens(model, request):
        seen: list[torch.Tensor] = []
        fed = pipeline.stream(model, request, [1], [lambda t: seen.append(t[1])], settings, notes=[])
        return fed, torch.cat(seen)

    with pipeline.kept_inputs(pm) as kept:
        first, a = tokens(pm, data)
        again, b = tokens(pm, data)
        assert len(reads) == 1 and kept.fed_again == 1 and len(kept.batches) == 3
        assert torch.equal(a, b) and (again.name, again.count, again.fed) == (first.name, first.count, first.fed)
        with torch.no_grad():  # other weights in the same model: the same inputs, other tokens
            for p in pm.module.parameters():
                p.mul_(0.5)
        _, c = tokens(pm, data)
        assert len(reads) == 1 and not torch.equal(a, c)
        other = pipeline.load(ModelRequest(str(vit_dir)), "random", settings.with_(seed=1), max_layer=1)
        tokens(other, data)  # another model object: it reads the data itself
        tokens(pm, DataRequest(data=str(image_dir), limit=13, batch_size=8))  # other data: read, and kept instead
        assert len(reads) == 3 and kept.info is not None and kept.info.count == 13
    with pipeline.kept_inputs(pm, budget=0) as kept:  # nothing fits: every pass reads the data
        tokens(pm, data)
        tokens(pm, data)
        assert len(reads) == 5 and kept.over_budget and kept.batches == []


def test_kept_inputs_pass_to_another_model_or_are_handed_over(vit_dir, image_dir, settings, monkeypatch):
    """``kept_inputs()``: the first model's pass keeps its inputs (batch size ``auto``); ``pass_to`` feeds
    them to another model object, whose pass with the batch size ``auto`` chose reads nothing and gives the
    tokens its own reading gives; ``hand_to`` lets them go, and that model's next pass keeps its own."""
    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    other = pipeline.load(ModelRequest(str(vit_dir)), "random", settings.with_(seed=1), max_layer=1)
    data = DataRequest(data=str(image_dir), limit=21, batch_size="auto")
    reads = []
    real = pipeline.example_batches
    monkeypatch.setattr(pipeline, "example_batches", lambda *a, **k: reads.append(1) or real(*a, **k))

    def tokens(model, request):
        seen: list[torch.Tensor] = []
        fed = pipeline.stream(model, request, [1], [lambda t: seen.append(t[1])], settings, notes=[])
        return fed, torch.cat(seen)

    _, own = tokens(other, data)  # outside: the other model's own reading
    with pipeline.kept_inputs() as kept:
        first, _ = tokens(pm, data)
        assert kept.pm is pm and len(reads) == 2 and first.batch is not None
        kept.pass_to(other)
        chosen = DataRequest(data=str(image_dir), limit=21, batch_size=first.batch.size)
        fed, b = tokens(other, chosen)
        assert len(reads) == 2 and kept.fed_again == 1 and torch.equal(b, own) and fed.count == first.count
        tokens(pm, data)  # the inputs are the other model's now: this one reads
        assert len(reads) == 3
        kept.hand_to(pm)
        assert kept.info is None and kept.pm is pm
        tokens(pm, data)
        tokens(pm, data)
        assert len(reads) == 4 and kept.fed_again == 2


def test_released_kept_inputs_hold_no_model(vit_dir, image_dir, settings):
    """``KeptInputs.release``: the model that kept the inputs is let go (only its description and config are
    kept, for the comparison before ``pass_to``); the inputs stay, and no pass of that model is fed them."""
    import gc
    import weakref

    pm = pipeline.load(ModelRequest(str(vit_dir)), "random", settings, max_layer=1)
    data = DataRequest(data=str(image_dir), limit=9, batch_size=4)
    with pipeline.kept_inputs() as kept:
        pipeline.stream(pm, data, [1], [lambda t: None], settings, notes=[])
        info, gone = pm.info, weakref.ref(pm.module)
        kept.release()
        assert isinstance(kept.pm, pipeline.ReleasedModel) and kept.pm.info == info and kept.info is not None
        assert not kept.serves(pm)
        del pm
        gc.collect()
        assert gone() is None
