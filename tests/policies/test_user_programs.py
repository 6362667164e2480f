"""A user's own resources, written with pulumi_aws and pulumi_kubernetes beside the kit's components.

The README lets infra teams compose the components into their own stacks and add their own resources; the pack
must hold those to the security baseline too. Each program here is run under Pulumi's mock engine, so the rules
see the wire format the SDKs really send, and each case pairs the violation with the conforming spelling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random
import pytest

from inferstack_cli.plan import MockEngine
from policies.rules import check_plan

Run = Callable[[Callable[[], object], str], list[str]]

KMS_SECRETS: Any = {"resources": ["secrets"], "provider": {"key_arn": "arn:aws:kms:us-east-1:123456789012:key/k"}}


@pytest.fixture
def messages(engine: MockEngine) -> Run:
    """Run a user's program; the messages of one rule, each followed by the URN it names."""

    def run(program: Callable[[], object], rule: str) -> list[str]:
        program()
        found = check_plan(engine.settle(), "cloud")
        return [f"{v['message']} ({v['urn']})" for v in found if v["policy"] == rule]

    return run


def eks_cluster(**vpc: Any) -> aws.eks.Cluster:
    return aws.eks.Cluster(
        "team-eks",
        role_arn="arn:aws:iam::123456789012:role/eks",
        vpc_config={"subnet_ids": ["subnet-a", "subnet-b"], "endpoint_private_access": True, **vpc},
        encryption_config=KMS_SECRETS,
    )


def test_an_eks_endpoint_left_at_the_apis_default_is_public(messages: Run) -> None:
    # GIVEN a user's cluster that turns private access on and says nothing of public access, whose EKS API default
    # is true with publicAccessCidrs 0.0.0.0/0 (https://docs.aws.amazon.com/eks/latest/APIReference/API_VpcConfigRequest.html)
    # WHEN the pack runs THEN the endpoint is named as open to the internet, with the fix
    (found,) = messages(eks_cluster, "eks-private-endpoint")
    assert "endpointPublicAccess" in found and "team-eks" in found


@pytest.mark.parametrize("cidrs", [["0.0.0.0/1", "128.0.0.0/1"], ["203.0.113.0/24", "0.0.0.0/4"]])
def test_an_eks_endpoint_allowlist_wider_than_any_network_is_public(messages: Run, cidrs: list[str]) -> None:
    # GIVEN a user's cluster whose public endpoint "allowlist" reaches into the internet: 0.0.0.0/0 in two halves, or a
    # range wider than /8, which the config refuses for cluster.endpointPublicAccessCidrs
    program = lambda: eks_cluster(endpoint_public_access=True, public_access_cidrs=cidrs)  # noqa: E731
    # WHEN the pack runs THEN the endpoint is named as open to the internet
    (found,) = messages(program, "eks-private-endpoint")
    assert "open to" in found and cidrs[-1] in found and "team-eks" in found


