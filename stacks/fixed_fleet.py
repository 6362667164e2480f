"""Pools whose size nothing changes while the stack runs: an on-prem tier's servers and a cloud managed node group (no
cluster autoscaler runs on it). Every model's replicas, and the most its autoscaler may ask for, must fit the GPUs
such a pool has; a pod past them stays Pending for good."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from components.specs import ModelDeploySpec
from stacks.environment import CONFIG_KEY, ConfigIssue


@dataclass(frozen=True)
class FixedPool:
    """A pool of fixed size, and the words its refusals use."""

    gpus: int
    """Every GPU the pool has."""
    shape: str
    """How the pool is counted, for the message: e.g. ``4 x 8`` (servers x GPUs each)."""
    why: str
    """Why it cannot grow, e.g. ``the on-prem fleet is fixed``."""
    grow: str
    """The fix that adds GPUs, e.g. ``add servers (gpuPools[].nodes)``."""


@dataclass(frozen=True)
class Claim:
    """One model on a fixed pool: its index in ``models[]`` and the GPUs one replica (or group) holds."""

    index: int
    model: ModelDeploySpec
    gpus: int


def fixed_pool_issues(pools: dict[str, FixedPool], claims: list[Claim]) -> list[ConfigIssue]:
    """The replicas every model asks for, in GPUs, within its pool; then each autoscaled model's ceiling within the
    pool less what the pool's other models always hold (a pool whose replicas alone overflow is reported once)."""
    on_pool: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        on_pool[claim.model.pool].append(claim)
    issues: list[ConfigIssue] = []
    for name, placed in on_pool.items():
        pool = pools[name]
        total = sum(c.gpus * c.model.replicas for c in placed)
        if total > pool.gpus:
            parts = ", ".join(f"{c.model.name} {c.gpus * c.model.replicas}" for c in placed)
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.models[{placed[0].index}].replicas",
                    f"{total} GPUs of replicas on pool {name!r} ({parts}); it has {pool.gpus} ({pool.shape}): "
                    f"{total - pool.gpus} short",
                    f"at most {pool.gpus} GPUs of replicas: {pool.why}",
                    f"lower replicas, or {pool.grow}",
                )
            )
            continue
        issues += _ceilings_fit(name, pool, placed)
    return issues


def _floor(claim: Claim) -> int:
    """What the model always holds on its pool: KEDA's floor (0 with scaleToZero), or its fixed size."""
    scaling = claim.model.autoscaling
    return 0 if scaling.enabled and scaling.scale_to_zero else claim.gpus * claim.model.replicas


def _ceilings_fit(name: str, pool: FixedPool, placed: list[Claim]) -> list[ConfigIssue]:
    """KEDA's ceiling of each autoscaled model, written or the default, within the pool less what the pool's other
    models always hold: replicas past it stay Pending, and a multi-node group (a higher PriorityClass) that reached
    them would evict another model's warm replicas."""
    issues: list[ConfigIssue] = []
    for claim in placed:
        model, gpus = claim.model, claim.gpus
        if not model.autoscaling.enabled:
            continue
        held = [(c.model.name, _floor(c)) for c in placed if c is not claim and _floor(c)]
        room = pool.gpus - sum(g for _, g in held)
        ceiling = model.replica_ceiling
        if ceiling * gpus <= room:
            continue
        written = model.autoscaling.max_replicas is not None
        fit = room // gpus
        shown = ", ".join(f"{n} {g}" for n, g in held)
        *rest, last = [
            *([f"{'lower' if written else 'set'} maxReplicas to {fit}"] if fit else []),
            *(["lower the other models' replicas on the pool"] if held else []),
            pool.grow,
        ]
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.models[{claim.index}].autoscaling.maxReplicas",
                f"{ceiling}{'' if written else ' (the default, 4 x replicas, at least 2)'} x {gpus} GPUs = "
                f"{ceiling * gpus} GPUs on pool {name!r} of {pool.gpus} GPUs"
                + (f", {pool.gpus - room} of them always held by the other models' replicas ({shown})" if held else ""),
                f"at most {fit} replicas: {pool.why}",
                f"{', '.join(rest)} or {last}" if rest else last,
            )
        )
    return issues


def pool_peak_gpus(claims: list[Claim], pool: str) -> int:
    """The most GPUs the models on ``pool`` hold at once: each at its ceiling (``replica_ceiling``)."""
    return sum(c.gpus * c.model.replica_ceiling for c in claims if c.model.pool == pool)
