"""mhaaudit.console: what the reports and progress lines write to a terminal shows control characters
escaped, laid out as it is shown, with rich's own colours and controls kept."""

from __future__ import annotations

import io

from rich.table import Table
from rich.text import Text

from mhaaudit.console import TextConsole

HOSTILE = "x\x1b]0;PWNED\x07\x1b[2J"
SHOWN = r"x\x1b]0;PWNED\x07\x1b[2J"


def _printed(*items, colour: bool = True) -> str:
    buf = io.StringIO()
    con = TextConsole(file=buf, width=100, force_terminal=colour, color_system="truecolor" if colour else None)
    for item in items:
        con.print(item, highlight=False)
    return buf.getvalue()


def test_markup_lines_and_table_cells_show_names_escaped_and_keep_the_colours():
    table = Table(title=f"from {HOSTILE}")
    table.add_column("source")
    table.add_column("verdict")
    table.add_row(HOSTILE, "[green]holds[/green]")
    out = _printed(f"[bold]data[/bold]: {HOSTILE}", table)
    assert "\x1b]0;" not in out and "\x1b[2J" not in out and "\x07" not in out
    assert out.count(SHOWN) == 3
    assert "\x1b[1m" in out and "\x1b[32m" in out  # the report's own bold and green


def test_a_table_is_laid_out_for_the_name_as_shown():
    table = Table()
    table.add_column("source")
    table.add_row(HOSTILE)
    lines = _printed(table, colour=False).splitlines()
    assert len({len(line) for line in lines}) == 1  # every border lines up with the escaped cell
    assert SHOWN in lines[3]


def test_text_objects_made_without_markup_are_escaped_when_written():
    out = _printed(Text(HOSTILE, style="red"), colour=False)
    assert out == r"x\x1b]0;PWNED\x1b[2J" + "\n"  # rich drops the BEL itself; the escapes are shown


def test_line_breaks_stay():
    assert _printed("one\ntwo", colour=False) == "one\ntwo\n"


def test_progress_lines_show_a_name_on_one_line_as_written(capsys):
    """A status line, a spinner's and a bar's description naming a checkpoint or a model: a line break in the
    name cannot start a line of its own on stderr, and ``[bold]`` in it is shown, not obeyed."""
    from mhaaudit import progress

    progress.log("Checkpoint 1 of 3: ckpt[bold]x\nGeneral Position: holds", True)
    with progress.status("Loading m[bold]x\nGeneral Position: holds", True):
        pass
    with progress.task("draws of m[bold]x\nGeneral Position: holds", 2, True) as advance:
        advance(2)
    err = capsys.readouterr().err
    assert "Checkpoint 1 of 3: ckpt[bold]x\\x0aGeneral Position: holds" in err
    assert not [line for line in err.splitlines() if line.startswith("General Position")]