def test_an_eks_endpoint_public_only_to_an_allowlist_or_not_at_all_passes(messages: Run) -> None:
    assert messages(lambda: eks_cluster(endpoint_public_access=False), "eks-private-endpoint") == []
    allowlisted = {"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]}
    assert messages(lambda: eks_cluster(**allowlisted), "eks-private-endpoint") == []


def ebs_volume(**fields: Any) -> aws.ebs.Volume:
    return aws.ebs.Volume("team-scratch", availability_zone="us-east-1a", size=100, **fields)


def instance(**fields: Any) -> aws.ec2.Instance:
    secure: dict[str, Any] = {
        "metadata_options": {"http_tokens": "required", "http_put_response_hop_limit": 1},
        "root_block_device": {"encrypted": True},
    }
    return aws.ec2.Instance(
        "team-bastion", ami="ami-0123456789abcdef0", instance_type="m7i.large", **{**secure, **fields}
    )


def storage_class(provisioner: str, **parameters: str) -> k8s.storage.v1.StorageClass:
    return k8s.storage.v1.StorageClass(
        "team-fast",
        metadata={"name": "team-fast"},
        provisioner=provisioner,
        parameters={"type": "gp3", **parameters},
        opts=pulumi.ResourceOptions(provider=k8s.Provider("team-cluster", kubeconfig="apiVersion: v1")),
    )


@pytest.mark.parametrize(
    ("program", "names"),
    [
        (ebs_volume, "team-scratch"),
        (lambda: instance(root_block_device={"encrypted": False}), "team-bastion"),
        (lambda: instance(root_block_device=None), "team-bastion"),
        (lambda: instance(ebs_block_devices=[{"device_name": "/dev/sdf", "volume_size": 100}]), "/dev/sdf"),
        (lambda: storage_class("ebs.csi.aws.com"), "StorageClass team-fast"),
        (lambda: storage_class("kubernetes.io/aws-ebs", encrypted="false"), "StorageClass team-fast"),
    ],
    ids=["volume", "instance-root", "instance-root-unset", "instance-disk", "storage-class", "in-tree-class"],
)
def test_an_unencrypted_ebs_volume_of_a_users_own_is_caught(
    messages: Run, program: Callable[[], object], names: str
) -> None:
    # GIVEN an EBS volume a user's program creates outside a node template: a volume, an instance's disks, or the
    # volumes a StorageClass provisions (the EBS CSI driver's `encrypted` defaults to false: its docs/parameters.md)
    # WHEN the pack runs THEN the volume is named with the setting that encrypts it
    (found,) = messages(program, "ebs-encrypted")
    assert names in found and "encrypted" in found


@pytest.mark.parametrize(
    "program",
    [
        lambda: ebs_volume(encrypted=True),
        lambda: instance(ebs_block_devices=[{"device_name": "/dev/sdf", "encrypted": True}]),
        lambda: storage_class("ebs.csi.aws.com", encrypted="true"),
        lambda: storage_class("ebs.csi.eks.amazonaws.com", Encrypted="true"),  # the driver reads keys in any case
        lambda: storage_class("rancher.io/local-path"),  # not EBS
    ],
    ids=["volume", "instance", "storage-class", "auto-mode-class", "not-ebs"],
)
def test_encrypted_ebs_volumes_and_other_storage_pass(messages: Run, program: Callable[[], object]) -> None:
    assert messages(program, "ebs-encrypted") == []


@pytest.mark.parametrize(
    ("program", "rule", "says"),
    [
        (lambda: instance(metadata_options=None), "imdsv2-required", "httpTokens: required"),
        (lambda: instance(metadata_options={"http_tokens": "optional"}), "imdsv2-required", "httpTokens: required"),
        (lambda: instance(associate_public_ip_address=True), "no-public-node-ip", "associatePublicIpAddress"),
    ],
    ids=["imds-unset", "imdsv1", "public-ip"],
)
def test_a_users_own_instance_keeps_imdsv2_and_no_public_ip(
    messages: Run, program: Callable[[], object], rule: str, says: str
) -> None:
    # GIVEN an EC2 instance of a user's own (a bastion, a self-managed node), which left alone answers IMDSv1 when
    # its AMI allows it, or one given a public IP
    # WHEN the pack runs THEN the rule that holds nodes to the baseline names the instance and the setting
    found = messages(program, rule)
    assert found and all("team-bastion" in m for m in found) and any(says in m for m in found)


def test_an_instance_launched_from_a_template_is_judged_by_its_template(messages: Run) -> None:
    # GIVEN an instance whose metadata options come from its launch template, which the rule judges on its own
    def program() -> None:
        template = aws.ec2.LaunchTemplate(
            "team-template", metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 1}
        )
        instance(metadata_options=None, launch_template={"id": template.id})

    # THEN neither is refused
    assert messages(program, "imdsv2-required") == []


