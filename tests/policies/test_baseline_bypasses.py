"""The security baseline cannot be dodged by another resource type or another spelling of a field.

Each case builds the violation the way a stack could write it without touching the field the
first rule looked at, and checks the pack still names it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from policy_builders import (
    DIGEST,
    container,
    deployment,
    edit,
    fixed_cloud_plan,
    k8s,
    pod_spec,
    res,
    service,
    violations,
    without,
)

CACHE = "aws:elasticache/replicationGroup:ReplicationGroup"
SECURE_CACHE: dict[str, Any] = {
    "atRestEncryptionEnabled": True,
    "transitEncryptionEnabled": True,
    "userGroupIds": ["inferstack-prod-cache"],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"transitEncryptionEnabled": False}, "TLS"),
        ({"transitEncryptionMode": "preferred"}, "plaintext"),
        ({"userGroupIds": []}, "authenticate"),
    ],
)
def test_a_cache_without_tls_or_auth_is_caught(change: dict[str, Any], says: str) -> None:
    # GIVEN a replication group that drops one in-transit protection
    plan = [res(CACHE, "cache", {**SECURE_CACHE, **change})]
    # WHEN the pack runs THEN the cache rule names what is missing
    (found,) = violations(plan, "elasticache-encrypted-authenticated")
    assert says in found["message"]


def test_a_cache_with_an_auth_token_instead_of_users_passes() -> None:
    plan = [res(CACHE, "cache", {**SECURE_CACHE, "userGroupIds": [], "authToken": "[secret]"})]
    assert violations(plan, "elasticache-encrypted-authenticated") == []


def test_a_standalone_cache_cluster_is_caught() -> None:
    # GIVEN a single-node cluster, which has no at-rest encryption or AUTH token at all
    plan = [res("aws:elasticache/cluster:Cluster", "cache", {"engine": "valkey", "transitEncryptionEnabled": True})]
    # THEN it is refused in favour of a replication group
    (found,) = violations(plan, "elasticache-encrypted-authenticated")
    assert "ReplicationGroup" in found["message"]


@pytest.mark.parametrize(
    "auth",
    [{"noPasswordRequired": True}, {"authenticationMode": {"type": "no-password-required"}}],
)
def test_an_enabled_cache_user_without_a_password_is_caught(auth: dict[str, Any]) -> None:
    user = {"userName": "default", "engine": "valkey", "accessString": "on ~* +@all", **auth}
    (found,) = violations(
        [res("aws:elasticache/user:User", "cache-default", user)], "elasticache-encrypted-authenticated"
    )
    assert "'default'" in found["message"]


def test_a_switched_off_user_needs_no_password() -> None:
    user = {"userName": "default", "accessString": "off ~* -@all", "noPasswordRequired": True}
    assert violations([res("aws:elasticache/user:User", "d", user)], "elasticache-encrypted-authenticated") == []


NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def node_class(**spec: Any) -> list[dict[str, Any]]:
    return [res(NODE_CLASS, "gpu-nodeclass", {"kind": "EC2NodeClass", "metadata": {"name": "gpu"}, "spec": spec})]


@pytest.mark.parametrize(
    "options", [{"httpTokens": "optional"}, {"httpTokens": "required", "httpPutResponseHopLimit": 2}]
)
def test_a_karpenter_node_class_cannot_reopen_imds(options: dict[str, Any]) -> None:
    # GIVEN Karpenter nodes, which never see a launch template of the stack's
    # WHEN their EC2NodeClass weakens the metadata options THEN imdsv2-required says so
    assert violations(node_class(metadataOptions=options), "imdsv2-required")


def test_karpenters_own_metadata_defaults_pass() -> None:
    # Karpenter defaults an omitted metadataOptions to httpTokens required, hop limit 1 (its CRD schema).
    assert violations(node_class(), "imdsv2-required") == []


def test_a_launch_template_without_hop_limit_1_is_caught() -> None:
    # GIVEN IMDSv2 required but the hop limit left to the AMI (2 on AL2023), or raised
    for options in ({"httpTokens": "required"}, {"httpTokens": "required", "httpPutResponseHopLimit": 2}):
        (found,) = violations([res(LT, "lt", {"metadataOptions": options})], "imdsv2-required")
        assert "httpPutResponseHopLimit: 1" in found["message"]


def test_a_node_group_without_a_launch_template_is_caught() -> None:
    group = {"amiType": "AL2023_x86_64_STANDARD", "instanceTypes": ["m7i.xlarge"]}
    (found,) = violations([res("aws:eks/nodeGroup:NodeGroup", "system", group)], "imdsv2-required")
    assert "no launch template" in found["message"]


def test_an_unencrypted_volume_in_a_node_class_is_caught() -> None:
    volumes = [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "200Gi", "volumeType": "gp3"}}]
    (found,) = violations(node_class(blockDeviceMappings=volumes), "ebs-encrypted")
    assert "/dev/xvda" in found["message"]
    volumes[0]["ebs"]["encrypted"] = True  # type: ignore[index]
    assert violations(node_class(blockDeviceMappings=volumes), "ebs-encrypted") == []


def test_an_instance_store_mapping_is_not_an_ebs_volume() -> None:
    mappings = [
        {"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}},
        {"deviceName": "/dev/sdb", "virtualName": "ephemeral0"},
    ]
    assert violations([res(LT, "lt", {"blockDeviceMappings": mappings})], "ebs-encrypted") == []


GUARD = "stack-network-policy-guards-cache-and-servers"
GATEWAY_PEER = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "inferstack-gateway"}},
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "inferstack-gateway"}},
}


def policy(name: str, selector: dict[str, Any], ingress: list[dict[str, Any]], ns: str = "serving") -> dict[str, Any]:
    spec = {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": ingress}
    return k8s("networking.k8s.io/v1", "NetworkPolicy", name, spec, ns=ns)


def cache_statefulset() -> dict[str, Any]:
    spec = pod_spec(container("redis", "redis:8.2.2" + DIGEST), nodeSelector={"inferstack.io/pool": "system"})
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "cache"}}, "spec": spec}
    return k8s("apps/v1", "StatefulSet", "valkey", {"replicas": 1, "template": template}, ns="cache")


def test_a_model_server_no_policy_selects_is_caught() -> None:
    # GIVEN the fixed stack without the model server's NetworkPolicy
    plan = without(fixed_cloud_plan(), "llama", "NetworkPolicy")
    # THEN the server is named as reachable by every pod
    (found,) = violations(plan, GUARD)
    assert "Deployment serving/llama" in found["message"] and "model server" in found["message"]


@pytest.mark.parametrize(
    "ingress",
    [
        [{"ports": [{"port": 8000}]}],
        [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
        [{"from": [{"namespaceSelector": {}}]}],
        [{"from": [{"namespaceSelector": {}, "podSelector": {}}]}],
        [{"from": [{"namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchExpressions": []}}]}],
    ],
)
def test_a_second_policy_that_lets_everyone_in_is_caught(ingress: list[dict[str, Any]]) -> None:
    # GIVEN a restrictive policy on the server, and another one, added beside it, that admits every source
    opened = policy("llama-open", {"matchExpressions": [{"key": "inferstack.io/model", "operator": "Exists"}]}, ingress)
    (found,) = violations([*fixed_cloud_plan(), opened], GUARD)
    assert "NetworkPolicy serving/llama-open" in found["message"]


def ip_block(cidr: str, *excepted: str) -> dict[str, Any]:
    return {"ipBlock": {"cidr": cidr, **({"except": list(excepted)} if excepted else {})}}


def llama_admitting(*peers: dict[str, Any]) -> dict[str, Any]:
    """A policy beside the model server's own that admits ``peers`` to its port."""
    return policy("llama-clients", ANY_MODEL, [{"from": [GATEWAY_PEER, *peers], "ports": [{"port": "http"}]}])


