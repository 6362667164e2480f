"""The hub's remote-write receiver behind a NetworkPolicy: ``observability.remoteWriteSources`` says where the sites'
writes come from, and only they, the monitoring namespace and KEDA reach Prometheus's port."""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from components.catalog.charts import CHARTS, PROMETHEUS_POD_LABELS
from helm_values import load_defaults
from helpers import config_errors, plan_with, raw_environment
from inferstack_cli import render
from inferstack_cli.plan import Plan
from policies.rules import RULES_BY_ID, check_plan
from stacks.environment import ConfigError, load_environment

PlanOf = Callable[[str], Plan]
SOURCES = "inferstack:environment.observability.remoteWriteSources"


def manifests(plan: Plan, kind: str) -> list[dict[str, Any]]:
    rendered = (yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/"))
    return [m for m in rendered if m["kind"] == kind]


def prometheus_policies(plan: Plan) -> list[dict[str, Any]]:
    """The NetworkPolicies whose podSelector picks the Prometheus server pods."""
    return [
        p
        for p in manifests(plan, "NetworkPolicy")
        if all(p["spec"]["podSelector"].get("matchLabels", {}).get(k) == v for k, v in PROMETHEUS_POD_LABELS.items())
    ]


def release_of(plan: Plan, chart: str) -> Any:
    return next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == chart)


def admits(policy: dict[str, Any], port: int, *, namespace: str | None = None, address: str | None = None) -> bool:
    """Whether ``policy`` lets a pod of ``namespace``, or a client at ``address``, reach ``port`` over TCP, read as
    the API defines it: any rule whose ports list the port and one of whose peers matches."""
    for rule in policy["spec"].get("ingress", []):
        ports = rule.get("ports") or [{}]
        if not any(p.get("port", port) == port and p.get("protocol", "TCP") == "TCP" for p in ports):
            continue
        for peer in rule.get("from") or []:
            if namespace is not None and "namespaceSelector" in peer and "podSelector" not in peer:
                labels = peer["namespaceSelector"].get("matchLabels", {})
                if labels == {"kubernetes.io/metadata.name": namespace}:
                    return True
            if address is not None and "ipBlock" in peer:
                block = peer["ipBlock"]
                inside = ip_address(address) in ip_network(block["cidr"])
                if inside and not any(ip_address(address) in ip_network(e) for e in block.get("except", [])):
                    return True
    return False


def onprem_with(edit: Callable[[dict[str, Any]], None]) -> list[str]:
    return config_errors(lambda env: edit(env["observability"]), stack="onprem")


# ---------------------------------------------------------------------------------------------
# Config errors


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda o: o.pop("remoteWriteSources"), "got [] (no sources with remoteWriteReceiver: true"),
        (lambda o: o.update(remoteWriteSources=[]), "got [] (no sources with remoteWriteReceiver: true"),
    ],
    ids=["missing", "empty"],
)
def test_a_receiver_without_sources_is_refused_with_an_example(
    edit: Callable[[dict[str, Any]], None], fragment: str
) -> None:
    # GIVEN the on-prem hub with its receiver on, its sources left out or empty
    # WHEN it is loaded THEN one line names the key (camelCase, as the stack file spells it) and shows an entry
    (line,) = onprem_with(edit)
    assert line.startswith(f"stacks/Pulumi.onprem.yaml: {SOURCES}: {fragment}")
    assert "{cidr: 10.60.0.0/16}" in line and "{namespace: ingress-nginx}" in line


def test_sources_without_the_receiver_are_refused() -> None:
    # GIVEN the on-prem stack with its receiver turned off and its sources kept
    (line,) = onprem_with(lambda o: o.update(remoteWriteReceiver=False))
    # THEN they are refused rather than ignored
    assert f"{SOURCES}: got " in line and "sources without remoteWriteReceiver: true" in line
    assert "fix: remove remoteWriteSources, or set remoteWriteReceiver: true" in line