@pytest.mark.parametrize("rule", ["imdsv2-required", "no-public-node-ip"])
def test_an_instance_with_imdsv2_and_no_public_ip_passes(messages: Run, rule: str) -> None:
    assert messages(instance, rule) == []


def serverless_cache(**fields: Any) -> aws.elasticache.ServerlessCache:
    return aws.elasticache.ServerlessCache("team-cache", name="team-cache", **{"engine": "valkey", **fields})


def test_a_serverless_cache_without_a_user_group_is_caught(messages: Run) -> None:
    # GIVEN a user's ElastiCache Serverless cache: always TLS and encrypted at rest, but access control is RBAC only
    # ("RBAC is also the only way to control access to serverless caches": ElastiCache guide, Clusters.RBAC)
    # WHEN it names no user group THEN the rule names it and the fix
    (found,) = messages(serverless_cache, "elasticache-encrypted-authenticated")
    assert "userGroupId" in found and "team-cache" in found


def test_a_serverless_memcached_is_told_to_use_valkey_not_a_user_group_it_cannot_have(messages: Run) -> None:
    # GIVEN a serverless Memcached cache, for which CreateServerlessCache takes no UserGroupId (Valkey and Redis OSS
    # only): it has no access control at all
    (found,) = messages(lambda: serverless_cache(engine="memcached"), "elasticache-encrypted-authenticated")
    assert "use engine valkey with a user group" in found and "userGroupId)" not in found


def test_a_serverless_cache_with_a_user_group_passes(messages: Run) -> None:
    assert messages(lambda: serverless_cache(user_group_id="team-users"), "elasticache-encrypted-authenticated") == []


def k8s_opts() -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(provider=k8s.Provider("team-cluster", kubeconfig="apiVersion: v1"))


def worker(**container: Any) -> k8s.apps.v1.Deployment:
    """A user's own Deployment, conforming to Pod Security restricted, with ``container``'s extra fields."""
    context = {
        "run_as_non_root": True,
        "run_as_user": 1000,
        "allow_privilege_escalation": False,
        "read_only_root_filesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    image = "registry.example/worker:1.0@sha256:" + "a" * 64
    return k8s.apps.v1.Deployment(
        "team-worker",
        metadata={"name": "team-worker", "namespace": "team-a"},
        spec={
            "selector": {"match_labels": {"app": "team-worker"}},
            "template": {
                "metadata": {"labels": {"app": "team-worker"}},
                "spec": {
                    "automount_service_account_token": False,
                    "security_context": {"seccomp_profile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "worker", "image": image, "security_context": context, **container}],
                },
            },
        },
        opts=k8s_opts(),
    )


def redis_url() -> pulumi.Output[str]:
    """A Pulumi secret: the cache's URL with its password (made inside each program, on the mock engine's loop)."""
    return pulumi.Output.secret("rediss://:s3cr3t-t0ken@cache.team-a:6379")


SECRET_REF = "valueFrom.secretKeyRef"


@pytest.mark.parametrize(
    ("program", "rule", "names", "fix"),
    [
        (
            lambda: k8s.core.v1.ConfigMap(
                "team-config", metadata={"name": "team-config"}, data={"cache-url": redis_url()}, opts=k8s_opts()
            ),
            "k8s-no-secret-in-configmap",
            "ConfigMap team-config key cache-url",
            "move it to a Secret",
        ),
        (
            lambda: worker(env=[{"name": "CACHE_URL", "value": redis_url()}]),
            "k8s-no-secret-in-env",
            "env CACHE_URL",
            SECRET_REF,
        ),
        (lambda: worker(args=["--cache-url", redis_url()]), "k8s-no-secret-in-env", "(--cache-url)", SECRET_REF),
    ],
    ids=["configmap", "env", "command-line"],
)
def test_a_pulumi_secret_written_into_a_plain_kubernetes_field_is_caught(
    messages: Run, program: Callable[[], object], rule: str, names: str, fix: str
) -> None:
    # GIVEN a Pulumi secret (a password inside a URL) that a user's program puts in a ConfigMap, an env literal or
    # an argument: Pulumi keeps it encrypted in the state, but the cluster stores the object in plain text for
    # anyone who may read ConfigMaps or Deployments, whatever its key or flag is called
    # WHEN the pack runs THEN the field is named, with the fix
    (found,) = messages(program, rule)
    assert names in found and fix in found


def test_a_generated_password_on_the_command_line_is_caught(messages: Run) -> None:
    # GIVEN a user's program that passes a generated password (pulumi_random) to its server as an argument: the
    # engine keeps RandomPassword's result secret, so the pod spec would show a Pulumi secret in plain text
    program = lambda: worker(  # noqa: E731
        args=["--port", "6379", random.RandomPassword("team-cache", length=32, special=False).result]
    )
    # WHEN the pack runs THEN the argument is named, with the fix
    (found,) = messages(program, "k8s-no-secret-in-env")
    assert "(argument 2)" in found and SECRET_REF in found


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--api-key", "SECRET"], "(--api-key)"),  # a flag named like a secret: one finding, not one per word
        (["--port", "8000", "SECRET"], "(argument 2)"),  # a positional secret: no flag to name
        (["SECRET"], "(argument 0)"),  # "--api-key=" + a secret is a secret: Pulumi masks the whole argument
    ],
    ids=["secret-flag", "positional", "whole-argument"],
)
def test_a_pulumi_secret_on_the_command_line_is_one_finding_named_by_its_place(
    messages: Run, args: list[str], names: str
) -> None:
    program = lambda: worker(args=[redis_url() if a == "SECRET" else a for a in args])  # noqa: E731
    (found,) = messages(program, "k8s-no-secret-in-env")
    assert names in found


