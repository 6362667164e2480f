"""A pod's effective request, as the scheduler counts it: what the node budget adds up."""

from __future__ import annotations

from components.kube.requests import Requests, pod_requests


def container(cpu: str, memory: str, gpus: int = 0) -> dict[str, object]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    return {"resources": {"requests": {"cpu": cpu, "memory": memory, **limits}, "limits": limits}}


def test_app_containers_add_up_and_the_largest_init_container_sets_a_floor() -> None:
    pod = {
        "initContainers": [container("2", "2Gi"), container("10m", "16Mi")],
        "containers": [container("500m", "1Gi", gpus=1), container("250m", "512Mi")],
    }
    assert pod_requests(pod) == Requests(cpu_m=2000, memory=2 * 2**30, gpus=1)


def test_limits_stand_in_for_missing_requests() -> None:
    pod = {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1G"}}}]}
    assert pod_requests(pod) == Requests(cpu_m=1000, memory=10**9)
