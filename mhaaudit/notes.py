"""The notes of an audit: what a run found worth saying, each with the kind of fact it reports."""

from __future__ import annotations

from enum import Enum

from .errors import Message


class NoteKind(str, Enum):
    """What fact a note of an audit reports: the key notes are de-duplicated by."""

    N_ABOVE_D = "n-above-d"  # n > d: Assumption 1 cannot hold (said once per run)
    SHORT_OF_LIMIT = "short-of-limit"  # the data gave fewer examples than the limit
    DUPLICATE_INPUTS = "duplicate-inputs"  # exact duplicate inputs were found
    DATA = "data"  # what reading the data found (tokenizer, truncation, ...)


class Note(Message):
    """One note of an audit: its text (a ``str``, as the report and the JSON ``notes`` give it; a
    :class:`~mhaaudit.errors.Message`, so the parameters it names keep their parts) and its
    :class:`NoteKind`. Equal to its text."""

    kind: NoteKind

    def __new__(cls, text: str, kind: NoteKind | str = NoteKind.DATA) -> Note:
        """The note ``text`` of ``kind`` (a :class:`NoteKind` or its value).

        Raises:
            ValueError: when ``kind`` is not a :class:`NoteKind` value.
        """
        note = super().__new__(cls, text)
        note.kind = NoteKind(kind)
        return note

    def named(self, name_of) -> Note:
        """The note with each parameter it names written as ``name_of(parameter)``, of the same kind."""
        return Note(super().named(name_of), self.kind)

    def __reduce__(self):
        return (_note, (self.parts, self.kind.value))

    def document(self) -> dict:
        """The note as JSON data: ``{"kind": ..., "text": ...}``."""
        return {"kind": self.kind.value, "text": str(self)}

    @classmethod
    def from_document(cls, data) -> Note:
        """The note :meth:`document` wrote (a bare string is read as a data note).

        Raises:
            ValueError: when ``data`` is neither a string nor an object of exactly ``kind`` and a text string.
        """
        if isinstance(data, str):
            return cls(data)
        if not isinstance(data, dict) or set(data) != {"kind", "text"} or not isinstance(data["text"], str):
            raise ValueError(f"a note is an object with kind and text, got {data!r}")
        return cls(data["text"], data["kind"])


def _note(parts: tuple, kind: str) -> Note:
    """The note of ``parts`` and ``kind`` (how a pickled note is made again)."""
    return Note(Message(*parts), kind)


#: Kinds of note one run says once, whatever their wording (the first one stays).
ONCE_PER_RUN = frozenset({NoteKind.N_ABOVE_D})


def add_note(notes: list, text: str, kind: NoteKind = NoteKind.DATA) -> Note | None:
    """Append ``text`` as a :class:`Note` of ``kind`` unless the run has it already (the same
    text, or any note of a kind said once per run); the note added, or None."""
    if any((kind in ONCE_PER_RUN and getattr(n, "kind", None) == kind) or n == text for n in notes):
        return None
    note = Note(text, kind)
    notes.append(note)
    return note
