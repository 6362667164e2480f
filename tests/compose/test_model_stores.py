"""Two S3-compatible model stores in one namespace of a user's stack (say MinIO for some models, Ceph for others)."""

from __future__ import annotations

from components.kube.existing_cluster import ExistingCluster
from components.specs import S3CompatibleStoreSpec
from components.store.s3_compatible_store import S3CompatibleStore, S3CompatibleStoreArgs
from inferstack_cli.plan import MockEngine


def store(name: str, endpoint: str, cluster: ExistingCluster, **extra: str) -> S3CompatibleStore:
    return S3CompatibleStore(
        name,
        S3CompatibleStoreArgs(
            spec=S3CompatibleStoreSpec(endpoint=endpoint, bucket="models"),
            access_key_id=f"{name}-id",
            secret_access_key=f"{name}-key",
            namespace="ml",
            provider=cluster.k8s_provider,
            **extra,
        ),
    )


def secret_refs(env: list[dict[str, object]]) -> set[str]:
    return {e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e}  # type: ignore[index]


def test_each_store_in_one_namespace_has_its_own_credentials_secret(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    # GIVEN two stores in namespace `ml`, the second with its own Secret name
    minio = store("minio", "https://minio.example:9000", cluster)
    ceph = store("ceph", "https://rgw.example", cluster, secret_name="ceph-credentials")
    secrets = [r.inputs["metadata"]["name"] for r in engine.settle() if r.type == "kubernetes:core/v1:Secret"]
    # THEN each writes its own Secret and each store's loaders read their own store's keys
    assert sorted(secrets) == ["ceph-credentials", "model-store-credentials"]
    assert secret_refs(minio.loader_env) == {"model-store-credentials"}
    assert secret_refs(ceph.loader_env) == {"ceph-credentials"}
