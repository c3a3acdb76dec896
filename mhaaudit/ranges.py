"""Integer sets written as ranges on the command line: ``"0-6"``, ``"3"``, ``"1,2,4"``, ``"0-2,6"``."""

from __future__ import annotations

from .errors import InputError


def parse_int_ranges(spec: str, option: str, what: str = "numbers", example: str = "0-6 or 0,1,4") -> set[int]:
    """The integers named by ``spec``; empty parts are ignored. Errors name ``option``."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise InputError(f"{option} {spec!r}: the range {part} is empty (use low-high, e.g. {example.split(' ')[0]})")
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except InputError:
            raise
        except ValueError:
            raise InputError(f"{option} {spec!r}: use {what} and ranges such as {example}") from None
    return out
