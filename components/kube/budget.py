"""A node budget: pods' effective requests added up against what nodes offer, in words a config error can use.

Each tier says which pods run where and what its nodes offer (the edge site's ``components/edge/budget.py``, the
cloud's system node group's ``components/aws/system_budget.py``); each component states its own pods with the same
values its render applies (``gateway_demand``, ``redis_demand``, ``observability_demand``, ...). Tier-neutral: only
the arithmetic and the scheduler's rule (``components.kube.requests``) live here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from components.kube.requests import Requests, container_requests


@dataclass(frozen=True)
class Demand:
    """One workload's pods: what each asks and how many there are at most."""

    name: str
    per_pod: Requests
    pods: int
    node: str | None = None
    """The node the pods must run on (a model's pool); ``None``: anywhere the budget counts."""

    @property
    def total(self) -> Requests:
        return self.per_pod * self.pods


def demand(name: str, resources: dict[str, Any], pods: int = 1) -> Demand:
    """The pods of a one-container workload, from the ``resources`` block its render gives that container."""
    return Demand(name, container_requests({"resources": resources}), pods)


def surge_pods(strategy: dict[str, Any]) -> int:
    """Pods a rollout runs beyond ``replicas`` (what a node budget must hold besides the replicas)."""
    return int(strategy.get("rollingUpdate", {}).get("maxSurge", 0))


def total(demand: Iterable[Demand]) -> Requests:
    return sum((d.total for d in demand), Requests())


def shortfall(demand: list[Demand], capacity: Requests) -> list[str]:
    """The resources ``demand`` exceeds ``capacity`` by, in words; empty when it fits."""
    asked = total(demand)
    short = []
    if asked.cpu_m > capacity.cpu_m:
        short.append(f"{(asked.cpu_m - capacity.cpu_m) / 1000:g} CPU")
    if asked.memory > capacity.memory:
        short.append(f"{(asked.memory - capacity.memory) / 2**30:.1f} GiB")
    if asked.gpus > capacity.gpus:
        short.append(f"{asked.gpus - capacity.gpus} GPU")
    return short


def nodes_needed(demand: list[Demand], node: Requests) -> int:
    """How many nodes of ``node``'s capacity hold ``demand`` as one pool (CPU and memory; ``node`` offers both)."""
    asked = total(demand)
    return max(-(-asked.cpu_m // node.cpu_m), -(-asked.memory // node.memory))


def biggest(demand: list[Demand], n: int = 3) -> str:
    """The ``n`` largest consumers, by their share of CPU and memory requested."""
    asked = total(demand)

    def weight(d: Demand) -> float:
        t = d.total
        return t.cpu_m / max(asked.cpu_m, 1) + t.memory / max(asked.memory, 1) + t.gpus

    top = sorted(demand, key=weight, reverse=True)[:n]
    return ", ".join(f"{d.name} {d.pods}x ({d.per_pod.show()})" if d.pods > 1 else f"{d.name} ({d.per_pod.show()})"
                     for d in top)  # fmt: skip