@pytest.mark.parametrize(
    ("cidr", "admits"),
    [
        ("0.0.0.0/0", "every address"),
        ("::/0", "every address"),
        ("0::/0", "every address"),  # ::/0 spelt another way
        ("10.1.2.3/0", "every address"),  # host bits, which the API server masks off
        ("000.000.000.000/0", "every address"),  # leading zeros, which the API server reads as decimal
        ("64.0.0.0/4", "every address of 64.0.0.0/4, a /4"),
        ("0.0.0.0/1", "every address of 0.0.0.0/1, a /1"),  # half of 0.0.0.0/0, beside the other half
        ("fd00::/8", "every address of fd00::/8, a /8"),  # every organisation's unique local addresses
    ],
)
def test_a_broad_ip_block_to_a_model_server_is_caught(cidr: str, admits: str) -> None:
    # GIVEN a policy on the server that admits the gateway's pods and an address range wider than any one network
    plan = [*fixed_cloud_plan(), gateway_deployment(), llama_admitting(ip_block(cidr))]
    # WHEN the pack runs THEN the policy, the peer's CIDR and the fix are named
    (found,) = violations(plan, GUARD)
    message = found["message"]
    assert message.startswith("NetworkPolicy serving/llama-clients selects the model server Deployment serving/llama")
    assert f"admits {admits}" in message and f"through the peer ipBlock {cidr}," in message
    assert "replace it with a podSelector" in message and "app.kubernetes.io/name=inferstack-gateway" in message
    assert "except" not in message


