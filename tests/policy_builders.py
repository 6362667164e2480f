"""Small synthetic plans for the policy pack's tests, in the plan JSON's wire format.

Every builder returns a *conforming* object by default (non-root, digest-pinned, requests set, …);
a test changes the one field its rule is about. ``fixed_cloud_plan`` is a minimal cloud stack whose
wiring is right (the shape issue 12 fixes): the defect tests break one link of it at a time.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from policies.rules import check_plan

DIGEST = "@sha256:" + "a" * 64
VLLM = "vllm/vllm-openai:v0.11.0"
ACCOUNT = "123456789012"
BUCKET = "models-abc1234"


def res(type_: str, name: str, inputs: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return {
        "urn": f"urn:pulumi:test::inferstack::{type_}::{name}",
        "type": type_,
        "name": name,
        "parent": parent,
        "inputs": inputs,
    }


def k8s(
    token: str, kind: str, name: str, spec: dict[str, Any] | None = None, ns: str | None = "apps", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **extra.pop("meta", {})}
    if ns is not None:
        meta["namespace"] = ns
    body: dict[str, Any] = {"kind": kind, "metadata": meta, **extra}
    if spec is not None:
        body["spec"] = spec
    return res(f"kubernetes:{token}:{kind}", name, body)


def container(name: str = "app", image: str = "example.com/app:1.0" + DIGEST, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": image,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    c.update(extra)
    return c


def pod_spec(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": list(containers) or [container()],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
    }
    if init:
        spec["initContainers"] = init
    spec.update(extra)
    return spec


def deployment(
    name: str = "app",
    spec: dict[str, Any] | None = None,
    ns: str = "apps",
    replicas: int = 1,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return k8s(
        "apps/v1",
        "Deployment",
        name,
        {
            "replicas": replicas,
            "selector": {"matchLabels": labels or {"app": name}},
            "template": {"metadata": {"labels": labels or {"app": name}}, "spec": spec or pod_spec()},
        },
        ns=ns,
    )


def job(name: str, spec: dict[str, Any], ns: str = "apps") -> dict[str, Any]:
    return k8s("batch/v1", "Job", name, {"template": {"metadata": {"labels": {"job": name}}, "spec": spec}}, ns=ns)


def release(
    name: str, chart: str | None = None, values: dict[str, Any] | None = None, version: str | None = "1.2.3"
) -> dict[str, Any]:
    inputs: dict[str, Any] = {"name": name, "chart": chart or name, "values": values or {}}
    if version is not None:
        inputs["version"] = version
    return res("kubernetes:helm.sh/v3:Release", name, inputs)


def service(
    name: str = "web", type_: str = "ClusterIP", annotations: dict[str, str] | None = None, ns: str = "apps"
) -> dict[str, Any]:
    return k8s(
        "core/v1",
        "Service",
        name,
        {"type": type_, "ports": [{"port": 80}]},
        ns=ns,
        meta={"annotations": annotations or {}},
    )


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
GPU_DAEMON_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "inferstack.io/gpu-count", "operator": "Exists"}]}]
        }
    }
}
INTERNAL_LB = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "external",
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
}


def role(name: str, statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Pod Identity role named like Pulumi's auto-naming, with its inline policy."""
    trust = {
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole"]}
        ]
    }
    return [
        res("aws:iam/role:Role", name, {"assumeRolePolicy": json.dumps(trust)}),
        res(
            "aws:iam/rolePolicy:RolePolicy",
            name,
            {"role": f"{name}-1a2b3c4d", "policy": json.dumps({"Statement": statements})},
        ),
    ]


def association(sa: str, role_name: str, ns: str = "serving") -> dict[str, Any]:
    return res(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        sa,
        {"namespace": ns, "serviceAccount": sa, "roleArn": f"arn:aws:iam::{ACCOUNT}:role/{role_name}-1a2b3c4"},
    )


def gpu_node_pool(labels: dict[str, str] | None = None, gpus_limit: int = 16) -> dict[str, Any]:
    return k8s(
        "karpenter.sh/v1",
        "NodePool",
        "gpu",
        {
            "template": {
                "metadata": {
                    "labels": labels
                    if labels is not None
                    else {"inferstack.io/pool": "gpu", "inferstack.io/gpu-count": "8"}
                },
                "spec": {
                    "taints": [GPU_TAINT],
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                },
            },
            "limits": {"nvidia.com/gpu": gpus_limit},
        },
        ns=None,
    )


def system_node_group() -> dict[str, Any]:
    return res(
        "aws:eks/nodeGroup:NodeGroup",
        "system",
        {
            "instanceTypes": ["m7i.xlarge"],
            "labels": {"inferstack.io/pool": "system"},
            "scalingConfig": {"maxSize": 3},
            "launchTemplate": {"id": "lt-0123456789abcdef0", "version": "1"},
        },
    )


