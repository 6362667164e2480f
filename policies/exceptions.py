"""Every exception to the policy pack, each with its reason. Nothing is exempt that is not named here.

Three kinds:

- ``EXCEPTIONS``: (rule id, resource name pattern) → reason. The pattern is an ``fnmatch`` pattern
  over the Pulumi logical name of the resource the violation names (``llama-*``, ``gateway``). A
  matching violation is dropped, under ``pulumi preview`` and in ``inferstack plan`` alike.
- ``POD_SECURITY_ALLOWANCES``: what a pod may have beyond Pod Security "restricted" (and a read-only root
  filesystem), and why. Each is scoped as narrowly as the need: one capability, one host path, one container
  name, one image.
- ``ALLOWED_TAGS``: images that may be pinned by a tag instead of a digest, and why.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from components.catalog.images import (
    DIGEST_ALLOWLIST,
    KIT_IMAGE_TAG,
    LLAMACPP_CPU,
    LLAMACPP_CUDA,
    TRITON_TRTLLM,
    TRTLLM_BUILD,
    VLLM,
)

EXCEPTIONS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        # (rule id, resource name pattern): reason. Example:
        # ("k8s-automount-token-off", "karpenter"): "the controller watches the API server",
    }
)


@dataclass(frozen=True)
class PodSecurityAllowance:
    """One named step beyond Pod Security "restricted"."""

    name: str
    reason: str
    workloads: str = "*"
    """fnmatch over the workload's logical name."""
    containers: str = "*"
    """fnmatch over the container's name."""
    capabilities: frozenset[str] = frozenset()
    """Capabilities it may add."""
    run_as_root: bool = False
    host_paths: tuple[str, ...] = ()
    """Host paths it may mount (exact paths or fnmatch patterns)."""
    privileged: bool = False
    host_network: bool = False
    requires_resource: str | None = None
    """Only when the container requests this extended resource (prefix), e.g. ``rdma/``."""
    images: tuple[str, ...] = ()
    """Only for these images, exact references from ``components/catalog/images.py``; empty: any image."""
    writable_root: bool = False
    """May write to its root filesystem (``readOnlyRootFilesystem`` not true)."""


MODEL_CACHE_PATH = "/mnt/k8s-disks/0/inferstack/models"
"""The node-local NVMe RAID0 model cache (README, "How a model reaches a GPU")."""

POD_SECURITY_ALLOWANCES: tuple[PodSecurityAllowance, ...] = (
    PodSecurityAllowance(
        name="model-cache-hostpath",
        reason="weights are staged on the node's NVMe RAID0 once and shared by every server on the node; "
        "a hostPath is the only volume that outlives the pod",
        host_paths=(MODEL_CACHE_PATH, MODEL_CACHE_PATH + "/*", "/opt/inferstack/models", "/var/lib/inferstack/models"),
    ),
    PodSecurityAllowance(
        name="model-cache-chown",
        reason="kubelet creates a DirectoryOrCreate hostPath owned by root; one init container chowns it "
        "to the non-root loader and adds only CHOWN",
        containers="cache-owner",
        capabilities=frozenset({"CHOWN"}),
        run_as_root=True,
    ),
    PodSecurityAllowance(
        name="rdma-ipc-lock",
        reason="RDMA pins memory for zero-copy transfers; the NVIDIA Network Operator documents IPC_LOCK "
        "for pods that request rdma/ devices",
        capabilities=frozenset({"IPC_LOCK"}),
        requires_resource="rdma/",
    ),
    PodSecurityAllowance(
        name="efa-ipc-lock",
        reason="EFA (libfabric) registers pinned memory as RDMA does; only for pods that request the device",
        capabilities=frozenset({"IPC_LOCK"}),
        requires_resource="vpc.amazonaws.com/efa",
    ),
    PodSecurityAllowance(
        name="engine-writable-root",
        reason="the serving engines keep their caches under HOME, which the kit sets to /tmp on the container's "
        "root filesystem: vLLM its torch.compile and kernel caches (~/.cache/vllm), CUDA its JIT cache "
        "(~/.nv); none of the pinned images has been run read-only with those paths as volumes, so the kit "
        "does not claim it can be",
        containers="server",
        images=(VLLM, TRITON_TRTLLM, LLAMACPP_CPU, LLAMACPP_CUDA),
        writable_root=True,
    ),
    PodSecurityAllowance(
        name="engine-build-writable-root",
        reason="the TensorRT-LLM build's quantize.py loads its calibration dataset through the Hugging Face cache "
        "under HOME (/tmp, on the root filesystem) and both steps write temporary files there; not run "
        "read-only with the pinned image",
        containers="trtllm-build",
        images=(TRTLLM_BUILD,),
        writable_root=True,
    ),
)


KIT_TAG_REASON = (
    "the kit's own image at its release tag in the stack's registry; make that repository tag-immutable "
    "(Harbor and most registries have a rule for it: README, on-prem quick start)"
)

ALLOWED_TAGS: Mapping[str, str] = MappingProxyType(
    {
        # The kit's one list of third-party images still on a tag, each with its reason
        # (components/catalog/images.py DIGEST_ALLOWLIST): one source, read here.
        **{image: reason for image, reason in DIGEST_ALLOWLIST.items()},
        # Off AWS the kit's images come from the stack's own registry (config imageRegistry) at the kit's tag.
        f"*/gateway:{KIT_IMAGE_TAG}": KIT_TAG_REASON,
        f"*/model-loader:{KIT_IMAGE_TAG}": KIT_TAG_REASON,
        # fnmatch over "repository:tag" → reason. Digests are the rule; a tag needs a reason.
        "*.dkr.ecr.*.amazonaws.com/inferstack-*/*:*": "the kit's own images (gateway, model-loader) live in the "
        "stack's ECR repositories, which are IMMUTABLE (rule ecr-immutable-scanned): the tag cannot move",
    }
)


def excepted(rule: str, resource_name: str) -> str | None:
    """The reason ``rule`` does not apply to ``resource_name``, or ``None``."""
    for (r, pattern), reason in EXCEPTIONS.items():
        if r == rule and fnmatch.fnmatchcase(resource_name, pattern):
            return reason
    return None


def tag_allowed(image: str) -> str | None:
    for pattern, reason in ALLOWED_TAGS.items():
        if fnmatch.fnmatchcase(image, pattern):
            return reason
    return None