def test_an_except_list_does_not_narrow_a_broad_block() -> None:
    # GIVEN every address but the private ones, on the cache
    peers = [GATEWAY_PEER, ip_block("0.0.0.0/0", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
    guard = policy("valkey", {"matchLabels": {"app.kubernetes.io/name": "cache"}}, [{"from": peers}], "cache")
    (found,) = violations([*fixed_cloud_plan(), cache_statefulset(), guard], GUARD)
    # THEN the whole internet still gets in, and the message says why the except list does not help
    assert found["message"].startswith("NetworkPolicy cache/valkey selects the cache StatefulSet cache/valkey")
    assert "through the peer ipBlock 0.0.0.0/0 (its except list takes out only the ranges it names" in found["message"]


@pytest.mark.parametrize(
    ("widest", "wider"),
    [("10.0.0.0/8", "10.0.0.0/7"), ("fd12:3456:789a::/48", "fd12:3456:7800::/40")],
    ids=["ipv4", "ipv6"],
)
def test_the_widest_block_admitted_is_one_organisations_private_network(widest: str, wider: str) -> None:
    # GIVEN a site's private network beside the gateway's pods: RFC 1918's 10.0.0.0/8, a unique local /48, or narrower
    plan = [*fixed_cloud_plan(), gateway_deployment()]
    for narrow in (widest, "10.60.0.0/16", "10.60.1.7/32", "fd12:3456:789a:1::/64"):
        assert violations([*plan, llama_admitting(ip_block(narrow))], GUARD) == []
    # WHEN the block is any wider THEN it spans other networks, and is caught
    (found,) = violations([*plan, llama_admitting(ip_block(wider))], GUARD)
    assert f"through the peer ipBlock {wider}," in found["message"]


def vpc() -> list[dict[str, Any]]:
    """The stack's VPC and a private subnet of it, where the VPC CNI numbers the nodes and pods."""
    return [
        res("aws:ec2/vpc:Vpc", "network", {"cidrBlock": "10.20.0.0/16"}),
        res("aws:ec2/subnet:Subnet", "network-private-a", {"cidrBlock": "10.20.0.0/18", "vpcId": "vpc-1"}),
    ]


@pytest.mark.parametrize(
    ("cidr", "covers"),
    [
        ("10.20.0.0/16", "the VPC network (10.20.0.0/16)"),
        ("10.0.0.0/8", "the VPC network (10.20.0.0/16)"),
        ("10.20.0.0/17", "the subnet network-private-a (10.20.0.0/18)"),
    ],
)
def test_a_block_covering_the_clusters_own_network_is_caught(cidr: str, covers: str) -> None:
    # GIVEN a cloud stack whose pods and nodes take the VPC's addresses, and a block over all of a subnet of it
    plan = [*fixed_cloud_plan(), *vpc(), gateway_deployment(), llama_admitting(ip_block(cidr))]
    # THEN the block admits every pod there, and is caught however narrow it is
    (found,) = violations(plan, GUARD)
    assert f"admits every node and pod of {covers}" in found["message"]
    assert f"through the peer ipBlock {cidr}," in found["message"]


@pytest.mark.parametrize("cidr", ["10.20.1.0/24", "10.20.63.255/32"])
def test_a_block_inside_a_subnet_the_pods_are_numbered_from_is_caught(cidr: str) -> None:
    # GIVEN a cloud stack whose pods take the private subnet's addresses, and a block of a few of them: whichever pods
    # the VPC CNI numbers there today (Kubernetes: an ipBlock is for cluster-external IPs, a pod's IP is ephemeral)
    plan = [*fixed_cloud_plan(), *vpc(), gateway_deployment(), llama_admitting(ip_block(cidr))]
    # THEN it is caught, naming the subnet
    (found,) = violations(plan, GUARD)
    assert "a range inside the subnet network-private-a (10.20.0.0/18)" in found["message"]
    assert f"through the peer ipBlock {cidr}," in found["message"]


def test_a_block_beside_the_clusters_network_or_excepting_it_passes() -> None:
    plan = [*fixed_cloud_plan(), *vpc(), gateway_deployment()]
    for peer in (ip_block("10.60.0.0/16"), ip_block("10.0.0.0/8", "10.20.0.0/16"), ip_block("10.20.200.0/24")):
        assert violations([*plan, llama_admitting(peer)], GUARD) == []


MONITORING = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
GATEWAY_NS = {"matchLabels": {"kubernetes.io/metadata.name": "inferstack-gateway"}}
ANY_MODEL = {"matchExpressions": [{"key": "inferstack.io/model", "operator": "Exists"}]}


def gateway_deployment(ns: str = "inferstack-gateway") -> dict[str, Any]:
    return deployment("gateway", ns=ns, labels={"app.kubernetes.io/name": "inferstack-gateway"})


@pytest.mark.parametrize(
    ("peer", "names"),
    [
        ({"namespaceSelector": MONITORING}, "every pod of namespace monitoring"),
        ({"namespaceSelector": MONITORING, "podSelector": {}}, "every pod of namespace monitoring"),
        (
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "monitoring"]}
                    ]
                }
            },
            "every pod of namespace monitoring, team-a",
        ),
        ({"namespaceSelector": {"matchLabels": {"team": "ml"}}}, "every pod of every namespace its namespaceSelector"),
        ({"podSelector": {}}, "every pod of its own namespace serving"),
    ],
    ids=["namespace", "empty-pod-selector", "in-expression", "by-label", "own-namespace"],
)
def test_a_policy_that_admits_a_whole_namespace_to_a_model_server_is_caught(peer: dict[str, Any], names: str) -> None:
    # GIVEN the fixed stack with its gateway, and a policy beside the server's own that admits every pod of a namespace
    # other than the gateway's (Grafana, Alertmanager, any exporter there could call the model past the gateway)
    opened = policy("llama-monitoring", ANY_MODEL, [{"from": [peer], "ports": [{"port": "http"}]}])
    plan = [*fixed_cloud_plan(), gateway_deployment(), opened]
    # WHEN the pack runs THEN the policy, the namespace, the peer and the fix are named
    (found,) = violations(plan, GUARD)
    message = found["message"]
    assert message.startswith(
        "NetworkPolicy serving/llama-monitoring selects the model server Deployment serving/llama"
    )
    assert names in message and json.dumps(peer, sort_keys=True) in message
    assert "give it a podSelector" in message and "app.kubernetes.io/name=prometheus" in message


