"""Tests for mhaaudit.sources.docstrings: docstrings read from source in order, code removed."""

from __future__ import annotations

import inspect

from mhaaudit.sources.docstrings import module_docstrings, prose_paragraphs

SOURCE = '''
"""The module's own docstring."""

raise SystemExit("never executed")


class Widget:
    """A widget holds parts."""

    def method(self):
        """The method of a widget."""

        def inner():
            """An inner helper."""


if True:
    async def later():
        """Defined inside a block, found all the same."""


def no_doc():
    return "not a docstring"
'''


def test_module_docstrings_in_source_order_without_running_anything():
    assert module_docstrings(SOURCE) == [
        "The module's own docstring.",
        "A widget holds parts.",
        "The method of a widget.",
        "An inner helper.",
        "Defined inside a block, found all the same.",
    ]
    assert module_docstrings(SOURCE.encode()) == module_docstrings(SOURCE)
    assert module_docstrings("def broken(:\n") == []
    assert module_docstrings('"""Only \\d an invalid escape."""') == ["Only \\d an invalid escape."]


def _prose(doc: str) -> list[str]:
    return prose_paragraphs(inspect.cleandoc(doc))[0]


def test_doctest_blocks_and_fences_are_dropped():
    paragraphs, code = prose_paragraphs(
        inspect.cleandoc("""
        Add two arrays element by element and return the sum.

        >>> import numpy as np
        >>> np.add([1, 2], [3, 4])
        array([4, 6])

        The result has the broadcast shape of both inputs.

        ```python
        model = AutoModel.from_pretrained("bert-base-uncased")
        outputs = model(**inputs)
        ```

        ~~~
        raw block
        ~~~
        The last paragraph stays in the text.
    """)
    )
    assert paragraphs == [
        "Add two arrays element by element and return the sum.",
        "The result has the broadcast shape of both inputs.",
        "The last paragraph stays in the text.",
    ]
    assert code == 3


def test_rest_literal_blocks_and_directives():
    assert _prose("""
        Use it like this::

            value = compute(x, y)
            print(value)

        and then read the value back from the cache.

        A second form of the example ::

            other = 1

        .. code-block:: python

            for i in range(3):
                print(i)

        .. math::

            y = W x + b

        .. note:: Notes are prose and stay in the text.
           Their body continues on the next line.

        .. versionadded:: 1.4
           The ``axis`` argument was added here.

        .. _target-label:

        .. a reST comment that is not a directive
           and its continuation

        .. autosummary::
           :toctree: generated

           numpy.add
        The paragraph after all that is kept as well.
    """) == [
        "Use it like this:",
        "and then read the value back from the cache.",
        "A second form of the example",
        "Notes are prose and stay in the text. Their body continues on the next line.",
        "The ``axis`` argument was added here.",
        "The paragraph after all that is kept as well.",
    ]


def test_sections_and_code_like_paragraphs():
    assert _prose("""
        Solve a linear system with a few words of explanation.

        Parameters
        ----------
        a : array_like
            The coefficient matrix of the system.

        Examples
        --------
        Build a small problem first:

            a = np.eye(3)
            b = np.ones(3)
            x = solve(a, b)

        +------+------+
        Returns the solution of the system as an array.
        ======  ======
        Short
    """) == [
        "Solve a linear system with a few words of explanation.",
        "a : array_like The coefficient matrix of the system.",
        "Build a small problem first:",
        "Returns the solution of the system as an array.",
    ]


def test_formulas_and_name_lists_are_not_prose():
    assert _prose("""
        x_1, x_2, x_3 = (a_1 * b_1) / c_2 ** 2

        numpy.add, numpy.subtract, numpy.multiply, numpy.divide

        Plain words about the functions above.
    """) == ["Plain words about the functions above."]
