"""The mock engine's teardown: a program that stops part-way leaves nothing of Pulumi's running behind."""

from __future__ import annotations

import asyncio

import pulumi
import pulumi_kubernetes as k8s
import pytest

from inferstack_cli.plan import mock_engine


def test_a_program_stopped_part_way_leaves_no_task_pending() -> None:
    # GIVEN a program that stops part-way (a refused input, a failed assertion), its registrations still in flight
    with pytest.raises(RuntimeError, match="stopped"), mock_engine("teardown", {}, [], "us-east-1") as engine:
        name = pulumi.Output.all(pulumi.Output.from_input("a"), pulumi.Output.from_input("b")).apply("-".join)
        k8s.core.v1.ConfigMap("cm", metadata={"name": name}, data={"k": "v"})
        raise RuntimeError("stopped")
    # WHEN the engine is torn down THEN none of its tasks is left pending: a pending task's coroutine is collected
    # unawaited later, and its RuntimeWarning fails whichever test then runs (pytest's unraisable-exception check)
    assert [t for t in asyncio.all_tasks(engine.loop) if not t.done()] == []