def test_a_policy_that_admits_only_a_namespaces_named_pods_passes() -> None:
    # GIVEN the kit's own peers: Prometheus's pods in monitoring, the gateway's pods in the gateway's namespace
    peers = [
        {"namespaceSelector": MONITORING, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
        GATEWAY_PEER,
    ]
    named = policy("llama-named", ANY_MODEL, [{"from": peers}])
    # THEN nothing is found
    assert violations([*fixed_cloud_plan(), gateway_deployment(), named], GUARD) == []


def test_the_gateways_whole_namespace_is_a_named_peer_while_it_holds_only_the_gateway() -> None:
    # GIVEN a policy admitting all of the gateway's namespace, where the stack runs the gateway alone
    whole = policy("llama-gateway", ANY_MODEL, [{"from": [{"namespaceSelector": GATEWAY_NS}]}])
    plan = [*fixed_cloud_plan(), gateway_deployment(), whole]
    assert violations(plan, GUARD) == []
    # WHEN another workload runs in that namespace THEN the same peer admits it too, and is caught
    (found,) = violations([*plan, deployment("debug", ns="inferstack-gateway")], GUARD)
    assert "NetworkPolicy serving/llama-gateway" in found["message"]
    assert "every pod of namespace inferstack-gateway" in found["message"]


def test_a_whole_namespace_without_the_gateway_is_not_the_gateways() -> None:
    # GIVEN the peer of the gateway's namespace by name, but the gateway runs elsewhere (or not in this stack)
    whole = policy("llama-gateway", ANY_MODEL, [{"from": [{"namespaceSelector": GATEWAY_NS}]}])
    plan = [*fixed_cloud_plan(), gateway_deployment(ns="edge-gateway"), whole]
    # THEN the namespace is one like another
    (found,) = violations(plan, GUARD)
    assert "every pod of namespace inferstack-gateway" in found["message"]


def test_a_cache_open_to_the_whole_monitoring_namespace_is_caught() -> None:
    # GIVEN a Redis StatefulSet whose policy admits the gateway's pods and all of monitoring, not the exporter's pods
    peers = [GATEWAY_PEER, {"namespaceSelector": MONITORING}]
    guard = policy("valkey", {"matchLabels": {"app.kubernetes.io/name": "cache"}}, [{"from": peers}], "cache")
    (found,) = violations([*fixed_cloud_plan(), cache_statefulset(), guard], GUARD)
    assert found["message"].startswith("NetworkPolicy cache/valkey selects the cache StatefulSet cache/valkey")
    assert "every pod of namespace monitoring" in found["message"]


def test_an_in_cluster_cache_is_guarded_whatever_its_labels() -> None:
    # GIVEN a Redis-image StatefulSet without the kit's labels and no policy
    plan = [*fixed_cloud_plan(), cache_statefulset()]
    (found,) = violations(plan, GUARD)
    assert "cache" in found["message"] and "StatefulSet cache/valkey" in found["message"]
    # WHEN a policy admits only the gateway THEN it is guarded
    guard = policy("valkey", {"matchLabels": {"app.kubernetes.io/name": "cache"}}, [{"from": [GATEWAY_PEER]}], "cache")
    assert violations([*plan, guard], GUARD) == []


def test_a_policy_in_another_namespace_guards_nothing() -> None:
    plan = without(fixed_cloud_plan(), "llama", "NetworkPolicy")
    elsewhere = policy("llama", {"matchLabels": {"inferstack.io/model": "llama"}}, [{"from": [GATEWAY_PEER]}], "apps")
    assert violations([*plan, elsewhere], GUARD)


def test_a_policy_in_another_cluster_guards_nothing() -> None:
    # GIVEN one program deploying to two clusters (each object's provider), whose model server's NetworkPolicy went to
    # the other cluster, in the same namespace
    plan = fixed_cloud_plan()
    edit(plan, "llama", "NetworkPolicy")["provider"] = "urn:pulumi:test::inferstack::pulumi:providers:kubernetes::dc2"
    # WHEN the pack runs THEN the server is named as unguarded in its own cluster
    (found,) = violations(plan, GUARD)
    assert "Deployment serving/llama" in found["message"] and "no NetworkPolicy selects" in found["message"]


SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
KMS_RULE = {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": "arn:aws:kms:k"}}
PAB = {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True, "restrictPublicBuckets": True}


def bucket_plan(*, sse: bool = True, pab: bool = True) -> list[dict[str, Any]]:
    plan = [res("aws:s3/bucket:Bucket", "models", {"forceDestroy": False})]
    if sse:
        plan.append(res(SSE, "models", {"bucket": "models-9b0f540", "rules": [KMS_RULE]}))
    if pab:
        plan.append(
            res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "models", {"bucket": "models-9b0f540", **PAB})
        )
    return plan


def test_a_bucket_with_no_encryption_or_public_access_block_is_caught() -> None:
    # GIVEN the model bucket, once without its encryption configuration and once without its access block
    (no_sse,) = violations(bucket_plan(sse=False), "stack-s3-bucket-protected")
    (no_pab,) = violations(bucket_plan(pab=False), "stack-s3-bucket-protected")
    # THEN each names the bucket and what it lacks; the full set passes
    assert "Bucket models" in no_sse["message"] and "SSE-S3" in no_sse["message"]
    assert "BucketPublicAccessBlock" in no_pab["message"]
    assert violations(bucket_plan(), "stack-s3-bucket-protected") == []


@pytest.mark.parametrize(
    "resource",
    [
        # the v6 name of the configuration resource, an alias pulumi-aws v7 still accepts
        res(SSE.replace("Configuration", "ConfigurationV2"), "models", {"bucket": "models-9b0f540", "rules": []}),
        res(SSE, "models", {"bucket": "models-9b0f540", "rules": []}),
        res(
            "aws:s3/bucket:Bucket",
            "models",
            {
                "serverSideEncryptionConfiguration": {
                    "rule": {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}
                }
            },
        ),
        res(
            "aws:s3/bucketV2:BucketV2",
            "models",
            {
                "serverSideEncryptionConfigurations": [
                    {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]}
                ]
            },
        ),
    ],
)
def test_encryption_without_kms_is_caught_however_it_is_written(resource: dict[str, Any]) -> None:
    assert violations([resource], "s3-sse-kms")