def test_a_secret_referenced_from_a_kubernetes_secret_passes(messages: Run) -> None:
    reference = {"secret_key_ref": {"name": "team-cache-auth", "key": "url"}}
    program = lambda: worker(env=[{"name": "CACHE_URL", "value_from": reference}], args=["--cache-url", "$(CACHE_URL)"])  # noqa: E731
    assert messages(program, "k8s-no-secret-in-env") == []


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/vllm/vllm-openai:v0.11.0",  # Docker Hub's full name for the kit's vllm/vllm-openai
        "harbor.dc1.example/mirror/vllm/vllm-openai:v0.11.0",  # an air-gapped site's mirror
        "harbor.dc1.example/nvidia/tritonserver:25.09-trtllm-python-py3",
    ],
)
def test_a_users_model_server_from_a_mirror_is_still_guarded(messages: Run, image: str) -> None:
    # GIVEN a user's own model server Deployment running a kit engine image from another registry, no NetworkPolicy
    program = lambda: worker(image=image + "@sha256:" + "b" * 64)  # noqa: E731
    # WHEN the pack runs THEN it is named as a model server every pod can reach
    (found,) = messages(program, "stack-network-policy-guards-cache-and-servers")
    assert "Deployment team-a/team-worker is a model server" in found


def guarded_server(*peers: dict[str, Any]) -> None:
    """A user's vLLM Deployment in team-a, and a NetworkPolicy selecting it that admits ``peers``."""
    worker(image="docker.io/vllm/vllm-openai:v0.11.0@sha256:" + "b" * 64)
    k8s.networking.v1.NetworkPolicy(
        "team-worker",
        metadata={"name": "team-worker", "namespace": "team-a"},
        spec={
            "pod_selector": {"match_labels": {"app": "team-worker"}},
            "policy_types": ["Ingress"],
            "ingress": [{"from_": list(peers)}],
        },
        opts=k8s_opts(),
    )


