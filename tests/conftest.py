"""Shared fixtures: the mock engine (process-global, so set up here only) and bundled-stack plans."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inferstack_cli.plan import MockEngine, Plan, mock_engine, run_plan

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def engine() -> Iterator[MockEngine]:
    """A fresh mock engine and event loop for one test (stack ``test``, region us-east-1)."""
    with mock_engine("test", {}, [], "us-east-1") as eng:
        yield eng


_PLANS: dict[str, Plan] = {}


@pytest.fixture
def plan_of() -> Callable[[str], Plan]:
    """Plan a bundled stack once per session; tests must not mutate the result."""

    def get(stack: str) -> Plan:
        if stack not in _PLANS:
            _PLANS[stack] = run_plan(stack)
        return _PLANS[stack]

    return get