def test_dual_layer_kms_counts_as_kms() -> None:
    dsse = {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms:dsse"}}
    assert violations([res(SSE, "models", {"bucket": "b", "rules": [dsse]})], "s3-sse-kms") == []


@pytest.mark.parametrize("tier", ["cloud", "edge"])
def test_another_clouds_internal_marker_does_not_make_a_service_internal(tier: str) -> None:
    # GIVEN a LoadBalancer Service marked internal the GKE way, on EKS (in-tree controller) or k3s (ServiceLB),
    # neither of which reads that annotation
    svc = service("gateway-lb", "LoadBalancer", {"networking.gke.io/load-balancer-type": "Internal"})
    # THEN the pack still sees a load balancer that may face the internet
    assert violations([svc], "k8s-no-internet-facing-service", tier)


def test_an_ingress_class_that_makes_every_alb_public_is_caught() -> None:
    params = k8s("elbv2.k8s.aws/v1beta1", "IngressClassParams", "alb", {"scheme": "internet-facing"}, ns=None)
    (found,) = violations([params], "k8s-no-internet-facing-service")
    assert "IngressClassParams alb" in found["message"]
    params["inputs"]["spec"]["scheme"] = "internal"
    assert violations([params], "k8s-no-internet-facing-service") == []


@pytest.mark.parametrize(
    "args",
    [
        ["--api-key", "hunter2-but-longer"],
        ["--hf-token=hf_abcdefghijklmnop"],
        ["--upstream", "https://user:hunter22@hub.example.com"],
    ],
)
def test_a_secret_on_the_command_line_is_caught(args: list[str]) -> None:
    # GIVEN a server given its key as an argument instead of through env from a Secret
    plan = [deployment("llama", pod_spec(container("server", args=["serve", *args])))]
    # THEN the env rule names it, as it would in env
    (found,) = violations(plan, "k8s-no-secret-in-env")
    assert "command line" in found["message"]


def test_flags_that_mention_tokens_and_secret_references_pass() -> None:
    args = ["--max-num-batched-tokens", "2048", "--tokenizer", "/models/t", "--api-key", "$(GATEWAY_API_KEY)"]
    plan = [deployment("llama", pod_spec(container("server", args=args)))]
    assert violations(plan, "k8s-no-secret-in-env") == []


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


@pytest.mark.parametrize(
    ("binary", "says"),
    [
        ({"app.yaml": b64("redis:\n  password: hunter22\n")}, "binaryData key app.yaml contains a credential"),
        ({"id_rsa": b64("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n")}, "binaryData key id_rsa contains a credential"),
        ({"api-key": b64(bytes(range(256)))}, "binaryData key api-key holds what its name says is a secret"),
    ],
)
def test_a_secret_in_a_configmaps_binary_data_is_caught(binary: dict[str, str], says: str) -> None:
    # GIVEN a ConfigMap whose credential sits in binaryData, base64 instead of text in data
    plan = [k8s("core/v1", "ConfigMap", "cfg", binaryData=binary)]
    # THEN the rule reads it as the text (or, for bytes that are not text, the key) it is
    (found,) = violations(plan, "k8s-no-secret-in-configmap")
    assert "ConfigMap apps/cfg " + says in found["message"]


def test_binary_data_without_a_credential_passes() -> None:
    binary = {"model.bin": b64(bytes(range(256))), "app.yaml": b64("password: ${REDIS_PASSWORD}\n"), "odd": "not b64!"}
    assert violations([k8s("core/v1", "ConfigMap", "cfg", binaryData=binary)], "k8s-no-secret-in-configmap") == []


@pytest.mark.parametrize("name", ["nvidia-driver-daemonset", "network-operator-helper"])
def test_a_kit_workload_named_like_an_operator_daemon_gets_no_privilege(name: str) -> None:
    # The operators' daemons come from their charts, which the pack does not render: a name is not an allowance.
    privileged = container(securityContext={"privileged": True, "runAsNonRoot": False})
    plan = [*fixed_cloud_plan(), deployment(name, pod_spec(privileged))]
    found = violations(plan, "pss-no-host-namespaces-or-privileged")
    assert [v["urn"] for v in found if name in v["urn"]], found
