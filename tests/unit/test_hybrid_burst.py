"""Hybrid burst, the stack side: onprem bursts to prod, prod issues the key, residency stays local (issue 11 §2)."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import pulumi
import pytest
import yaml

from helpers import config_errors, raw_environment
from inferstack_cli import render
from inferstack_cli.mocks import PLACEHOLDER_HOST
from inferstack_cli.plan import MockEngine, Plan
from inferstack_gateway.config import ApiKeyConfig, check_residency_keys, parse_config
from stacks.environment import load_environment

PlanOf = Callable[[str], Plan]
GATEWAY_ENV = {"GATEWAY_REDIS_URL": "redis://cache:6379", "HUB_API_KEY": "k"}


def gateway_config(plan: Plan) -> dict[str, Any]:
    (text,) = [
        t
        for p, t in render.renders(plan.resources).items()
        if p.startswith("manifests/inferstack-gateway/") and yaml.safe_load(t)["metadata"]["name"] == "gateway-config"
    ]
    return yaml.safe_load(yaml.safe_load(text)["data"]["gateway.yaml"])


def environment(stack: str, edit: Callable[[dict[str, Any]], None] | None = None) -> Any:
    from stacks.environment import load_environment

    env = copy.deepcopy(raw_environment(stack))
    if edit:
        edit(env)
    return load_environment(env, f"stacks/Pulumi.{stack}.yaml")


def test_onprem_sends_overflow_to_the_prod_hub_as_a_remote_upstream_with_spillover(plan_of: PlanOf) -> None:
    # GIVEN the bundled onprem stack, whose hub is prod by StackReference, with gateway.burst thresholds
    # WHEN it is planned
    config = gateway_config(plan_of("onprem"))
    # THEN the hub is a remote upstream, and every local model's tier spills to it with hysteresis
    hub = config["upstreams"]["hub"]
    assert hub["kind"] == "remote" and hub["api_key"] == "${HUB_API_KEY}"
    for tier in ("llama-8b", "llama-70b"):
        assert config["tiers"][tier]["upstreams"] == [tier, "hub"]
        assert config["tiers"][tier]["spillover"] == {
            "spill_above_inflight": 64,
            "return_below_inflight": 32,
            "spill_above_ttft_ms": 2000,
            "return_below_ttft_ms": 1000,
        }
    assert all(u.get("kind", "local") == "local" for name, u in config["upstreams"].items() if name != "hub")
    parsed = parse_config(config, env=GATEWAY_ENV)  # the gateway's own schema accepts it
    assert parsed.tiers["llama-8b"].spillover is not None


def test_the_onprem_hub_resolves_offline_to_marked_placeholders(plan_of: PlanOf) -> None:
    # GIVEN onprem names its hub as organization/inferstack/prod
    plan = plan_of("onprem")
    # WHEN planned offline THEN the StackReference answers with marked placeholders, and the key stays secret
    (ref,) = plan.of_type("pulumi:pulumi:StackReference")
    assert ref.name == "hub"
    assert PLACEHOLDER_HOST in gateway_config(plan)["upstreams"]["hub"]["url"]
    assert "organization/inferstack/prod" in plan.outputs["hub_url"]
    (secret,) = [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.name == "gateway-hub"]
    assert secret.inputs["stringData"] == "[secret]"


def test_the_sensitive_tenant_is_residency_local_in_the_keys_file() -> None:
    # GIVEN the onprem stack's research-sensitive tenant, marked residency: local
    from components.gateway.gateway import keys_file

    env = environment("onprem")
    # WHEN its keys file is rendered
    keys = {k["tenant"]: k for k in yaml.safe_load(keys_file(env.gateway))}
    # THEN that tenant (only) carries residency: local, and the gateway accepts the keys with the config
    assert keys["research-sensitive"]["residency"] == "local"
    assert "residency" not in keys["research"]
    from components.gateway.gateway import gateway_config as render_config

    urls = {m.name: f"http://{m.name}:8000/v1" for m in env.models} | {"hub": "https://hub.example/v1"}
    from components.gateway.gateway import HubUpstream

    config = parse_config(
        render_config(env.gateway, list(env.models), urls, otlp_endpoint=None, hub=HubUpstream(url="u", api_key="k")),
        env=GATEWAY_ENV,
    )
    check_residency_keys(config, [ApiKeyConfig(**k) for k in keys.values()], "keys.yaml")


def test_a_residency_local_route_renders_to_the_gateway_model() -> None:
    # GIVEN the onprem route "chat" marked residency: local
    from components.gateway.gateway import HubUpstream
    from components.gateway.gateway import gateway_config as render_config

    env = environment("onprem", lambda e: e["gateway"]["routes"][0].update(residency="local"))
    urls = {m.name: f"http://{m.name}:8000/v1" for m in env.models} | {"hub": "https://hub.example/v1"}
    # WHEN the gateway config is rendered
    config = render_config(
        env.gateway, list(env.models), urls, otlp_endpoint=None, hub=HubUpstream(url="u", api_key="k")
    )
    # THEN models.chat.residency is local, and the other aliases are not
    assert config["models"]["chat"]["residency"] == "local"
    assert "residency" not in config["models"]["llama-8b"]


def test_a_dollar_in_a_user_written_url_reaches_the_gateway_unchanged() -> None:
    # GIVEN the onprem stack with a hub URL and an embeddings URL whose paths carry a '$' ('$' is a URL path character),
    # which the gateway's ${VAR} interpolation reads: '$$' as '$', ${VAR:-default} from the pod's environment
    from components.gateway.gateway import HubUpstream
    from components.gateway.gateway import gateway_config as render_config

    hub_url, embeddings_url = "https://hub.example/a$$b/v1", "http://embed.example/${HOME:-x}/v1"
    env = environment("onprem", lambda e: e["gateway"].update(embeddingsUrl=embeddings_url))
    urls = {m.name: f"http://{m.name}:8000/v1" for m in env.models} | {"hub": hub_url}
    # WHEN the gateway loads the rendered config in its pod (HOME set, as in any container)
    rendered = render_config(
        env.gateway, list(env.models), urls, otlp_endpoint=None, hub=HubUpstream(url=hub_url, api_key="k")
    )
    config = parse_config(rendered, env={**GATEWAY_ENV, "HOME": "/"})
    # THEN it dials the very URLs the stack file names
    assert config.upstreams["hub"].url == hub_url
    assert config.embeddings is not None and config.embeddings.url == embeddings_url


def test_prod_exports_its_burst_key_as_a_secret_and_registers_only_its_hash(plan_of: PlanOf) -> None:
    # GIVEN the prod stack (the hub of onprem)
    plan = plan_of("prod")
    # WHEN planned THEN a generated key is exported as a secret output, next to the gateway's URL
    assert plan.outputs["burst_api_key"] == "[secret]"
    assert plan.outputs["gateway_url"].endswith("/v1")
    (password,) = [
        r for r in plan.of_type("random:index/randomPassword:RandomPassword") if r.name == "gateway-burst-key"
    ]
    assert password.inputs["length"] >= 32
    (keys,) = [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.name == "gateway-keys"]
    assert keys.inputs["stringData"] == "[secret]"
    # AND the keys file the Secret carries lists the key's SHA-256 (never the key) as the burst tenant
    from components.gateway.gateway import keys_file

    key = "plan-example-burst-key"
    text = keys_file(environment("prod").gateway, key)
    entries = yaml.safe_load(text)
    burst = [k for k in entries if k["tenant"] == "burst"]
    assert burst == [{"tenant": "burst", "name": "burst", "key_sha256": hashlib.sha256(key.encode()).hexdigest()}]
    assert key not in text
    [ApiKeyConfig(**k) for k in entries]  # the gateway's schema accepts every entry


@pytest.mark.parametrize(("stack", "scheme"), [("prod", "https"), ("onprem", "http")])
def test_a_hubs_gateway_url_plans_as_a_marked_load_balancer_address(plan_of: PlanOf, stack: str, scheme: str) -> None:
    # GIVEN a hub stack whose gateway has an internal load balancer, whose address exists only once it is created
    # WHEN planned offline
    url = plan_of(stack).outputs["gateway_url"]
    # THEN gateway_url is a marked stand-in on the load balancer's listener (the cloud NLB's TLS on 443, the LAN's plain
    # port 80), never the in-cluster URL that no other stack can reach
    assert url.startswith(f"{scheme}://") and PLACEHOLDER_HOST in url and url.endswith("/v1")
    assert ".svc" not in url


@pytest.mark.parametrize(
    ("missing", "fix"),
    [
        ("burst_api_key", "gateway.burstTenant.enabled: true"),
        ("gateway_url", "gateway.enabled: true"),
    ],
)
def test_a_hub_stack_that_exports_no_burst_output_fails_with_one_clear_line(
    engine: MockEngine, monkeypatch: pytest.MonkeyPatch, missing: str, fix: str
) -> None:
    # GIVEN a hub stack that exports gateway_url but not burst_api_key (its gateway.burstTenant is off), or no
    # gateway_url at all (its gateway is off): Pulumi drops an output whose value is None
    from components.gateway.hub import HubReference, HubReferenceArgs
    from inferstack_cli import mocks

    exported, secret = mocks.stack_reference_outputs("organization/inferstack/prod")
    monkeypatch.setattr(
        mocks, "stack_reference_outputs", lambda stack: ({k: v for k, v in exported.items() if k != missing}, secret)
    )
    # WHEN the sending stack reads it
    ref = HubReference("hub", HubReferenceArgs(stack="organization/inferstack/prod"))
    value = ref.api_key if missing == "burst_api_key" else ref.gateway_url
    # THEN the update stops with one line that names the hub, the output and the fix there (a RunError: no traceback)
    with pytest.raises(pulumi.RunError) as caught:
        engine.resolve(value)
    (line,) = str(caught.value).splitlines()
    assert "hub.stack: got 'organization/inferstack/prod'" in line and f"exports no {missing}" in line
    assert fix in line and "hub.url + hub.apiKeySecret" in line


@pytest.mark.parametrize(
    "url", ["http://gateway.inferstack-gateway.svc/v1", "https://gateway.inferstack-gateway.svc.cluster.local/v1"]
)
@pytest.mark.parametrize("ca", [None, "hub-ca"])
def test_a_hub_stack_that_exports_its_in_cluster_url_fails_with_one_clear_line(
    engine: MockEngine, monkeypatch: pytest.MonkeyPatch, url: str, ca: str | None
) -> None:
    # GIVEN a hub stack whose gateway has no load balancer and no hubUrl: it exports its in-cluster URL, which in the
    # sending stack's cluster names that stack's own gateway (the same Service name and namespace); with or without a
    # CA for it (hub.caConfigMap), which an unreachable hub makes moot: its fix (remove the CA, or serve TLS there)
    # would only lead to this error
    from components.gateway.hub import HubReference, HubReferenceArgs
    from inferstack_cli import mocks

    exported, secret = mocks.stack_reference_outputs("organization/inferstack/prod")
    monkeypatch.setattr(mocks, "stack_reference_outputs", lambda stack: ({**exported, "gateway_url": url}, secret))
    # WHEN the sending stack reads it
    ref = HubReference("hub", HubReferenceArgs(stack="organization/inferstack/prod", ca_config_map=ca))
    # THEN the update stops with one line naming the hub, the URL and the setting to turn on there
    with pytest.raises(pulumi.RunError) as caught:
        engine.resolve(ref.gateway_url)
    (line,) = str(caught.value).splitlines()
    assert "hub.stack: got 'organization/inferstack/prod'" in line and url in line
    assert "gateway.loadBalancer: internal" in line and "gateway.hubUrl" in line


def test_a_ca_for_a_hub_that_exports_a_plain_http_url_fails_with_one_clear_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the edge site naming a CA for its hub's certificate (hub.caConfigMap), and its hub, the on-prem stack,
    # exporting its LAN load balancer's plain-HTTP URL (its gateway has no tlsSecret, as the bundled one)
    from helpers import plan_with
    from inferstack_cli import mocks

    exported, secret = mocks.stack_reference_outputs("organization/inferstack/onprem")
    url = "http://10.20.0.40/v1"
    monkeypatch.setattr(mocks, "stack_reference_outputs", lambda stack: ({**exported, "gateway_url": url}, secret))
    # WHEN the site's update runs
    with pytest.raises(pulumi.RunError) as caught:
        plan_with(tmp_path, "edge", lambda env: env["hub"].update(caConfigMap="hub-ca"))
    # THEN it stops with one line naming the key, the hub, its URL and the fix (a RunError: no traceback), where the
    # gateway's own config check failed inside the apply that renders its ConfigMap
    (line,) = str(caught.value).splitlines()
    assert line.startswith("inferstack:environment.hub.caConfigMap: got 'hub-ca'") and url in line
    assert "'organization/inferstack/onprem'" in line and "remove hub.caConfigMap" in line and "tlsSecret" in line


def test_the_onprem_stack_is_a_hub_too(plan_of: PlanOf) -> None:
    # GIVEN an edge site's hub is the onprem stack WHEN onprem is planned THEN it exports its burst key as a secret
    assert plan_of("onprem").outputs["burst_api_key"] == "[secret]"


def test_a_residency_local_tenant_on_a_route_that_only_has_a_remote_upstream() -> None:
    # GIVEN the edge stack, whose route "chat" sends complex prompts to the hub, WHEN its tenant is residency-local
    (line,) = config_errors(lambda env: env["gateway"]["apiKeys"][0].update(residency="local"), stack="edge")
    # THEN one line names the tenant, the route and the fix
    assert "gateway.apiKeys[0].residency" in line and "'store-ops'" in line and "'chat'" in line
    assert "only a remote upstream" in line


def test_a_residency_local_tenant_limited_to_local_aliases_is_accepted() -> None:
    # GIVEN the same tenant, limited to the local model alias WHEN loaded THEN no error
    env = environment("edge", lambda e: e["gateway"]["apiKeys"][0].update(residency="local", models=["llama-3b"]))
    assert env.gateway.api_keys[0].residency == "local"


def test_a_residency_local_route_to_the_hub_is_refused() -> None:
    (line,) = config_errors(lambda env: env["gateway"]["routes"][0].update(residency="local"), stack="edge")
    assert "gateway.routes[0].residency" in line and "large: hub" in line


def test_a_hub_without_a_key_is_refused_on_the_onprem_tier_too() -> None:
    (line,) = config_errors(lambda env: env.update(hub={"url": "https://gateway.prod.example.com/v1"}), stack="onprem")
    assert "hub.apiKeySecret" in line and "pulumi config set --secret" in line


def test_spillover_without_a_hub_is_refused() -> None:
    (line,) = config_errors(lambda env: env["gateway"].update(burst={"spillAboveInflight": 8}), stack="prod")
    assert "gateway.burst" in line and "without a hub" in line


def test_a_key_limited_to_an_alias_that_does_not_exist_is_refused() -> None:
    # GIVEN a tenant whose models list names no alias of the stack WHEN loaded THEN the gateway's own check says so
    (line,) = config_errors(lambda env: env["gateway"]["apiKeys"][0].update(models=["gpt-9"]), stack="onprem")
    assert "'gpt-9' is not defined" in line


def test_the_hub_url_can_name_the_certificates_private_dns_name(tmp_path: Any) -> None:
    # GIVEN prod with gateway.hubUrl set to the private name its ACM certificate covers
    from helpers import plan_with

    url = "https://gateway.prod.internal.example.com/v1"
    plan = plan_with(tmp_path, "prod", lambda env: env["gateway"].update(hubUrl=url))
    # WHEN planned THEN gateway_url is that URL (the sending side's TLS check matches the certificate)
    assert plan.outputs["gateway_url"] == url


@pytest.mark.parametrize(
    "url", ["http://gateway.prod.internal.example.com/v1", "https://gateway.prod.internal.example.com:8443/v1"]
)
def test_a_cloud_hub_url_off_the_nlbs_tls_listener_is_refused(url: str) -> None:
    # GIVEN prod, whose internal NLB listens only on 443 with TLS, WHEN gateway.hubUrl names another scheme or port
    (line,) = config_errors(lambda env: env["gateway"].update(hubUrl=url), stack="prod")
    # THEN one line names the key, the listener and the URL to write (the sending side would dial a closed port,
    # and over http:// its burst key would cross the link in clear)
    assert f"gateway.hubUrl: got {url!r}" in line and "443" in line
    assert "fix: write 'https://gateway.prod.internal.example.com/v1'" in line


def test_a_cloud_hub_url_on_an_ipv6_address_is_told_a_url_that_loads() -> None:
    # GIVEN prod's gateway.hubUrl naming the NLB's IPv6 address on a port the NLB does not listen on
    (line,) = config_errors(lambda env: env["gateway"].update(hubUrl="https://[fd00::1]:8443/v1"), stack="prod")
    # WHEN the fix is followed THEN the stack loads: the address keeps its brackets (https://fd00::1/v1 is no URL)
    fixed = line.split("; fix: write ", 1)[1].strip("'")
    assert fixed == "https://[fd00::1]/v1"
    raw = raw_environment("prod")
    raw["gateway"]["hubUrl"] = fixed
    assert load_environment(raw, "stacks/Pulumi.prod.yaml").gateway.hub_url == fixed


def test_a_hub_with_a_private_ca_is_trusted_by_that_ca_only(tmp_path: Any) -> None:
    # GIVEN the edge site, whose hub (onprem) serves a certificate of the site's private CA (gateway.tlsSecret there),
    # and a ConfigMap holding that CA's bundle under trust-manager's key
    from helpers import plan_with

    def edit(env: dict[str, Any]) -> None:
        env["hub"].update(caConfigMap="onprem-hub-ca", caKey="trust-bundle.pem")

    plan = plan_with(tmp_path, "edge", edit)
    # WHEN planned THEN the hub upstream's ca_file is where the gateway pod mounts that key, read-only
    from components.gateway.gateway import HUB_CA_FILE

    config = gateway_config(plan)
    assert config["upstreams"]["hub"]["ca_file"] == HUB_CA_FILE
    assert config["upstreams"]["hub"]["url"].startswith("https://")  # the placeholder is an https hub
    (deployment,) = [r for r in plan.of_type("kubernetes:apps/v1:Deployment") if r.name == "gateway"]
    pod = deployment.inputs["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "hub-ca"]
    assert volume["configMap"] == {"name": "onprem-hub-ca", "items": [{"key": "trust-bundle.pem", "path": "ca.crt"}]}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "hub-ca"]
    assert f"{mount['mountPath']}/ca.crt" == HUB_CA_FILE and mount["readOnly"] is True
    # AND the gateway's own schema accepts the rendered config
    parsed = parse_config(config, env=GATEWAY_ENV)
    assert parsed.upstreams["hub"].ca_file == HUB_CA_FILE


def test_without_a_private_ca_the_hub_is_verified_against_the_system_store(plan_of: PlanOf) -> None:
    config = gateway_config(plan_of("edge"))
    assert "ca_file" not in config["upstreams"]["hub"]
    (deployment,) = [r for r in plan_of("edge").of_type("kubernetes:apps/v1:Deployment") if r.name == "gateway"]
    assert all(v["name"] != "hub-ca" for v in deployment.inputs["spec"]["template"]["spec"]["volumes"])


def test_a_private_ca_for_a_plain_http_hub_is_refused() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["hub"] = {"url": "http://gateway.dc1.example.com/v1", "apiKeySecret": "hubApiKey", "caConfigMap": "hub-ca"}

    (line,) = config_errors(edit, stack="onprem")
    assert "hub" in line and "caConfigMap" in line and "https://" in line


@pytest.mark.parametrize("stack", ["edge", "onprem"])
@pytest.mark.parametrize("blank", ["   ", "\t"])
def test_a_hub_model_of_only_whitespace_is_refused(stack: str, blank: str) -> None:
    # GIVEN hub.model of whitespace alone: empty means "the client's alias", but this was sent to the hub as the name
    (line,) = config_errors(lambda e: e["hub"].update(model=blank), stack=stack)
    # THEN one line at hub.model says so, and the fix is to remove the key or name the hub's model
    assert f"inferstack:environment.hub.model: got {blank!r} (only whitespace)" in line
    assert "fix: remove hub.model to send the client's alias, or name the hub's model" in line


def test_a_hub_model_with_whitespace_around_it_is_told_the_name_to_write() -> None:
    (line,) = config_errors(lambda e: e["hub"].update(model=" llama-70b "), stack="onprem")
    assert "hub.model: got ' llama-70b ' (whitespace around the name, which the gateway sends as it is)" in line
    assert "fix: write 'llama-70b'" in line


@pytest.mark.parametrize("model", ["", "llama-70b"])
def test_a_hub_model_empty_or_named_is_taken(model: str) -> None:
    env = raw_environment("onprem")
    env["hub"] = {**env["hub"], "model": model}
    assert load_environment(env, "stacks/Pulumi.onprem.yaml").hub.model == model  # type: ignore[union-attr]


def test_a_model_named_hub_on_a_stack_with_a_hub_is_refused() -> None:
    # GIVEN the onprem stack, which names a hub, with a local model named "hub" (no spillover, and its residency-local
    # tenant kept to another alias: nothing else in the gateway's own checks trips on the name)
    def edit(env: dict[str, Any]) -> None:
        env["models"][2]["name"] = "hub"
        del env["gateway"]["burst"]
        env["gateway"]["apiKeys"][1]["models"] = ["llama-70b"]

    # WHEN loaded THEN one line names the model's key: the gateway's upstream and tier "hub" are the stack's hub, so the
    # local model's requests would silently go to the hub instead
    (line,) = config_errors(edit, stack="onprem")
    assert "models[2].name" in line and "'hub'" in line and "rename" in line


@pytest.mark.parametrize("stack", ["edge", "onprem"])
def test_a_hub_url_naming_a_service_in_this_cluster_is_refused(stack: str) -> None:
    # GIVEN a sending stack whose hub.url is the kit gateway's in-cluster name: in this cluster it is this stack's own
    # gateway, so overflow and fallback would go back to it (hub.stack refuses such an exported URL at `pulumi up`)
    def edit(env: dict[str, Any]) -> None:
        env["hub"] = {"url": "http://gateway.inferstack-gateway.svc.cluster.local/v1", "apiKeySecret": "hubApiKey"}

    # WHEN loaded THEN one line names hub.url and the URL to write instead
    (line,) = config_errors(edit, stack=stack)
    assert "inferstack:environment.hub.url: got 'http://gateway.inferstack-gateway.svc.cluster.local/v1'" in line
    assert "fix: write the hub's load balancer URL (its gateway_url output), or name the hub by hub.stack" in line
