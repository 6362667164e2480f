"""LoadBalancerController: the AWS Load Balancer Controller, which turns annotated Services into NLBs.

Without it a ``Service`` of type ``LoadBalancer`` annotated ``aws-load-balancer-type: external`` never
gets a load balancer (the in-tree controller ignores ``external``). The controller runs on the system
nodes with its upstream IAM policy through EKS Pod Identity; since IMDS is closed to pods (hop limit 1),
it is told its region and VPC instead of discovering them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from components.aws.iam import PodIdentityRole, PodIdentityRoleArgs
from components.catalog.charts import CHARTS
from components.kube.budget import Demand, demand
from components.kube.helm import release
from components.kube.labels import SYSTEM_NODES
from components.specs import Args, StrInput

SERVICE_ACCOUNT = "aws-load-balancer-controller"
CONTROLLER_REPLICAS = 2
CONTROLLER_RESOURCES: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
POLICY_FILE = Path(__file__).parent / "policies" / "aws-load-balancer-controller-v2.14.1.json"
"""Upstream's policy, verbatim: kubernetes-sigs/aws-load-balancer-controller v2.14.1, docs/install/iam_policy.json
(Apache-2.0), the file the EKS user guide ("Install AWS Load Balancer Controller with Helm") downloads."""


def controller_demand() -> Demand:
    """The controller's pods on the system nodes, as the release below installs them."""
    return demand("aws-load-balancer-controller", CONTROLLER_RESOURCES, CONTROLLER_REPLICAS)


class LoadBalancerControllerArgs(Args):
    cluster_name: StrInput
    """Required: the controller's ``clusterName`` and its Pod Identity association are per cluster."""
    region: str
    """Required: the chart's ``region`` value, so the controller needs no instance metadata to find it."""
    vpc_id: StrInput
    """Required: the chart's ``vpcId`` value, so the controller needs no instance metadata to find it."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider."""
    tags: dict[str, str] = Field(default_factory=dict)


class LoadBalancerController(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: LoadBalancerControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_load_balancer_controller:LoadBalancerController", name, None, opts)
        pin = CHARTS["aws-load-balancer-controller"]
        role = PodIdentityRole(
            f"{name}-controller",
            PodIdentityRoleArgs(
                cluster_name=args.cluster_name,
                namespace=pin.namespace,
                service_account=SERVICE_ACCOUNT,
                policy_json=POLICY_FILE.read_text(),
                tags=args.tags,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release = release(
            "aws-load-balancer-controller",
            {
                "clusterName": args.cluster_name,
                "region": args.region,
                "vpcId": args.vpc_id,
                "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
                "replicaCount": CONTROLLER_REPLICAS,
                "nodeSelector": dict(SYSTEM_NODES),
                "resources": CONTROLLER_RESOURCES,
            },
            parent=self,
            component=name,
            provider=args.provider,
            depends_on=[role],
        )
        self.register_outputs({})
