"""Network, EksCluster, NodeRole and ModelStore under the mock engine."""

from __future__ import annotations

import json
from ipaddress import IPv4Network

from components.aws.eks_cluster import EksCluster, EksClusterArgs
from components.aws.iam import NODE_POLICIES, NodeRole, NodeRoleArgs
from components.aws.model_store import ModelStore, ModelStoreArgs
from components.aws.network import Network, NetworkArgs, subnet_cidrs
from components.specs import ClusterSpec, ModelStoreSpec, NetworkSpec
from helpers import only
from inferstack_cli.plan import MockEngine

CLUSTER = "aws:eks/cluster:Cluster"


def cluster(engine: MockEngine, **spec: object) -> EksCluster:
    return EksCluster(
        "c",
        EksClusterArgs(
            spec=ClusterSpec.model_validate(spec),
            region="us-east-1",
            subnet_ids=["subnet-a", "subnet-b"],
        ),
    )


def test_cluster_endpoint_is_private_by_default(engine: MockEngine) -> None:
    cluster(engine)
    vpc = only(engine.settle(), CLUSTER).inputs["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in vpc


def test_cluster_endpoint_is_public_only_for_the_allowlist(engine: MockEngine) -> None:
    cluster(engine, endpointPublicAccessCidrs=["203.0.113.0/24"])
    vpc = only(engine.settle(), CLUSTER).inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_cluster_uses_api_auth_kms_secrets_and_all_control_plane_logs(engine: MockEngine) -> None:
    cluster(engine, adminRoleArns=["arn:aws:iam::123456789012:role/platform-admin"])
    resources = engine.settle()
    inputs = only(resources, CLUSTER).inputs
    key = only(resources, "aws:kms/key:Key")
    assert inputs["accessConfig"]["authenticationMode"] == "API"
    assert inputs["encryptionConfig"]["resources"] == ["secrets"]
    assert inputs["encryptionConfig"]["provider"]["keyArn"].startswith("arn:aws:kms:us-east-1:")
    assert key.inputs["enableKeyRotation"] is True
    assert set(inputs["enabledClusterLogTypes"]) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    association = only(resources, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert association.inputs["policyArn"].endswith("AmazonEKSClusterAdminPolicy")
    assert only(resources, "aws:eks/accessEntry:AccessEntry").inputs["principalArn"].endswith("role/platform-admin")


def test_cluster_installs_core_addons_coredns_after_nodes(engine: MockEngine) -> None:
    c = cluster(engine)
    assert {r.inputs["addonName"] for r in engine.settle() if r.type == "aws:eks/addon:Addon"} == {
        "vpc-cni",
        "kube-proxy",
        "eks-pod-identity-agent",
    }
    c.add_node_addons([])
    assert "coredns" in {r.inputs["addonName"] for r in engine.settle() if r.type == "aws:eks/addon:Addon"}


def test_cluster_exposes_an_explicit_kubernetes_provider_with_a_secret_exec_kubeconfig(engine: MockEngine) -> None:
    c = cluster(engine)
    provider = only(engine.settle(), "pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"
    config = json.loads(engine.loop.run_until_complete(c.kubeconfig.future()))
    exec_ = config["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws" and exec_["args"][:2] == ["eks", "get-token"]
    assert config["clusters"][0]["cluster"]["server"].startswith("https://")


def test_network_spans_zones_with_tagged_private_subnets_and_an_s3_endpoint(engine: MockEngine) -> None:
    spec = NetworkSpec.model_validate({"availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"]})
    Network("net", NetworkArgs(spec=spec, region="us-east-1", cluster_name="c"))
    resources = engine.settle()
    subnets = [r.inputs for r in resources if r.type == "aws:ec2/subnet:Subnet"]
    private = [s for s in subnets if s["tags"].get("kubernetes.io/role/internal-elb") == "1"]
    public = [s for s in subnets if s["tags"].get("kubernetes.io/role/elb") == "1"]
    assert {s["availabilityZone"] for s in private} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(s["tags"]["karpenter.sh/discovery"] == "c" for s in private)
    assert len(public) == 3 and not any(s.get("mapPublicIpOnLaunch") for s in subnets)
    assert len([r for r in resources if r.type == "aws:ec2/natGateway:NatGateway"]) == 3
    endpoint = only(resources, "aws:ec2/vpcEndpoint:VpcEndpoint").inputs
    assert endpoint["serviceName"] == "com.amazonaws.us-east-1.s3" and endpoint["vpcEndpointType"] == "Gateway"
    assert len(endpoint["routeTableIds"]) == 3


def test_single_nat_gateway_when_asked(engine: MockEngine) -> None:
    spec = NetworkSpec.model_validate({"availabilityZones": ["us-east-1a", "us-east-1b"], "natGateways": "single"})
    Network("net", NetworkArgs(spec=spec, region="us-east-1", cluster_name="c"))
    assert len([r for r in engine.settle() if r.type == "aws:ec2/natGateway:NatGateway"]) == 1


def test_subnet_split_gives_private_quarters_and_small_public_subnets() -> None:
    private, public = subnet_cidrs(IPv4Network("10.0.0.0/16"), 3)
    assert [str(p) for p in private] == ["10.0.0.0/18", "10.0.64.0/18", "10.0.128.0/18"]
    assert [str(p) for p in public] == ["10.0.192.0/22", "10.0.196.0/22", "10.0.200.0/22"]


def test_node_role_has_only_the_minimal_managed_policies(engine: MockEngine) -> None:
    NodeRole("nodes", NodeRoleArgs())
    resources = engine.settle()
    attached = {
        r.inputs["policyArn"] for r in resources if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    }
    assert attached == set(NODE_POLICIES)
    trust = json.loads(only(resources, "aws:iam/role:Role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_model_store_bucket_is_versioned_kms_encrypted_private_and_protected(engine: MockEngine) -> None:
    ModelStore("models", ModelStoreArgs(spec=ModelStoreSpec(), repository_prefix="inferstack-test"))
    resources = engine.settle()
    bucket = only(resources, "aws:s3/bucket:Bucket")
    assert bucket.protect is True
    assert (
        only(resources, "aws:s3/bucketVersioning:BucketVersioning").inputs["versioningConfiguration"]["status"]
        == "Enabled"
    )
    (rule,) = only(
        resources, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ).inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    block = only(resources, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    policy = json.loads(only(resources, "aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_model_store_protection_can_be_turned_off_for_throwaway_stacks(engine: MockEngine) -> None:
    ModelStore("models", ModelStoreArgs(spec=ModelStoreSpec(protect=False, force_destroy=True), repository_prefix="p"))
    bucket = only(engine.settle(), "aws:s3/bucket:Bucket")
    assert bucket.protect is False and bucket.inputs["forceDestroy"] is True


def test_ecr_repositories_scan_on_push_with_immutable_tags(engine: MockEngine) -> None:
    ModelStore("models", ModelStoreArgs(repository_prefix="inferstack-test"))
    repos = [r.inputs for r in engine.settle() if r.type == "aws:ecr/repository:Repository"]
    assert {r["name"] for r in repos} == {"inferstack-test/gateway", "inferstack-test/model-loader"}
    assert all(r["imageTagMutability"] == "IMMUTABLE" and r["imageScanningConfiguration"]["scanOnPush"] for r in repos)
