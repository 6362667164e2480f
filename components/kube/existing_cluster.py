"""ExistingCluster: the one explicit Kubernetes provider for a cluster the kit does not create.

On-prem and edge stacks reach their cluster only through this provider, built from a kubeconfig that is a
Pulumi secret. Nothing falls back to ``~/.kube/config`` or ``KUBECONFIG``: a provider with no kubeconfig
would silently use the ambient one, so the kubeconfig is required.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
from pydantic import field_validator

from components.specs import Args, StrInput, config_error

EMPTY_KUBECONFIG = (
    "an empty kubeconfig: a Kubernetes provider given one uses the ambient ~/.kube/config (KUBECONFIG) instead"
)


class ExistingClusterArgs(Args):
    kubeconfig: StrInput
    """Required: the kubeconfig's contents (a secret Output), never a path on the deployer's machine. An empty one is
    refused: pulumi-kubernetes reads it as unset and falls back to the ambient kubeconfig."""
    context: str | None = None
    """Context inside the kubeconfig; ``None`` uses its ``current-context``."""

    @field_validator("kubeconfig")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise config_error(EMPTY_KUBECONFIG, allowed="the kubeconfig's contents", fix="pass the file's text")
        return value


def _not_empty(kubeconfig: str) -> str:
    """The kubeconfig as it resolves; an empty one stops the program before the provider is registered."""
    if not kubeconfig.strip():
        raise ValueError(
            f"ExistingClusterArgs.kubeconfig: {EMPTY_KUBECONFIG}; fix: give the cluster's kubeconfig contents "
            "(pulumi config set --secret <key> < cluster.kubeconfig)"
        )
    return kubeconfig


class ExistingCluster(pulumi.ComponentResource):
    k8s_provider: k8s.Provider

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:existing_cluster:ExistingCluster", name, None, opts)
        self.k8s_provider = k8s.Provider(
            name,
            kubeconfig=pulumi.Output.secret(args.kubeconfig).apply(_not_empty),
            context=args.context,
            # Server-side apply: field ownership is tracked, and operators that also touch objects don't fight.
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