GATEWAY_PODS = {
    "namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": "inferstack-gateway"}},
    "pod_selector": {"match_labels": {"app.kubernetes.io/name": "inferstack-gateway"}},
}
MONITORING = {"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_a_users_model_server_open_to_the_whole_monitoring_namespace_is_caught(messages: Run) -> None:
    # GIVEN a user's model server whose policy admits the gateway's pods and every pod of monitoring
    program = lambda: guarded_server(GATEWAY_PODS, MONITORING)  # noqa: E731
    # WHEN the pack runs THEN the policy and the namespace are named, with the fix
    (found,) = messages(program, "stack-network-policy-guards-cache-and-servers")
    assert found.startswith("NetworkPolicy team-a/team-worker selects the model server Deployment team-a/team-worker")
    assert "every pod of namespace monitoring" in found and "podSelector" in found


def test_a_users_model_server_open_to_prometheuss_pods_passes(messages: Run) -> None:
    prometheus = {**MONITORING, "pod_selector": {"match_labels": {"app.kubernetes.io/name": "prometheus"}}}
    program = lambda: guarded_server(GATEWAY_PODS, prometheus)  # noqa: E731
    assert messages(program, "stack-network-policy-guards-cache-and-servers") == []


def test_a_users_model_server_open_to_half_the_internet_is_caught(messages: Run) -> None:
    # GIVEN a user's model server whose policy admits the gateway's pods and 0.0.0.0/1, which is not 0.0.0.0/0
    program = lambda: guarded_server(GATEWAY_PODS, {"ip_block": {"cidr": "0.0.0.0/1"}})  # noqa: E731
    # WHEN the pack runs THEN the policy, the CIDR and the fix are named
    (found,) = messages(program, "stack-network-policy-guards-cache-and-servers")
    assert found.startswith("NetworkPolicy team-a/team-worker selects the model server Deployment team-a/team-worker")
    assert "through the peer ipBlock 0.0.0.0/1," in found and "replace it with a podSelector" in found


def coredns_patch(**pod: Any) -> k8s.apps.v1.DeploymentPatch:
    """A server-side apply patch of a Deployment the stack does not own: only the fields it writes."""
    spec: dict[str, Any] = {"replicas": 3}
    if pod:
        spec["template"] = {"spec": pod}
    return k8s.apps.v1.DeploymentPatch(
        "coredns-replicas", metadata={"name": "coredns", "namespace": "kube-system"}, spec=spec, opts=k8s_opts()
    )


POD_RULES = (
    "pss-run-as-non-root",
    "pss-no-privilege-escalation",
    "pss-drop-all-capabilities",
    "pss-seccomp-runtime-default",
    "k8s-read-only-root-filesystem",
    "k8s-cpu-memory-requests",
    "k8s-automount-token-off",
)


@pytest.mark.parametrize("rule", POD_RULES)
def test_a_patch_is_not_refused_for_the_fields_it_leaves_to_the_live_object(messages: Run, rule: str) -> None:
    # GIVEN a patch that sets a Deployment's replicas (and a container's image), leaving its pod settings as they are
    program = lambda: coredns_patch(containers=[{"name": "coredns", "image": "registry.example/coredns:1.11"}])  # noqa: E731
    # THEN no rule asks it to write what it does not change
    assert messages(program, rule) == []


@pytest.mark.parametrize("level", ["pod", "container"])
def test_a_patch_that_turns_root_back_on_is_refused(messages: Run, level: str) -> None:
    # GIVEN a patch writing runAsNonRoot: false, at the pod or at the container level
    context = {"run_as_non_root": False}
    program = (
        (lambda: coredns_patch(security_context=context))
        if level == "pod"
        else (lambda: coredns_patch(containers=[{"name": "coredns", "security_context": context}]))
    )
    # THEN it is refused: what a patch writes is judged
    assert len(messages(program, "pss-run-as-non-root")) == 1


def test_what_a_patch_writes_is_still_judged(messages: Run) -> None:
    # GIVEN a patch that turns on hostNetwork and a privileged container
    program = lambda: coredns_patch(  # noqa: E731
        host_network=True, containers=[{"name": "coredns", "security_context": {"privileged": True}}]
    )
    # THEN both are refused
    assert len(messages(program, "pss-no-host-namespaces-or-privileged")) == 2


OPT_IN = {"inferstack.io/internet-facing": "true"}
"""The tag a user's program sets on an AWS resource it means to face the internet (a Service's annotation's twin)."""
VPC_ID = "vpc-0123456789abcdef0"
GROUP_ID = "sg-0123456789abcdef0"
HTTPS: Any = {"protocol": "tcp", "from_port": 443, "to_port": 443}


def security_group(**fields: Any) -> aws.ec2.SecurityGroup:
    return aws.ec2.SecurityGroup("team-web", vpc_id=VPC_ID, **fields)


def ingress_rule(**fields: Any) -> aws.vpc.SecurityGroupIngressRule:
    return aws.vpc.SecurityGroupIngressRule(
        "team-web-https", security_group_id=GROUP_ID, ip_protocol="tcp", from_port=443, to_port=443, **fields
    )


def legacy_rule(kind: str, **fields: Any) -> aws.ec2.SecurityGroupRule:
    return aws.ec2.SecurityGroupRule("team-web-https", type=kind, security_group_id=GROUP_ID, **HTTPS, **fields)


@pytest.mark.parametrize(
    ("program", "names", "says"),
    [
        (lambda: security_group(ingress=[{**HTTPS, "cidr_blocks": ["0.0.0.0/0"]}]), "team-web", "0.0.0.0/0"),
        (lambda: security_group(ingress=[{**HTTPS, "ipv6_cidr_blocks": ["::/0"]}]), "team-web", "::/0"),
        (lambda: legacy_rule("ingress", cidr_blocks=["0.0.0.0/0"]), "team-web-https", "0.0.0.0/0"),
        (lambda: ingress_rule(cidr_ipv4="0.0.0.0/0"), "team-web-https", "0.0.0.0/0"),
        (lambda: ingress_rule(cidr_ipv6="::/0"), "team-web-https", "::/0"),
        (
            lambda: aws.ec2.DefaultSecurityGroup(
                "team-default", vpc_id=VPC_ID, ingress=[{**HTTPS, "cidr_blocks": ["0.0.0.0/0"]}]
            ),
            "team-default",
            "0.0.0.0/0",
        ),
        # the internet in two halves, as the config's allowlists refuse it (README, cloud quick start)
        (
            lambda: security_group(ingress=[{**HTTPS, "cidr_blocks": ["10.0.0.0/8", "0.0.0.0/1"]}]),
            "team-web",
            "admits 0.0.0.0/1:",
        ),
    ],
    ids=[
        "group-inline",
        "group-inline-ipv6",
        "group-rule",
        "ingress-rule",
        "ingress-rule-ipv6",
        "default-group",
        "half-the-internet",
    ],
)
def test_a_security_group_open_to_the_internet_is_caught(
    messages: Run, program: Callable[[], object], names: str, says: str
) -> None:
    # GIVEN a user's security group, or a rule added to one, that admits every address (or a range wider than any
    # organisation's network): whatever it guards answers the internet, however private its subnet
    # WHEN the pack runs THEN the group or rule is named with the range and the opt-in
    (found,) = messages(program, "sg-no-internet-ingress")
    assert names in found and says in found and "inferstack.io/internet-facing" in found


@pytest.mark.parametrize(
    "program",
    [
        lambda: security_group(egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}]),
        lambda: legacy_rule("egress", cidr_blocks=["0.0.0.0/0"], ipv6_cidr_blocks=["::/0"]),
        lambda: aws.vpc.SecurityGroupEgressRule(
            "team-web-out", security_group_id=GROUP_ID, ip_protocol="-1", cidr_ipv4="0.0.0.0/0"
        ),
        lambda: security_group(ingress=[{**HTTPS, "cidr_blocks": ["10.0.0.0/16"], "ipv6_cidr_blocks": ["fc00::/7"]}]),
        lambda: security_group(ingress=[{**HTTPS, "self": True}, {**HTTPS, "security_groups": [GROUP_ID]}]),
        lambda: ingress_rule(cidr_ipv4="203.0.113.0/24"),  # an office's public range, as cluster.deployerCidrs takes
        lambda: ingress_rule(prefix_list_id="pl-0123456789abcdef0"),
        lambda: security_group(ingress=[{**HTTPS, "cidr_blocks": ["0.0.0.0/0"]}], tags=OPT_IN),
        lambda: ingress_rule(cidr_ipv4="0.0.0.0/0", tags=OPT_IN),
    ],
    ids=[
        "group-egress",
        "rule-egress",
        "egress-rule",
        "vpc-and-ula",
        "self-and-group",
        "office",
        "prefix-list",
        "group-opted-in",
        "rule-opted-in",
    ],
)
def test_egress_private_or_named_sources_and_an_opt_in_pass(messages: Run, program: Callable[[], object]) -> None:
    assert messages(program, "sg-no-internet-ingress") == []


