"""A cloud managed GPU node group keeps its desiredSize: the kit runs no cluster autoscaler on it. Replicas, KEDA's
ceilings and rollouts must fit the GPUs it has, as on the on-prem tier's fixed servers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from helpers import config_errors, plan_with, raw_environment
from stacks.cloud_checks import managed_pools_fit, rollout_surges
from stacks.environment import CloudEnvironment, load_environment


def managed_h100(env: dict[str, Any], *, desired: int = 1, max_size: int = 2) -> None:
    """prod's h100 pool (p5.48xlarge, 8 GPUs a node) as a managed node group of ``desired`` nodes."""
    env["gpuPools"][0].update(provisioner="managed", minSize=1, desiredSize=desired, maxSize=max_size)


def llama_8b(env: dict[str, Any]) -> dict[str, Any]:
    model = env["models"][0]
    assert model["name"] == "llama-8b" and model["pool"] == "h100"  # 1 GPU a replica (TP1 on an H100)
    return model


def cloud_env(edit: Any) -> CloudEnvironment:
    raw = copy.deepcopy(raw_environment("prod"))
    edit(raw)
    env = load_environment(raw, "stacks/Pulumi.prod.yaml")
    assert isinstance(env, CloudEnvironment)
    return env


def test_more_replicas_than_a_managed_group_holds_are_refused() -> None:
    # GIVEN one p5.48xlarge node (8 GPUs) in a managed group, and 9 one-GPU replicas on it
    def edit(env: dict[str, Any]) -> None:
        managed_h100(env)
        llama_8b(env).update(replicas=9, autoscaling={"maxReplicas": 9})

    # WHEN / THEN the plan refuses it, with the numbers and the ways out: nothing grows a managed group
    (line,) = config_errors(edit)
    assert "models[0].replicas: got 9 GPUs of replicas on pool 'h100' (llama-8b 9); it has 8 (1 x 8): 1 short" in line
    assert "a managed node group keeps desiredSize nodes (the kit runs no cluster autoscaler)" in line
    fix = "fix: lower replicas, or raise gpuPools[0].desiredSize, or set provisioner: karpenter with minSize 0 and no"
    assert fix + " desiredSize" in line


def test_an_autoscaling_ceiling_beyond_a_managed_group_is_refused() -> None:
    # GIVEN 2 replicas that KEDA may take to 12 on a managed group of one 8-GPU node, already at its maxSize
    def edit(env: dict[str, Any]) -> None:
        managed_h100(env, desired=1, max_size=1)
        llama_8b(env).update(autoscaling={"maxReplicas": 12})

    (line,) = config_errors(edit)
    # THEN the ceiling is refused with what fits, and the fix raises both sizes (desiredSize may not pass maxSize)
    assert "models[0].autoscaling.maxReplicas: got 12 x 1 GPUs = 12 GPUs on pool 'h100' of 8 GPUs" in line
    assert "allowed: at most 8 replicas: a managed node group keeps desiredSize nodes" in line
    fix = "fix: lower maxReplicas to 8 or raise gpuPools[0].desiredSize and maxSize, or set provisioner: karpenter"
    assert fix + " with minSize 0 and no desiredSize" in line


def test_the_default_ceiling_counts_against_a_managed_group() -> None:
    # GIVEN 3 replicas with no maxReplicas: KEDA's default ceiling is 4 x 3 = 12, on 8 GPUs
    def edit(env: dict[str, Any]) -> None:
        managed_h100(env)
        llama_8b(env).update(replicas=3)

    (line,) = config_errors(edit)
    assert "maxReplicas: got 12 (the default, 4 x replicas, at least 2) x 1 GPUs = 12 GPUs on pool 'h100'" in line


def test_a_managed_group_that_holds_every_ceiling_is_accepted_and_a_karpenter_pool_is_not_held_to_its_nodes() -> None:
    # GIVEN exactly 8 one-GPU replicas at the ceiling on one 8-GPU managed node THEN it loads, with nothing to refuse
    fits = cloud_env(lambda e: (managed_h100(e), llama_8b(e).update(replicas=2, autoscaling={"maxReplicas": 8})))
    assert fits.gpu_pools[0].provisioner == "managed" and managed_pools_fit(fits) == []
    # AND one replica more is refused (the boundary is the pool's 8 GPUs)
    over = fits.model_copy(update={"models": [fits.models[0].model_copy(update={"replicas": 9}), *fits.models[1:]]})
    assert [i.path for i in managed_pools_fit(over)] == ["inferstack:environment.models[0].replicas"]
    # AND the same ceiling far past a Karpenter pool's minSize (it launches nodes for pending pods) is not its to check
    karpenter = cloud_env(lambda e: llama_8b(e).update(autoscaling={"maxReplicas": 30}))
    assert karpenter.gpu_pools[0].provisioner == "karpenter" and managed_pools_fit(karpenter) == []


def test_a_rollout_surges_on_a_managed_group_only_into_a_spare_gpu() -> None:
    # GIVEN the 8B model on one 8-GPU managed node
    def at(ceiling: int) -> bool:
        env = cloud_env(lambda e: (managed_h100(e), llama_8b(e).update(autoscaling={"maxReplicas": ceiling})))
        return rollout_surges(env)[env.models[0].name]

    # WHEN KEDA's ceiling leaves a GPU free THEN the new pod may come up first; at 8 it would wait for ever
    assert at(7) is True
    assert at(8) is False
    # AND on a Karpenter pool it always may (Karpenter launches the node)
    env = cloud_env(lambda e: None)
    assert rollout_surges(env)[env.models[0].name] is True


def test_a_full_managed_group_rolls_one_pod_at_a_time(tmp_path: Path) -> None:
    # GIVEN the 8B model at a ceiling of 8 on one 8-GPU managed node WHEN planned
    plan = plan_with(tmp_path, "prod", lambda e: (managed_h100(e), llama_8b(e).update(autoscaling={"maxReplicas": 8})))
    (deployment,) = [
        r.inputs
        for r in plan.resources
        if r.type == "kubernetes:apps/v1:Deployment" and r.inputs["metadata"]["name"] == "llama-8b"
    ]
    # THEN its rollout removes a pod before it adds one: a surge pod would stay Pending on the full group
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
