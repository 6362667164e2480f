"""PromQL read the way Prometheus reads it (promql-parser), for tests that check which series a query selects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SITE_LABEL = "inferstack_site"


def nodes(node: Any) -> Iterator[Any]:
    """``node`` and every expression under it, depth first (a parsed ``promql_parser`` tree)."""
    yield node
    children = [getattr(node, a, None) for a in ("expr", "lhs", "rhs", "param", "vector_selector")]
    for child in [*children, *getattr(node, "args", [])]:
        if child is not None:
            yield from nodes(child)


def selectors(node: Any) -> list[Any]:
    """Every vector selector of a parsed PromQL expression (``promql_parser.parse``)."""
    import promql_parser

    return [n for n in nodes(node) if isinstance(n, promql_parser.VectorSelector)]


def reads_own_series_only(expr: str) -> list[str]:
    """The selectors of ``expr`` that do not match ``inferstack_site=""`` (a site's forwarded samples); [] if none.

    An expression with no selector at all is reported too: it reads nothing, which no rule or trigger means to.
    """
    import promql_parser

    found = selectors(promql_parser.parse(expr))
    if not found:
        return [f"no selector in {expr!r}"]
    return [
        str(vs)
        for vs in found
        if not any(m.name == SITE_LABEL and m.value == "" and "Equal" in str(m.op) for m in vs.matchers.matchers)
    ]
