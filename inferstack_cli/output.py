"""What every ``inferstack`` command shares when it prints: the exit codes and the plain-text table."""

from __future__ import annotations

EXIT_CONFIG = 2
"""Bad config: one line per problem, no traceback."""
EXIT_VIOLATION = 3
"""``plan``: a mandatory policy is violated."""
EXIT_NOT_READY = 4
"""``preflight``: at least one blocker."""
EXIT_NO_AWS = 5
"""``preflight``: the account could not be asked (no credentials, refused credentials, no network)."""


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
