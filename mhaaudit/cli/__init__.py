"""Command-line interface: a thin Typer layer over the library."""