@pytest.mark.parametrize(
    ("entry", "at", "fragment"),
    [
        ({"cidr": "10.60.0.1/16"}, ".cidr", "10.60.0.1/16 has host bits set"),
        ({"cidr": "10.60.0.0/33"}, ".cidr", "not a CIDR"),
        ({"cidr": "sites"}, ".cidr", "not a CIDR"),
        ({"cidr": 10}, ".cidr", "not a CIDR: not a string"),
        ({"cidr": "0.0.0.0/0"}, ".cidr", "reaches public addresses"),
        ({"cidr": "10.0.0.0/7"}, ".cidr", "reaches public addresses"),
        ({"cidr": "::/0"}, ".cidr", "reaches public addresses"),
        ({"namespace": "Ingress_Nginx"}, ".namespace", "a Kubernetes namespace name (DNS label)"),
        ({"namespace": "a" * 64}, ".namespace", "a Kubernetes namespace name (DNS label)"),
        ({"cidr": "10.60.0.0/16", "namespace": "ingress-nginx"}, "", "both cidr and namespace"),
        ({}, "", "neither cidr nor namespace"),
        ({"ipBlock": "10.60.0.0/16"}, ".ipBlock", "unknown key 'ipBlock'"),
    ],
)
def test_a_bad_source_is_one_line_at_its_entry(entry: dict[str, Any], at: str, fragment: str) -> None:
    # GIVEN a source that is not a private network in CIDR notation, not a namespace name, or not exactly one of them
    (line,) = onprem_with(lambda o: o.update(remoteWriteSources=[{"namespace": "ingress-nginx"}, entry]))
    # THEN it is refused at that entry, in one line
    assert line.startswith(f"stacks/Pulumi.onprem.yaml: {SOURCES}[1]{at}: got ")
    assert fragment in line


def test_a_cloud_hubs_source_inside_its_vpc_is_refused() -> None:
    # GIVEN the cloud prod stack as a metrics hub, its VPC's CIDR as planned
    vpc = load_environment(raw_environment("prod"), "prod").network.cidr  # type: ignore[union-attr]
    inside, outside = next(vpc.subnets(new_prefix=24)), "192.168.60.0/24"
    assert not vpc.overlaps(ip_network(outside))

    def hub(*cidrs: str) -> Callable[[dict[str, Any]], None]:
        def edit(env: dict[str, Any]) -> None:
            sources = [{"cidr": c} for c in cidrs]
            env["observability"] = {**env.get("observability", {}), "remoteWriteReceiver": True,
                                    "remoteWriteSources": sources}  # fmt: skip

        return edit

    # WHEN a source lies in the VPC, where the VPC CNI gives every pod its address
    (line,) = config_errors(hub(outside, str(inside)))
    # THEN it is refused at that entry: as an ipBlock it would admit the cluster's own pods
    assert f"{SOURCES}[1].cidr: got '{inside}' (overlaps the VPC, {vpc}" in line
    assert "{namespace: <its namespace>}" in line
    # AND the sites' own network alone is taken
    env = raw_environment("prod")
    hub(outside)(env)
    assert load_environment(env, "prod").observability.remote_write_sources[0].cidr == outside


def test_private_ipv4_and_ipv6_networks_and_namespaces_are_taken() -> None:
    # GIVEN sources of each kind, an IPv6 one written in long form
    env = raw_environment("onprem")
    entries = [{"cidr": "10.60.0.0/16"}, {"cidr": "100.64.0.0/10"}, {"cidr": "fd00:60:0::/48"}, {"namespace": "lb"}]
    env["observability"] = {**env["observability"], "remoteWriteSources": entries}
    # WHEN loaded THEN each is kept, the CIDRs as the API writes them
    sources = load_environment(env, "onprem").observability.remote_write_sources
    assert [(s.cidr, s.namespace) for s in sources] == [
        ("10.60.0.0/16", None),
        ("100.64.0.0/10", None),
        ("fd00:60::/48", None),
        (None, "lb"),
    ]


def test_sources_are_refused_at_an_edge_site() -> None:
    # GIVEN the edge stack (never a hub) naming sources
    env = raw_environment("edge")
    env["observability"] = {**env["observability"], "remoteWriteSources": [{"cidr": "10.60.0.0/16"}]}
    # WHEN loaded THEN the tier refuses the key by name, as it refuses the receiver
    with pytest.raises(ConfigError) as caught:
        load_environment(env, "stacks/Pulumi.edge.yaml")
    (line,) = str(caught.value).splitlines()
    assert "inferstack:environment.observability.remoteWriteSources: got " in line and "on tier edge" in line


# ---------------------------------------------------------------------------------------------
# The NetworkPolicy


def test_the_onprem_hub_guards_its_prometheus_with_a_valid_network_policy(plan_of: PlanOf) -> None:
    # GIVEN the bundled on-prem hub (receiver on, the ingress controller's namespace as its source) WHEN planned
    plan = plan_of("onprem")
    (policy,) = prometheus_policies(plan)
    prometheus = release_of(plan, "kube-prometheus-stack")
    # THEN one policy in Prometheus's namespace, accepted by the Kubernetes schema, selects the Prometheus pods
    assert policy["metadata"]["namespace"] == prometheus.inputs["namespace"]
    kubernetes_validate.validate(policy, "1.33.0", strict=True)
    # for ingress only: Prometheus still scrapes every namespace and writes to Alertmanager
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    # AND the stack's source reaches the web port, and nothing else does from outside the admitted namespaces
    (source,) = plan.environment.observability.remote_write_sources
    assert admits(policy, 9090, namespace=source.namespace)
    for outsider in ("inferstack-gateway", "inferstack-serving", "inferstack-cache", "default", "kube-system"):
        assert not admits(policy, 9090, namespace=outsider), outsider
    assert not admits(policy, 9090, address="10.60.1.5")
    # AND the policy pack finds nothing to say about the plan
    assert plan.violations == []