def server(args: list[str] | None = None, gpus: int = 1) -> dict[str, Any]:
    return container(
        "server",
        VLLM + DIGEST,
        command=["vllm", "serve", "/models/llama", *(args or ["--tensor-parallel-size", "1", "--max-num-seqs", "64"])],
        resources={
            "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        },
    )


def fetch_model(source: str = f"s3://{BUCKET}/llama/hf") -> dict[str, Any]:
    return container("fetch-model", args=["--source", source, "--dest", "/models/llama"])


def serving_deployment(args: list[str] | None = None, replicas: int = 2) -> dict[str, Any]:
    return deployment(
        "llama",
        pod_spec(
            server(args),
            init=[fetch_model()],
            serviceAccountName="model-loader",
            nodeSelector={"inferstack.io/pool": "gpu"},
            tolerations=[GPU_TOLERATION],
        ),
        ns="serving",
        replicas=replicas,
        labels={"inferstack.io/model": "llama"},
    )


def engine_build_job(service_account: str = "engine-builder") -> dict[str, Any]:
    publish = container(
        "publish-engine", args=["--upload", "--source", f"s3://{BUCKET}/engines/llama", "--dest", "/models/engine"]
    )
    return job(
        "llama-engine-build",
        pod_spec(publish, serviceAccountName=service_account, nodeSelector={"inferstack.io/pool": "system"}),
        ns="serving",
    )


def fixed_cloud_plan() -> list[dict[str, Any]]:
    """A minimal cloud stack with every link of the review wired right."""
    read = [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"arn:aws:s3:::{BUCKET}/*"]}]
    write = [{"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": [f"arn:aws:s3:::{BUCKET}/engines/*"]}]
    return [
        res(
            "aws:eks/cluster:Cluster",
            "cluster",
            {
                "name": "test",
                "vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": False},
                "encryptionConfig": {"resources": ["secrets"], "provider": {"keyArn": "arn:aws:kms:k"}},
            },
        ),
        res(
            "aws:eks/addon:Addon",
            "vpc-cni",
            {"addonName": "vpc-cni", "configurationValues": json.dumps({"enableNetworkPolicy": "true"})},
        ),
        res("aws:eks/addon:Addon", "aws-ebs-csi-driver", {"addonName": "aws-ebs-csi-driver"}),
        k8s(
            "storage.k8s.io/v1",
            "StorageClass",
            "gp3",
            ns=None,
            provisioner="ebs.csi.aws.com",
            parameters={"type": "gp3", "encrypted": "true"},
            meta={"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        ),
        release("aws-load-balancer-controller", values={"nodeSelector": {"inferstack.io/pool": "system"}}),
        system_node_group(),
        gpu_node_pool(),
        release(
            "nvidia-device-plugin",
            values={
                "affinity": GPU_DAEMON_AFFINITY,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        ),
        k8s("core/v1", "ServiceAccount", "model-loader", ns="serving"),
        k8s("core/v1", "ServiceAccount", "engine-builder", ns="serving"),
        *role("model-loader", read),
        *role("engine-builder", read + write),
        association("model-loader", "model-loader"),
        association("engine-builder", "engine-builder"),
        serving_deployment(),
        engine_build_job(),
        service("gateway", "LoadBalancer", INTERNAL_LB),
        k8s(
            "apps/v1",
            "StatefulSet",
            "cache",
            {
                "replicas": 1,
                "template": {"spec": pod_spec(nodeSelector={"inferstack.io/pool": "system"})},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}
                ],
            },
        ),
        k8s(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "llama",
            {"podSelector": {"matchLabels": {"inferstack.io/model": "llama"}}},
            ns="serving",
        ),
    ]


def edit(plan: list[dict[str, Any]], name: str, type_suffix: str = "") -> dict[str, Any]:
    """The one resource of ``plan`` with this logical name (and type ending), for a test to change."""
    (found,) = [r for r in plan if r["name"] == name and r["type"].endswith(type_suffix)]
    return found


def without(plan: list[dict[str, Any]], name: str, type_suffix: str = "") -> list[dict[str, Any]]:
    target = edit(plan, name, type_suffix)
    return [r for r in plan if r is not target]


ROOT_STACK = "pulumi:pulumi:Stack"


def stack_outputs(**outputs: Any) -> dict[str, Any]:
    """A plan's outputs (secret ones ``[secret]``), carried in a synthetic plan as its root stack resource."""
    return res(ROOT_STACK, "inferstack-test", outputs)


def violations(plan: list[dict[str, Any]], rule: str, tier: str | None = None) -> list[dict[str, Any]]:
    outputs = next((r["inputs"] for r in plan if r["type"] == ROOT_STACK), None)
    return [v for v in check_plan(copy.deepcopy(plan), tier, outputs=outputs) if v["policy"] == rule]
