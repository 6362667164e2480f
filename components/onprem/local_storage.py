"""LocalStorage: local NVMe as PersistentVolumes through sig-storage's local static provisioner.

Each mount under ``hostDir`` on a node becomes one PV (one mount = one PV), offered through a
``kubernetes.io/no-provisioner`` StorageClass with ``WaitForFirstConsumer``, so a claim binds on the node its
pod is scheduled to (the chart's helm/provisioner/templates/storageclass.yaml). The kit's serving pods take one
volume each for their model cache. Prepare the servers first: RAID0 the NVMe drives, mount the array, and
bind-mount one directory per volume under ``hostDir`` (README, "On-prem quick start").
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.kube.helm import release
from components.onprem._values import local_static_provisioner_values
from components.onprem.specs import LocalStorageSpec
from components.specs import Args

NO_PROVISIONER = "kubernetes.io/no-provisioner"


class LocalStorageArgs(Args):
    spec: LocalStorageSpec
    """Required: the StorageClass name and the host directory the NVMe mounts are under."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""


class LocalStorage(pulumi.ComponentResource):
    storage_class: str

    def __init__(self, name: str, args: LocalStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:local_storage:LocalStorage", name, None, opts)
        release(
            "local-static-provisioner",
            local_static_provisioner_values(class_name=args.spec.storage_class, host_dir=args.spec.host_dir),
            parent=self,
            component=name,
            provider=args.provider,
        )
        self.storage_class = args.spec.storage_class
        self.register_outputs({"storage_class": self.storage_class})
