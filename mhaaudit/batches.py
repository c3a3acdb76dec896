"""The raw batches a model reads: a :class:`DataRequest` made into batches for that model (PIL
images, or token-id rows built with the paper's BERT-pair / GPT-window constructions), and the
:class:`DataInfo` naming the data. :mod:`mhaaudit.pipeline` feeds them to the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import distributed
from .errors import DataError, InputError, ModelError, Param
from .facts import BatchChoice
from .progress import status
from .sources import (
    BuiltinImages,
    bert_pair_examples,
    gpt_window_examples,
    image_source,
    offline_tokenizer,
    text_source,
)

if TYPE_CHECKING:
    from .request import DataRequest


@dataclass
class DataInfo:
    """What :func:`stream` learned about the data: its name, items skipped, examples fed.

    ``fed`` lists the ``(batch index, size)`` of the batches this process's consumers saw, in
    order; ``parts`` holds every rank's ``fed`` (one list in one process).
    """

    name: str = ""
    skipped: int = 0
    skips: dict = field(default_factory=dict)  # cause -> {"count", "example"} (sources.Skips.as_dict())
    policy: str = ""  # images: the rule for modes other than RGB
    count: int = 0
    seconds: float = 0.0
    duplicates: dict = field(default_factory=dict)  # total, repeats, dropped, example (see sources.Duplicates)
    duplicates_line: str = ""  # the same in words, for the report
    source: Any = field(default=None, repr=False)  # learns how many items it skipped as it is read
    fed: list = field(default_factory=list)
    parts: list = field(default_factory=list)
    shard: Any = field(default_factory=distributed.SingleProcess, repr=False)  # the session that dealt the batches
    batch: BatchChoice | None = None  # the batch size used and how it was chosen (set by stream())
    documents_sha256: str | None = None  # text, asked for: the digest of the documents drawn from (any data seed)

    def settle(self) -> None:
        """Take the source's count of skipped items once it has been read."""
        self.skipped = max(self.skipped, int(getattr(self.source, "skipped", 0) or 0))
        found = getattr(self.source, "skips", None)
        if found and not self.skips:  # text sets its own (the source's, and the documents too short)
            self.skips = found.as_dict()
        self.policy = getattr(self.source, "policy", "") or self.policy

    def gather_rows(self, rows: dict | None, header=None) -> tuple[dict | None, Any]:
        """Row-stacked results of a consumer (name -> tensor, rows in the order fed) for every
        example, in single-process order, with their ``header`` (what describes them): every
        rank's rows, gathered, when the batches were dealt among ranks; ``(rows, header)`` itself
        in one process. The rows are None when no rank fed any batch."""
        return self.shard.gather_rows(rows, header, self.fed, self.parts)


def example_batches(
    pm,
    data: DataRequest,
    seed: int,
    notes: list[str],
    need: int | None = None,
    progress: bool = False,
    digest: bool = False,
) -> tuple[DataInfo, Iterator[Any]]:
    """Raw batches of examples for ``pm`` (not yet model inputs) and the data's description.

    Images: lists of PIL images; with ``need``, a finite source whose headers show fewer usable
    images than ``need`` is refused here, before any forward pass. Text: ``(token-id rows,
    segment-id rows or None)`` built with the paper's constructions (BERT pairs
    ``[CLS] s1 [SEP] s2``, GPT windows of n tokens); with ``progress``, building the built-in
    corpus and the examples shows on stderr; with ``digest``, the info's ``documents_sha256`` is the digest of
    the documents the examples were drawn from (``TextExamples.corpus_sha256``).

    Raises:
        InputError: when a text column is named for an image model, or an image column or RGB conversion for a
            text model.
        TypeError: when ``data.batch_size`` is not yet resolved to an integer (a caller's bug: :func:`stream`
            resolves "auto").
    """
    if pm.info.modality == "image":
        if data.text_column is not None:
            raise InputError(
                Param("text_column") + f" names a column of text; {pm.info.name} reads images "
                "(use " + Param("image_column") + ")"
            )
        src = image_source(
            data.data,
            split=data.split,
            limit=data.limit,
            seed=seed,
            device=pm.device,
            image_column=data.image_column,
            convert_rgb=data.convert_rgb,
        )
        if need is not None:
            _refuse_too_few_images(src, need, data.limit)
        if not isinstance(data.batch_size, int):  # stream() resolves "auto" before it reads examples
            raise TypeError(f"example_batches needs a resolved batch size, got {data.batch_size!r}")
        info = DataInfo(name=src.name, source=src, policy=src.policy)
        return info, _image_batches(pm, src, data.batch_size)
    if data.image_column is not None or data.convert_rgb:
        given = Param("image_column") if data.image_column is not None else Param("convert_rgb")
        raise InputError(given + f" applies to images; {pm.info.name} reads text (use " + Param("text_column") + ")")
    return _text_batches(pm, data, seed, notes, progress, digest)


