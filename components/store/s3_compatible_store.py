"""S3CompatibleStore: credentials for an S3-compatible model store (MinIO, Ceph RGW) and the loader's env.

The model loader speaks S3 through boto3, which reads the endpoint from ``AWS_ENDPOINT_URL`` (botocore's
service-specific endpoint configuration) and the keys from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``;
those come from a Kubernetes Secret filled from Pulumi secrets, never from plain config.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.specs import Args, ComponentNamespace, S3CompatibleStoreSpec, StrInput

SECRET_NAME = "model-store-credentials"
_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def loader_env(spec: S3CompatibleStoreSpec, secret_name: str = SECRET_NAME) -> list[dict[str, Any]]:
    return [
        {"name": "AWS_ENDPOINT_URL", "value": spec.endpoint.rstrip("/")},
        {"name": "AWS_REGION", "value": spec.region},
        # No instance metadata off AWS: without this boto3 probes 169.254.169.254 before failing over.
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
        *({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}} for key in _KEYS),
    ]


class S3CompatibleStoreArgs(Args):
    spec: S3CompatibleStoreSpec
    """Required: the store's endpoint, bucket and region; the site's own."""
    access_key_id: StrInput
    """A Pulumi secret. Engine builds upload with it, so it needs write on ``<model id>/trtllm/``."""
    secret_access_key: StrInput
    """Required: a Pulumi secret, the pair of ``access_key_id``."""
    namespace: ComponentNamespace
    """Required: where the loaders run; their credentials Secret is written there."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    secret_name: str = SECRET_NAME
    """The credentials Secret in ``namespace`` (what ``loader_env`` reads): a second store in one namespace needs its
    own, or the two would write one Secret and every loader would read the last store's keys."""


class S3CompatibleStore(pulumi.ComponentResource):
    loader_env: list[dict[str, Any]]
    credentials: k8s.core.v1.Secret

    def __init__(self, name: str, args: S3CompatibleStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:s3_compatible_store:S3CompatibleStore", name, None, opts)
        self.credentials = k8s.core.v1.Secret(
            name,
            metadata={"name": args.secret_name, "namespace": args.namespace},
            string_data={
                "AWS_ACCESS_KEY_ID": pulumi.Output.secret(args.access_key_id),
                "AWS_SECRET_ACCESS_KEY": pulumi.Output.secret(args.secret_access_key),
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        self.loader_env = loader_env(args.spec, args.secret_name)
        self.register_outputs({"secret_name": args.secret_name})
