"""The Gateway component as planned: config validated by the gateway's schema, secrets kept out, HPA."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from helpers import ROOT, config_errors, plan_with
from inferstack_cli import render
from inferstack_cli.plan import Plan
from inferstack_gateway.config import parse_config

PlanOf = Callable[[str], Plan]


def gateway_objects(plan: Plan) -> dict[str, dict[str, Any]]:
    return {
        f"{m['kind']}/{m['metadata']['name']}": m
        for p, t in render.renders(plan.resources).items()
        if p.startswith("manifests/inferstack-gateway/")
        for m in [yaml.safe_load(t)]
    }


def test_rendered_config_is_accepted_by_the_gateways_own_schema(plan_of: PlanOf) -> None:
    config = yaml.safe_load(gateway_objects(plan_of("prod"))["ConfigMap/gateway-config"]["data"]["gateway.yaml"])
    parsed = parse_config(config, env={"GATEWAY_REDIS_URL": "rediss://:pw@cache:6379"})
    assert set(parsed.models) == {"llama-8b", "llama-70b", "chat"}
    assert parsed.models["chat"].complexity[0].tier == "llama-70b"
    assert parsed.upstreams["llama-8b"].url == "http://llama-8b.inferstack-serving.svc:8000/v1"
    assert parsed.upstreams["llama-70b"].model == "ensemble"
    assert parsed.redis.url.startswith("rediss://")


def test_no_secret_lands_in_the_config_map(plan_of: PlanOf) -> None:
    text = gateway_objects(plan_of("prod"))["ConfigMap/gateway-config"]["data"]["gateway.yaml"]
    assert "${GATEWAY_REDIS_URL}" in text
    assert "key_sha256" not in text and "plan-" not in text
    secret = gateway_objects(plan_of("prod"))["Secret/gateway-keys"]
    assert secret["stringData"] == {"REDACTED": "[secret]"}


def test_redis_password_reaches_the_pod_only_from_the_cache_secret(plan_of: PlanOf) -> None:
    deployment = gateway_objects(plan_of("prod"))["Deployment/gateway"]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "cache-auth", "key": "password"}
    assert env["GATEWAY_REDIS_URL"]["value"].startswith("rediss://gateway:$(REDIS_PASSWORD)@master.cache.")


def test_gateway_pod_meets_the_restricted_pod_security_level(plan_of: PlanOf) -> None:
    pod = gateway_objects(plan_of("dev"))["Deployment/gateway"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_gateway_has_its_own_cpu_hpa_pdb_and_network_policy(plan_of: PlanOf) -> None:
    objects = gateway_objects(plan_of("prod"))
    hpa = objects["HorizontalPodAutoscaler/gateway"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway"}
    assert hpa["spec"]["minReplicas"] == 3 and hpa["spec"]["maxReplicas"] == 12
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert objects["PodDisruptionBudget/gateway"]["spec"]["minAvailable"] == 1
    assert objects["NetworkPolicy/gateway"]["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    for manifest in objects.values():
        if manifest["apiVersion"] != "monitoring.coreos.com/v1":  # the ServiceMonitor is checked against its CRD
            kubernetes_validate.validate(manifest, "1.33.0", strict=True)


def test_a_one_replica_gateway_lets_a_drain_evict_it(plan_of: PlanOf) -> None:
    # GIVEN dev's gateway, one replica (the HPA's floor) WHEN planned
    plan = plan_of("dev")
    assert plan.environment.gateway.replicas == 1
    budget = gateway_objects(plan)["PodDisruptionBudget/gateway"]["spec"]
    # THEN its budget lets that pod be evicted: minAvailable 1 of 1 allows no eviction, and `kubectl drain` (a node
    # upgrade, Karpenter's consolidation) would wait for ever
    assert budget["maxUnavailable"] == 1 and "minAvailable" not in budget


def test_the_readmes_scaling_table_names_the_gateway_hpas_only_signal(plan_of: PlanOf) -> None:
    # GIVEN the gateway's HPA as planned, and the README's "How the platform scales" row for it
    hpa = gateway_objects(plan_of("prod"))["HorizontalPodAutoscaler/gateway"]
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| Gateway pods |"))
    who, signal = (cell.strip() for cell in row.split("|")[2:4])
    # WHEN / THEN the HPA scales on CPU alone, and the README says so, not a request rate it never reads
    assert [(m["type"], m["resource"]["name"]) for m in hpa["spec"]["metrics"]] == [("Resource", "cpu")]
    assert who == "HPA" and "CPU" in signal and "request" not in signal


def test_internal_load_balancer_is_optional(plan_of: PlanOf) -> None:
    prod = gateway_objects(plan_of("prod"))["Service/gateway-lb"]
    assert prod["spec"]["type"] == "LoadBalancer"
    assert prod["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert gateway_objects(plan_of("prod"))["Service/gateway"]["spec"]["type"] == "ClusterIP"
    dev = gateway_objects(plan_of("dev"))
    assert dev["Service/gateway"]["spec"]["type"] == "ClusterIP" and "Service/gateway-lb" not in dev


def test_gateway_load_balancer_serves_tls_only_on_443(plan_of: PlanOf) -> None:
    # GIVEN prod's internal NLB WHEN it is planned THEN the only listener is 443 with the configured certificate
    # (issue 12, point 3: API keys crossed the network in clear text on port 80).
    service = gateway_objects(plan_of("prod"))["Service/gateway-lb"]
    assert [p["port"] for p in service["spec"]["ports"]] == [443]
    annotations = service["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer"
    assert annotations[f"{prefix}-ssl-cert"] == plan_of("prod").environment.gateway.tls_certificate_arn
    assert annotations[f"{prefix}-ssl-ports"] == "https" == service["spec"]["ports"][0]["name"]


def test_route_to_a_model_that_is_not_served() -> None:
    (line,) = config_errors(lambda env: env["gateway"]["routes"][0].update(large="llama-405b"))
    assert "gateway.routes[0].large: got 'llama-405b'; allowed: one of models[].name: llama-8b, llama-70b" in line


def test_a_route_with_every_rule_off_is_refused_in_the_stack_files_keys() -> None:
    # GIVEN prod's route with largeIfPromptTokens turned off (null) and no keywords or turns: nothing sends to large
    def edit(env: dict[str, Any]) -> None:
        env["gateway"]["routes"][0].update(largeIfPromptTokens=None, largeIfKeywords=[])

    # WHEN loaded THEN one line names the route and the stack file's keys that fix it, not the rendered config's
    (line,) = config_errors(edit)
    assert "gateway.routes[0]:" in line and "largeIfPromptTokens, largeIfTurns or largeIfKeywords" in line
    assert "min_prompt_tokens" not in line


def test_a_dollar_in_the_users_text_reaches_the_gateway_unchanged(tmp_path: Path) -> None:
    # GIVEN the edge site's route keywords and hub model with a '$' the gateway's ${VAR} interpolation would read
    # ('$$' is its literal '$'; ${VAR:-default} takes the pod's environment, which the plan cannot see)
    keywords = ["a$$b", "${HOME:-x}", "cost $5"]

    def edit(env: dict[str, Any]) -> None:
        env["gateway"]["routes"][0]["largeIfKeywords"] = keywords
        env["hub"]["model"] = "chat$$v2"

    plan = plan_with(tmp_path, "edge", edit)
    # WHEN the gateway loads the rendered config in its pod (HOME set, as in any container)
    config = yaml.safe_load(gateway_objects(plan)["ConfigMap/gateway-config"]["data"]["gateway.yaml"])
    parsed = parse_config(config, env={"GATEWAY_REDIS_URL": "redis://cache:6379", "HUB_API_KEY": "k", "HOME": "/"})
    # THEN it matches on the very words and asks the hub for the very model the stack file names
    assert parsed.models["chat"].complexity[0].keywords == keywords
    assert parsed.upstreams["hub"].model == "chat$$v2"


def test_gateway_without_api_keys_is_refused() -> None:
    (line,) = config_errors(lambda env: env["gateway"].update(apiKeys=[]))
    assert "gateway.apiKeys: got no keys" in line and "sha256sum" in line


def test_api_key_must_be_a_hash_never_a_plaintext_key() -> None:
    (line,) = config_errors(lambda env: env["gateway"]["apiKeys"][0].update(keySha256="my-secret-key"))
    assert "gateway.apiKeys[0].keySha256" in line and "64 lowercase hex digits" in line and "sha256sum" in line


def test_two_keys_of_one_name_are_refused_since_the_gateway_counts_limits_by_name() -> None:
    # GIVEN dev's key and a second key of another tenant under the same name (the gateway's rate-limit counters are
    # keyed by the key's name, else its hash prefix: the two would share one count)
    other = {"tenant": "other", "keySha256": "0" * 64, "name": "dev-example"}
    # WHEN loaded THEN one line names the second key's name and the fix
    (line,) = config_errors(lambda env: env["gateway"]["apiKeys"].append(other), stack="dev")
    assert "gateway.apiKeys[1].name" in line and "apiKeys[0]" in line and "rename" in line


def test_a_key_named_as_the_burst_key_is_refused_on_the_hub_side() -> None:
    # GIVEN prod, which issues the burst key (named "burst" in the keys file), WHEN a tenant's key is named so too
    (line,) = config_errors(lambda env: env["gateway"]["apiKeys"][0].update(name="burst"))
    # THEN it is refused: the two keys would share the burst key's rate-limit counters
    assert "gateway.apiKeys[0].name" in line and "'burst'" in line and "burstTenant" in line


def test_the_clouds_tls_only_load_balancer_takes_no_other_port() -> None:
    (line,) = config_errors(lambda env: env["gateway"].update(loadBalancerPort=8080))
    assert "gateway.loadBalancerPort: got 8080 on tier cloud" in line and "443" in line


def test_the_on_prem_load_balancer_keeps_port_80(plan_of: PlanOf) -> None:
    service = gateway_objects(plan_of("onprem"))["Service/gateway-lb"]
    assert [p["port"] for p in service["spec"]["ports"]] == [80]


def test_the_load_balancers_url_names_its_port_unless_it_is_the_schemes_own() -> None:
    from types import SimpleNamespace

    from components.gateway.gateway import _lb_url

    status = SimpleNamespace(load_balancer=SimpleNamespace(ingress=[SimpleNamespace(hostname=None, ip="10.42.0.10")]))
    # GIVEN a k3s site's servicelb address WHEN the gateway listens on 8080 THEN other stacks must dial 8080
    assert _lb_url(status, "in-cluster", "http", 8080) == "http://10.42.0.10:8080/v1"
    assert _lb_url(status, "in-cluster", "http", 80) == "http://10.42.0.10/v1"
    assert _lb_url(status, "in-cluster", "https", 443) == "https://10.42.0.10/v1"
    assert _lb_url(None, "in-cluster", "http", 8080) == "in-cluster"


def test_both_sides_name_the_hub_by_its_v1_url() -> None:
    # GIVEN the hub side's gateway.hubUrl and the sending side's hub.url THEN one rule and one message for both
    (hub_side,) = config_errors(lambda env: env["gateway"].update(hubUrl="https://gw.prod.internal.example.com"))
    assert "gateway.hubUrl: got 'https://gw.prod.internal.example.com' (not an OpenAI base URL ending in /v1)" in (
        hub_side
    )
    assert "fix: write 'https://gw.prod.internal.example.com/v1'" in hub_side


def test_the_cloud_terminates_tls_at_its_load_balancer_not_with_a_tls_secret() -> None:
    (line,) = config_errors(lambda env: env["gateway"].update(tlsSecret="gateway-tls"))
    assert "gateway.tlsSecret: got 'gateway-tls' on tier cloud" in line and "tlsCertificateArn" in line


@pytest.mark.parametrize("stack", ["onprem", "edge", "prod"])
def test_each_gateway_pod_is_scraped_through_one_service(plan_of: PlanOf, stack: str) -> None:
    # GIVEN a stack whose gateway has an in-cluster Service and a load balancer Service, both selecting its pods
    objects = gateway_objects(plan_of(stack))
    (monitor,) = [m for m in objects.values() if m["kind"] == "ServiceMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    # WHEN the ServiceMonitor's targets are found as the Prometheus Operator finds them: the Services whose labels
    # match its selector, on the port of its endpoint's name
    scraped = [
        name
        for name, m in objects.items()
        if m["kind"] == "Service"
        and selector.items() <= m["metadata"]["labels"].items()
        and any(p.get("name") == endpoint["port"] for p in m["spec"]["ports"])
    ]
    # THEN one Service carries the scrape: a second one scraped every pod twice and doubled every summed series
    assert scraped == ["Service/gateway"]


def _gateway_pod_annotations(plan: Plan) -> dict[str, str]:
    annotations: dict[str, str] = gateway_objects(plan)["Deployment/gateway"]["spec"]["template"]["metadata"][
        "annotations"
    ]
    return annotations


def test_revoking_an_api_key_rolls_the_gateway_pods(tmp_path: Path, plan_of: PlanOf) -> None:
    # GIVEN dev's gateway, which reads its keys file once, at start (a changed Secret alone leaves the running pods with
    # the key table they built, and the revoked key keeps working)
    before = _gateway_pod_annotations(plan_of("dev"))

    # WHEN the operator revokes a key by replacing it with another
    def rotate(env: dict[str, Any]) -> None:
        env["gateway"]["apiKeys"][0]["keySha256"] = "0" * 64

    after = _gateway_pod_annotations(plan_with(tmp_path, "dev", rotate))
    # THEN the pod template changes, so the Deployment rolls its pods onto the new keys; the config did not change
    assert after["inferstack.io/keys-sha256"] != before["inferstack.io/keys-sha256"]
    assert after["inferstack.io/config-sha256"] == before["inferstack.io/config-sha256"]
    # and the digest is readable on the template (a secret would hide the reason of the rollout in the preview)
    assert len(after["inferstack.io/keys-sha256"]) == 64 and "secret" not in after["inferstack.io/keys-sha256"]


def test_reordering_models_leaves_the_gateway_pods_alone(tmp_path: Path, plan_of: PlanOf) -> None:
    # GIVEN prod's gateway, whose config names each model's upstream, tier and alias
    before = gateway_objects(plan_of("prod"))

    # WHEN the operator lists the same models in another order
    def reverse(env: dict[str, Any]) -> None:
        env["models"].reverse()

    after = gateway_objects(plan_with(tmp_path, "prod", reverse))
    # THEN the gateway's config (and so its pods) is the same: the order of a mapping in it means nothing, and a
    # changed config digest would roll every gateway pod for no change at all
    assert len(plan_of("prod").environment.models) > 1, "one model: nothing was reordered"
    assert after["ConfigMap/gateway-config"]["data"] == before["ConfigMap/gateway-config"]["data"]
    assert _gateway_pod_annotations_of(after) == _gateway_pod_annotations_of(before)


def _gateway_pod_annotations_of(objects: dict[str, Any]) -> dict[str, str]:
    return dict(objects["Deployment/gateway"]["spec"]["template"]["metadata"]["annotations"])


def test_the_burst_key_is_limited_to_the_models_burst_tenant_lists() -> None:
    # GIVEN a hub whose burst tenant may use only llama-8b (sites kept off its 70B)
    from components.gateway.gateway import BURST_KEY_NAME, keys_file
    from components.specs import GatewaySpec

    spec = GatewaySpec(burst_tenant={"models": ["llama-8b"], "requests_per_minute": 60})  # type: ignore[arg-type]
    # WHEN its keys file is rendered with the issued key
    (entry,) = [k for k in yaml.safe_load(keys_file(spec, burst_key="sk-burst")) if k["name"] == BURST_KEY_NAME]
    # THEN the burst key's entry carries that list, which the gateway enforces per key (404 model_not_found)
    assert entry["models"] == ["llama-8b"] and entry["requests_per_minute"] == 60
    # AND without a list the key may use every alias, as before
    (entry,) = [k for k in yaml.safe_load(keys_file(GatewaySpec(), burst_key="sk-burst"))]
    assert "models" not in entry


def test_a_burst_tenant_model_the_hub_does_not_serve_is_refused_at_its_key() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["gateway"]["burstTenant"] = {"models": ["llama-8b", "llama-7b"]}

    (line,) = config_errors(edit, "prod")
    assert "gateway.burstTenant.models[1]: got 'llama-7b'; allowed: an alias this stack's gateway serves: " in line
    assert "fix: name one of them (did you mean 'llama-70b'?), or remove it" in line
