"""ServingBase: the namespaces, priority class and service account the serving tier shares."""

from __future__ import annotations

from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components.kube.labels import CLUSTER_LOAD_BALANCER_ANNOTATION, CLUSTER_STORAGE_CLASSES_ANNOTATION, TIER_LABEL
from components.kube.objects import per_instance
from components.specs import Args, StrInput

SERVING_NAMESPACE = "inferstack-serving"
GATEWAY_NAMESPACE = "inferstack-gateway"
CACHE_NAMESPACE = "inferstack-cache"
MONITORING_NAMESPACE = "monitoring"
PRIORITY_CLASS = "inferstack-serving"
GROUP_PRIORITY_CLASS = "inferstack-serving-group"
"""Multi-node groups, one step above PRIORITY_CLASS: a group needs whole nodes, and single-GPU replicas spread one
per node would otherwise leave no node free for it for good (the scheduler never preempts equal priority)."""
RESTRICTED = (GATEWAY_NAMESPACE, CACHE_NAMESPACE)
"""Namespaces whose pods all meet the "restricted" Pod Security level. Serving pods mount the node's
NVMe cache (hostPath); monitoring runs node exporters with host access: both stay "privileged"."""
MODEL_LOADER_SERVICE_ACCOUNT = "model-loader"
ENGINE_BUILDER_SERVICE_ACCOUNT = "engine-builder"
"""The TensorRT-LLM engine-build Job's account: the only one allowed to write engines to the store."""


class ServingBaseArgs(Args):
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider."""
    tier: Literal["cloud", "onprem", "edge"]
    """Required: the stack's tier, labelled on every namespace (``inferstack.io/tier``) for the policy pack."""
    cluster_storage_classes: tuple[str, ...] = ()
    """StorageClasses the existing cluster has that the kit uses but does not create, annotated on every namespace."""
    cluster_load_balancer: str | None = None
    """The existing cluster's own load balancer, annotated on every namespace: the ``spec.loadBalancerClass`` it
    serves (``""``: Services without one); ``None``: the cluster has none the kit relies on."""
    loader_role_arn: StrInput | None = None
    """IRSA role for the loader's service account. Not needed with EKS Pod Identity (the association binds it)."""


class ServingBase(pulumi.ComponentResource):
    serving_namespace: str
    gateway_namespace: str
    cache_namespace: str
    priority_class: str
    group_priority_class: str
    service_account: str

    def __init__(self, name: str, args: ServingBaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving_base:ServingBase", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespaces = {}
        # What the existing cluster has that the kit relies on, for the policy pack under `pulumi preview`.
        declared = (
            {CLUSTER_STORAGE_CLASSES_ANNOTATION: ",".join(args.cluster_storage_classes)}
            if args.cluster_storage_classes
            else {}
        )
        if args.cluster_load_balancer is not None:
            declared[CLUSTER_LOAD_BALANCER_ANNOTATION] = args.cluster_load_balancer
        for ns in (SERVING_NAMESPACE, GATEWAY_NAMESPACE, CACHE_NAMESPACE, MONITORING_NAMESPACE):
            # Every logical name starts with this instance's: one ServingBase per cluster, two clusters in a program.
            ns_name, ns_opts = per_instance(name, ns, k8s_opts)
            namespaces[ns] = k8s.core.v1.Namespace(
                ns_name,
                metadata={
                    "name": ns,
                    # Pod Security Admission (see RESTRICTED); elsewhere "baseline" still warns and audits.
                    "labels": {
                        "pod-security.kubernetes.io/enforce": "restricted" if ns in RESTRICTED else "privileged",
                        **(
                            {
                                "pod-security.kubernetes.io/warn": "baseline",
                                "pod-security.kubernetes.io/audit": "baseline",
                            }
                            if ns == SERVING_NAMESPACE
                            else {}
                        ),
                        "app.kubernetes.io/part-of": "inferstack",
                        TIER_LABEL: args.tier,
                    },
                    **({"annotations": dict(declared)} if declared else {}),
                },
                opts=ns_opts,
            )
        for priority_class, value, description in (
            # Above default workloads: a serving replica preempts batch work, never the reverse.
            (PRIORITY_CLASS, 1_000_000, "LLM inference servers: latency-critical"),
            # Above the single-node replicas: a group's pod preempts the fewest of them on one node, and they come
            # back on the free GPUs elsewhere (the plan checks that the pool holds every replica).
            (
                GROUP_PRIORITY_CLASS,
                1_000_100,
                "LLM inference groups spanning nodes: take whole nodes from single-node replicas",
            ),
        ):
            pc_name, pc_opts = per_instance(name, priority_class, k8s_opts)
            k8s.scheduling.v1.PriorityClass(
                pc_name,
                metadata={"name": priority_class},
                value=value,
                global_default=False,
                preemption_policy="PreemptLowerPriority",
                description=description,
                opts=pc_opts,
            )
        annotations = {"eks.amazonaws.com/role-arn": args.loader_role_arn} if args.loader_role_arn else {}
        for account in (MODEL_LOADER_SERVICE_ACCOUNT, ENGINE_BUILDER_SERVICE_ACCOUNT):
            account_name, account_opts = per_instance(
                name,
                account,
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespaces[SERVING_NAMESPACE]]),
            )
            k8s.core.v1.ServiceAccount(
                account_name,
                metadata={
                    "name": account,
                    "namespace": SERVING_NAMESPACE,
                    "annotations": annotations if account == MODEL_LOADER_SERVICE_ACCOUNT else {},
                },
                # EKS Pod Identity injects its own projected token; nothing in these pods talks to the
                # Kubernetes API, so the API token stays unmounted.
                automount_service_account_token=False,
                opts=account_opts,
            )
        self.serving_namespace = SERVING_NAMESPACE
        self.gateway_namespace = GATEWAY_NAMESPACE
        self.cache_namespace = CACHE_NAMESPACE
        self.monitoring_namespace = MONITORING_NAMESPACE
        self.priority_class = PRIORITY_CLASS
        self.group_priority_class = GROUP_PRIORITY_CLASS
        self.service_account = MODEL_LOADER_SERVICE_ACCOUNT
        self.build_service_account = ENGINE_BUILDER_SERVICE_ACCOUNT
        self.namespaces = namespaces
        self.register_outputs(
            {
                "serving_namespace": self.serving_namespace,
                "gateway_namespace": self.gateway_namespace,
                "cache_namespace": self.cache_namespace,
                "monitoring_namespace": self.monitoring_namespace,
                "priority_class": self.priority_class,
                "group_priority_class": self.group_priority_class,
                "service_account": self.service_account,
                "build_service_account": self.build_service_account,
            }
        )
