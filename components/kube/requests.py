"""What a pod asks the scheduler for, read from its rendered spec (Kubernetes' own rule, not a guess table).

A pod's effective request per resource is the larger of its biggest init container and the sum of its app
containers (kubernetes.io/docs/concepts/workloads/pods/init-containers, "Resource sharing within containers");
a container without requests but with limits requests its limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def cpu_millis(quantity: Any) -> int:
    text = str(quantity)
    if text.endswith("m"):
        return int(float(text[:-1]))
    return round(float(text) * 1000)


def memory_bytes(quantity: Any) -> int:
    text = str(quantity)
    for suffix, factor in {**_BINARY, **_DECIMAL}.items():
        if text.endswith(suffix):
            return round(float(text[: -len(suffix)]) * factor)
    return round(float(text))


@dataclass(frozen=True)
class Requests:
    cpu_m: int = 0
    memory: int = 0
    """Bytes."""
    gpus: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu_m + other.cpu_m, self.memory + other.memory, self.gpus + other.gpus)

    def __mul__(self, n: int) -> Requests:
        return Requests(self.cpu_m * n, self.memory * n, self.gpus * n)

    def max(self, other: Requests) -> Requests:
        return Requests(max(self.cpu_m, other.cpu_m), max(self.memory, other.memory), max(self.gpus, other.gpus))

    def show(self) -> str:
        gpus = f", {self.gpus} GPU" if self.gpus else ""
        return f"{self.cpu_m / 1000:g} CPU, {self.memory / 2**30:.1f} GiB{gpus}"


def container_requests(container: dict[str, Any]) -> Requests:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return Requests(
        cpu_millis(asked["cpu"]) if "cpu" in asked else 0,
        memory_bytes(asked["memory"]) if "memory" in asked else 0,
        int(asked.get("nvidia.com/gpu", 0)),
    )


def pod_requests(pod: dict[str, Any]) -> Requests:
    """The effective request of a rendered pod spec."""
    app = Requests()
    for container in pod.get("containers") or []:
        app = app + container_requests(container)
    init = Requests()
    for container in pod.get("initContainers") or []:
        init = init.max(container_requests(container))
    return app.max(init)
