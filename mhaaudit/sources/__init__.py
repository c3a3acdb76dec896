"""Data sources: where the audited examples come from.

Images (:func:`image_source`): the built-in offline default (seeded random crops of photographs
shipped with scikit-image and scikit-learn), an image folder, a parquet or Arrow file of image
bytes, a folder written by ``save_to_disk``, or a Hugging Face dataset. Text (:func:`text_source`):
the built-in offline corpus (the prose of the installed packages' docstrings,
:func:`docstring_corpus`), .txt/.jsonl/.parquet/.arrow/.csv/.tsv files, a folder written by
``save_to_disk``, or a Hugging Face dataset (``"wikipedia"`` is the paper's). The paper's BERT and GPT-2 input
constructions are :func:`bert_pair_examples` and :func:`gpt_window_examples`;
:func:`offline_tokenizer` finds a tokenizer for random-init text models without the network;
:func:`find_duplicates` and :class:`DuplicateFinder` find exact duplicate inputs.
"""

from ._common import SKIP_CAUSES, Skips, describe_skips
from .containers import Table, choose_column, open_table
from .corpus import Corpus, docstring_corpus
from .duplicates import DuplicateFinder, Duplicates, find_duplicates
from .examples import TextExamples, bert_pair_examples, gpt_window_examples
from .images import (
    BUILTIN_PHOTOS,
    IMAGE_EXTENSIONS,
    BuiltinImages,
    HubImages,
    ImageFolder,
    ImageSource,
    ParquetImages,
    TableImages,
    image_source,
    images_ahead,
)
from .text import BuiltinText, HubText, JsonlText, ParquetText, TableText, TextFiles, TextSource, text_source
from .tokenizers import FallbackTokenizer, offline_tokenizer

__all__ = [
    "BUILTIN_PHOTOS",
    "IMAGE_EXTENSIONS",
    "SKIP_CAUSES",
    "BuiltinImages",
    "BuiltinText",
    "Corpus",
    "DuplicateFinder",
    "Duplicates",
    "FallbackTokenizer",
    "HubImages",
    "HubText",
    "ImageFolder",
    "ImageSource",
    "JsonlText",
    "ParquetImages",
    "ParquetText",
    "Skips",
    "Table",
    "TableImages",
    "TableText",
    "TextExamples",
    "TextFiles",
    "TextSource",
    "bert_pair_examples",
    "choose_column",
    "describe_skips",
    "docstring_corpus",
    "find_duplicates",
    "gpt_window_examples",
    "image_source",
    "images_ahead",
    "offline_tokenizer",
    "open_table",
    "text_source",
]