def _image_batches(pm, src, batch_size: int) -> Iterator:
    """The source's batches: the built-in images as uint8 tensors on the model's device where its preprocessing
    gives their PIL images' pixels from them (``ProbedModel.takes_image_tensors``; one process), else lists
    of PIL images."""
    if (
        isinstance(src, BuiltinImages)
        and distributed.current().world_size == 1
        and pm.takes_image_tensors(src.SIDE, src.SIDE)
    ):
        return src.tensor_batches(batch_size)
    return src.batches(batch_size)


def _refuse_too_few_images(src, n: int, limit: int) -> None:
    """Before any forward pass: when the headers of a finite source (read cheaply, no pixels
    decoded) show fewer usable images than Assumptions 1 and 3 need (n), refuse with what was
    skipped and why. The caller asks for at least n (``limit``), so raising it cannot help.

    Raises:
        DataError: when a complete scan of the source's headers finds fewer than ``n`` usable images.
    """
    if limit < n:
        return
    scan = src.scan(limit)
    if scan is None or not scan.complete or scan.usable >= n:
        return
    skipped = f"; skipped: {scan.skips.describe()}" if scan.skips else ""
    hint = ""
    if scan.skips.count("not RGB") and not src.convert_rgb:
        hint = (
            "; convert the other modes to RGB with " + Param("convert_rgb") + " (as torchvision's ImageFolder does; "
            "the paper kept RGB images only)"
        )
    raise DataError(
        f"{src.name}: only {scan.usable} usable images of {scan.scanned}, but Assumptions 1 and 3 draw "
        f"n = {n} of the T examples, so T must be at least {n}{skipped}" + hint + "; or add images"
    )


def refuse_foreign_vocabulary(pm) -> None:
    """Refuse a trained text model that has no tokenizer of its own: it would be fed a vocabulary it was
    not trained on (random weights are fed the offline default one).

    Raises:
        ModelError: when ``pm`` is a text model with trained weights and no tokenizer.
    """
    info = pm.info
    if info.modality == "text" and info.weights == "trained" and pm.tokenizer is None:
        raise ModelError(
            f"{info.name} has trained weights but no tokenizer files (vocab.txt, vocab.json, "
            "tokenizer.json); a trained text model must be fed its own vocabulary: save the tokenizer "
            "beside the weights with tokenizer.save_pretrained(folder)"
        )


def _text_batches(
    pm, data: DataRequest, seed: int, notes: list[str], progress: bool = False, digest: bool = False
) -> tuple[DataInfo, Iterator[Any]]:
    info = pm.info
    src = text_source(data.data, split=data.split, seed=seed, text_column=data.text_column, progress=progress)
    tok = pm.tokenizer
    refuse_foreign_vocabulary(pm)
    if tok is None:
        vocab = int(getattr(pm.config, "vocab_size", 0) or 0)
        tok, tok_desc = offline_tokenizer(info.family, vocab)
        notes.append(f"tokenizer: {tok_desc} (no tokenizer shipped with the model offline)")
    decoder = info.decoder  # decided at load (ModelInfo.decoder)
    build = gpt_window_examples if decoder else bert_pair_examples
    with status(f"Building {data.limit} text examples of n = {info.n} tokens", progress):
        ex = build(src, tok, info.n, data.limit, seed=seed, distinct=not data.keep_duplicates, corpus_digest=digest)
    # Segment ids as BERT's next-sentence inputs have them: 0 up to and including [SEP], 1 after.
    segments = None
    if not decoder and ex.s1_lengths is not None and int(getattr(pm.config, "type_vocab_size", 0) or 0) >= 2:
        segments = [[0] * (s1 + 2) + [1] * (info.n - s1 - 2) for s1 in ex.s1_lengths]
    step = data.batch_size

    def gen():
        for i in range(0, len(ex.ids), step):
            yield ex.ids[i : i + step], (segments[i : i + step] if segments is not None else None)

    fate = "kept, as asked" if data.keep_duplicates else "redrawn"
    dups = {
        "total": len(ex.ids) + (0 if data.keep_duplicates else ex.repeats),
        "repeats": ex.repeats,
        "dropped": 0 if data.keep_duplicates else ex.repeats,
        "example": None,
    }
    line = (
        f"{ex.repeats} candidate token sequences repeated an earlier example exactly ({fate})"
        if ex.repeats
        else f"no duplicate token sequences: all {len(ex.ids)} are distinct"
    )
    info = DataInfo(name=ex.description, source=src, duplicates=dups, duplicates_line=line)
    info.skips = ex.skips
    info.documents_sha256 = ex.corpus_sha256
    info.skipped = sum(v["count"] for v in ex.skips.values())
    return info, gen()
