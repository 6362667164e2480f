"""MetalLB in L2 mode: gives the gateway's ``LoadBalancer`` Service an address on the servers' segment.

``IPAddressPool`` lists the addresses, and an ``L2Advertisement`` that names the pool announces them with ARP
(metallb.io/v1beta1; MetalLB configsamples/simple_pool_adv_l2.yaml). Both live in MetalLB's namespace.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from components.catalog.charts import CHARTS
from components.kube.helm import release
from components.kube.objects import MANAGED_BY, custom_resource
from components.onprem._values import metallb_values
from components.onprem.specs import MetalLbSpec
from components.specs import Args

POOL = "inferstack"


def address_pool(spec: MetalLbSpec) -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": POOL, "namespace": CHARTS["metallb"].namespace, "labels": dict(MANAGED_BY)},
        # Only Services that ask for this pool get its addresses: a stray LoadBalancer can't take the gateway's.
        "spec": {"addresses": list(spec.addresses), "autoAssign": False},
    }


def l2_advertisement() -> dict[str, Any]:
    return {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "L2Advertisement",
        "metadata": {"name": POOL, "namespace": CHARTS["metallb"].namespace, "labels": dict(MANAGED_BY)},
        "spec": {"ipAddressPools": [POOL]},
    }


SERVICE_POOL_ANNOTATION = "metallb.io/address-pool"
"""Service annotation that picks the pool (MetalLB docs, "Usage": requesting specific IPs / pools)."""


class MetalLbArgs(Args):
    spec: MetalLbSpec
    """Required: the address pool is the site's own (``addresses``); no default fits a network."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    system_node_selector: dict[str, str] = Field(default_factory=dict)
    """Labels of the nodes the controller runs on (``cluster.systemNodeSelector``); speakers run on every node."""


class MetalLb(pulumi.ComponentResource):
    service_annotations: dict[str, str]
    """What a Service sets to take an address from the kit's pool."""

    def __init__(self, name: str, args: MetalLbArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:metallb:MetalLb", name, None, opts)
        chart = release(
            "metallb", metallb_values(args.system_node_selector), parent=self, component=name, provider=args.provider
        )
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[chart])
        pool = custom_resource(f"{name}-pool", address_pool(args.spec), after)
        custom_resource(
            f"{name}-l2",
            l2_advertisement(),
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[pool]),
        )
        self.service_annotations = {SERVICE_POOL_ANNOTATION: POOL}
        self.register_outputs({})