def test_prometheus_readers_stay_admitted(plan_of: PlanOf) -> None:
    # GIVEN the on-prem hub's Prometheus policy
    plan = plan_of("onprem")
    (policy,) = prometheus_policies(plan)
    monitoring = release_of(plan, "kube-prometheus-stack").inputs["namespace"]
    keda = release_of(plan, "keda").inputs["namespace"]
    # WHEN each reader the kit wires dials Prometheus: every KEDA trigger's serverAddress, queried by KEDA's
    # operator in KEDA's namespace
    addresses = {
        trigger["metadata"]["serverAddress"]
        for scaled in manifests(plan, "ScaledObject")
        for trigger in scaled["spec"]["triggers"]
        if trigger["type"] == "prometheus"
    }
    assert addresses
    # (the pinned chart's Prometheus Service: the port the URLs dial, the pod port it forwards to, and the
    # config-reloader's port, which the chart's Prometheus ServiceMonitor scrapes)
    service = load_defaults(CHARTS["kube-prometheus-stack"]).values["prometheus"]["service"]
    assert "service" not in release_of(plan, "kube-prometheus-stack").inputs["values"]["prometheus"]
    for address in addresses:
        url = urlsplit(address)
        assert url.hostname is not None and url.hostname.split(".")[1] == monitoring
        assert url.port == service["port"]
        # THEN KEDA's namespace is admitted on the pod port behind it
        assert admits(policy, service["targetPort"], namespace=keda)
        # AND so is Grafana's (the chart's datasource), with Alertmanager and the operator, in the release's namespace
        assert admits(policy, service["targetPort"], namespace=monitoring)
    # AND Prometheus's scrape of its own config-reloader still gets through, from its own namespace only
    assert admits(policy, service["reloaderWebPort"], namespace=monitoring)
    assert not admits(policy, service["reloaderWebPort"], namespace=keda)


def test_site_networks_become_ip_blocks(tmp_path: Path) -> None:
    # GIVEN the on-prem hub fronted by a load balancer that keeps client addresses: the sites' networks as sources
    def edit(env: dict[str, Any]) -> None:
        env["observability"]["remoteWriteSources"] = [{"cidr": "10.60.0.0/16"}, {"cidr": "fd00:60::/48"}]

    # WHEN planned
    (policy,) = prometheus_policies(plan_with(tmp_path, "onprem", edit))
    kubernetes_validate.validate(policy, "1.33.0", strict=True)
    # THEN a site's address reaches the web port, and only that port; an address outside them does not
    assert admits(policy, 9090, address="10.60.1.5") and admits(policy, 9090, address="fd00:60::7")
    assert not admits(policy, 8080, address="10.60.1.5")
    assert not admits(policy, 9090, address="10.61.0.1")
    # AND the ingress controller's namespace, no longer listed, is not admitted
    assert not admits(policy, 9090, namespace="ingress-nginx")


def test_the_widest_site_networks_pass_the_policy_pack(tmp_path: Path) -> None:
    # GIVEN the on-prem hub admitting the widest private networks the config takes (10.0.0.0/8, a unique local /48)
    def edit(env: dict[str, Any]) -> None:
        env["observability"]["remoteWriteSources"] = [{"cidr": "10.0.0.0/8"}, {"cidr": "fd00:60::/48"}]

    plan = plan_with(tmp_path, "onprem", edit)
    (policy,) = prometheus_policies(plan)
    assert admits(policy, 9090, address="10.200.0.1")
    # WHEN the policy pack runs THEN the kit's own ipBlocks break no mandatory rule (the NetworkPolicy guard included)
    found = check_plan(plan.resources, plan.tier, plan.environment, plan.outputs)
    assert [v for v in found if RULES_BY_ID[v["policy"]].enforcement.value == "mandatory"] == []


def test_without_the_receiver_no_policy_guards_prometheus(plan_of: PlanOf) -> None:
    # GIVEN stacks that are nobody's metrics hub WHEN planned THEN Prometheus has no policy (nothing changes)
    for stack in ("prod", "edge"):
        plan = plan_of(stack)
        assert not plan.environment.observability.remote_write_receiver
        assert prometheus_policies(plan) == []
