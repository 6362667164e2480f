"""ExistingCluster: the one explicit Kubernetes provider for a cluster the kit does not create.

On-prem and edge stacks reach their cluster only through this provider, built from a kubeconfig that is a
Pulumi secret. Nothing falls back to ``~/.kube/config`` or ``KUBECONFIG``: a provider with no kubeconfig
would silently use the ambient one, so the kubeconfig is required.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.specs import Args, StrInput


class ExistingClusterArgs(Args):
    kubeconfig: StrInput
    """Required: the kubeconfig's contents (a secret Output), never a path on the deployer's machine."""
    context: str | None = None
    """Context inside the kubeconfig; ``None`` uses its ``current-context``."""


class ExistingCluster(pulumi.ComponentResource):
    k8s_provider: k8s.Provider

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:existing_cluster:ExistingCluster", name, None, opts)
        self.k8s_provider = k8s.Provider(
            name,
            kubeconfig=pulumi.Output.secret(args.kubeconfig),
            context=args.context,
            # Server-side apply: field ownership is tracked, and operators that also touch objects don't fight.
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
