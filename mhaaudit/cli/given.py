"""Which options the user typed: one that has no effect is refused, a renamed one warns.

No option is silently ignored: :func:`given` tells which options the user typed (click's record of
where each value came from) and :func:`refuse_unused` turns one that has no effect in the
combination given into an input error naming the conflict. A renamed option keeps its old name
for one release through :func:`renamed`, which warns on stderr.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..stdio import say


def given(ctx: typer.Context, *names: str) -> list[str]:
    """The parameters among ``names`` (Python names) whose value the user gave, not their default."""
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(name)
    return out


def flag(ctx: typer.Context, name: str) -> str:
    """The option a parameter is typed as (``limit`` -> ``--limit``)."""
    for p in ctx.command.params:
        if p.name == name:
            return max(p.opts, key=len)
    return name


def refuse_unused(ctx: typer.Context, names, why: str) -> None:
    """An input error when any of ``names`` was given: they have no effect ``why`` (e.g. "with --from").

    Raises:
        InputError: when any of ``names`` was given on the command line, naming their options.
    """
    from ..errors import InputError

    used = [flag(ctx, n) for n in given(ctx, *names)]
    if used:
        verb = "has" if len(used) == 1 else "have"
        raise InputError(f"{', '.join(used)} {verb} no effect {why}")


def refuse_seed(ctx: typer.Context, seeds: str | None) -> None:
    """``--seed`` beside ``--seeds``, whatever its value (``--seed 0``, its default, too): each run takes a seed listed.

    Raises:
        InputError: when both were given.
    """
    if seeds is not None:
        refuse_unused(
            ctx,
            ("seed",),
            "with --seeds: each run is seeded by one seed listed; give either --seed or --seeds, not both",
        )


def refuse_data_options(ctx: typer.Context, data: str | None) -> None:
    """``--split`` names a split of a Hugging Face dataset: refused with the built-in data or a local file."""
    if data is None:
        refuse_unused(ctx, ("split",), "without --data: the built-in data has no splits")
    elif Path(data).expanduser().is_file():
        refuse_unused(ctx, ("split",), f"on a local file ({data}): it names a split of a Hugging Face dataset")


def named_list(values: list[str] | None, option: str, what: str) -> list[str] | None:
    """The values of a repeatable, comma-separated option (None when it was not given); given, it must name
    something: ``--variants ''`` is not the default set of columns, nor ``--fail-on ','`` no check.

    Raises:
        InputError: when the option was given but its values, split at commas, are all empty.
    """
    from ..errors import InputError
    from ..validate import split_list

    if values is None:
        return None
    named = split_list(values)
    if named is None:
        shown = ", ".join(repr(v) for v in values)
        raise InputError(f"{option} {shown} names no {what}")
    return named


def deprecation_line(old_flag: str, new_flag: str, note: str = "") -> str:
    """The warning a deprecated option name prints on stderr."""
    return f"Warning: {old_flag} is deprecated and will be removed in the next release; use {new_flag}" + (
        f" ({note})" if note else ""
    )


def renamed(old_flag: str, old_value, new_flag: str, new_value, note: str = ""):
    """The value of an option renamed from ``old_flag`` to ``new_flag`` (both default None).

    The old name still works for one release and warns on stderr; giving both is an input error.

    Raises:
        InputError: when both ``old_flag`` and ``new_flag`` are given.
    """
    from ..errors import InputError

    if old_value is None:
        return new_value
    if new_value is not None:
        raise InputError(f"{old_flag} is the deprecated name of {new_flag}; give {new_flag} only")
    say(deprecation_line(old_flag, new_flag, note))
    return old_value