def test_the_kits_efa_security_group_passes(messages: Run) -> None:
    # GIVEN the group every EFA node carries: all traffic from itself, and egress to 0.0.0.0/0 for ordinary
    # outbound traffic (egress to anywhere is what every node needs: image pulls, S3 through the NAT)
    from components.aws.efa import efa_security_group

    program = lambda: efa_security_group(  # noqa: E731
        "team-efa", pool="h100", vpc_id=VPC_ID, tags={}, opts=pulumi.ResourceOptions()
    )
    # THEN it is not refused
    assert messages(program, "sg-no-internet-ingress") == []


SUBNETS = ["subnet-a", "subnet-b"]


@pytest.mark.parametrize(
    "program",
    [
        lambda: aws.lb.LoadBalancer("team-lb", subnets=SUBNETS),
        lambda: aws.lb.LoadBalancer("team-lb", subnets=SUBNETS, load_balancer_type="network", internal=False),
        lambda: aws.alb.LoadBalancer("team-lb", subnets=SUBNETS),
        lambda: aws.elb.LoadBalancer(
            "team-lb",
            subnets=SUBNETS,
            listeners=[{"instance_port": 8080, "instance_protocol": "http", "lb_port": 80, "lb_protocol": "http"}],
        ),
    ],
    ids=["lb-unset", "nlb-false", "alb-unset", "classic-unset"],
)
def test_a_load_balancer_left_internet_facing_is_caught(messages: Run, program: Callable[[], object]) -> None:
    # GIVEN a user's own load balancer that does not say internal: Elastic Load Balancing's default scheme is
    # internet-facing, a public DNS name and public addresses in the subnets' zones
    # WHEN the pack runs THEN it is named with the fix and the deliberate opt-in
    (found,) = messages(program, "elb-internal")
    assert "team-lb" in found and "internal: true" in found and "inferstack.io/internet-facing" in found


@pytest.mark.parametrize(
    "program",
    [
        lambda: aws.lb.LoadBalancer("team-lb", subnets=SUBNETS, internal=True),
        lambda: aws.alb.LoadBalancer("team-lb", subnets=SUBNETS, internal=True),
        lambda: aws.elb.LoadBalancer(
            "team-lb",
            subnets=SUBNETS,
            internal=True,
            listeners=[{"instance_port": 8080, "instance_protocol": "http", "lb_port": 80, "lb_protocol": "http"}],
        ),
        lambda: aws.lb.LoadBalancer("team-lb", subnets=SUBNETS, load_balancer_type="gateway"),
        lambda: aws.lb.LoadBalancer("team-lb", subnets=SUBNETS, tags=OPT_IN),
    ],
    ids=["lb", "alb", "classic", "gateway", "opted-in"],
)
def test_an_internal_gateway_or_opted_in_load_balancer_passes(messages: Run, program: Callable[[], object]) -> None:
    assert messages(program, "elb-internal") == []
