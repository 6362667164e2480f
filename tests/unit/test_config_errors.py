"""One test per config error class: the message names file, key path, value, what is allowed, and the fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, config_errors, plan_cli, raw_environment, refused_by_plan
from stacks.environment import load_environment

SOURCE = "stacks/Pulumi.prod.yaml"


def test_unknown_key_is_reported_with_a_did_you_mean() -> None:
    lines = config_errors(lambda e: e["network"].update(natGateway="single"))
    assert lines == [
        f"{SOURCE}: inferstack:environment.network.natGateway: got unknown key 'natGateway'; "
        "allowed: cidr, availabilityZones, natGateways; fix: remove the key, or rename it (did you mean 'natGateways'?)"
    ]


def test_wrong_value_type_names_the_expected_type() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][0].update(maxSize="four"))
    assert "inferstack:environment.gpuPools[0].maxSize: got 'four'; allowed: a whole number" in line


def test_unknown_instance_type_lists_the_catalog_and_suggests_the_closest() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][0].update(instanceType="p5.49xlarge"))
    assert "gpuPools[0].instanceType: got 'p5.49xlarge'" in line
    assert "p5en.48xlarge" in line and "g6e.xlarge" in line
    assert "did you mean 'p5.48xlarge'?" in line


def test_efa_on_an_instance_type_without_efa() -> None:
    def edit(e: dict[str, Any]) -> None:
        e["gpuPools"][0].update(instanceType="g6e.xlarge", efa=True)
        e["models"][0]["slo"] = {"itlP99Ms": 60}  # one L40S meets no 20 ms ITL at a full batch

    (line,) = config_errors(edit)
    assert "gpuPools[0].efa: got true for g6e.xlarge (no EFA interfaces)" in line
    assert "efa: true only on p5.48xlarge" in line
    assert "fix: remove `efa`" in line


def test_pool_zone_outside_the_network() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][1].update(zone="us-east-1f"))
    assert (
        "gpuPools[1].zone: got 'us-east-1f'; "
        "allowed: one of network.availabilityZones: us-east-1a, us-east-1b, us-east-1c" in line
    )


def test_min_greater_than_max() -> None:
    # A managed group: a Karpenter pool refuses any minSize above 0 on its own
    (line,) = config_errors(lambda e: e["gpuPools"][0].update(provisioner="managed", minSize=5, maxSize=4))
    assert (
        "gpuPools[0].minSize: got 5 (maxSize is 4); "
        "allowed: 0 ≤ minSize ≤ maxSize (4); fix: lower minSize or raise maxSize" in line
    )


def test_min_greater_than_max_on_a_karpenter_pool_is_one_line() -> None:
    # GIVEN prod's first pool (Karpenter, no Capacity Block) asked to keep 5 nodes of at most 4
    def edit(e: dict[str, Any]) -> None:
        e["gpuPools"][0].update(provisioner="karpenter", capacity={"type": "on-demand"}, minSize=5, maxSize=4)

    # WHEN it is validated THEN minSize is reported once, by the Karpenter rule, whose fix (no minSize) also brings
    # it under maxSize; the managed alternative says the bounds it would then need
    (line,) = config_errors(edit)
    assert "gpuPools[0].minSize: got 5 on a Karpenter pool" in line
    assert "or set provisioner: managed for a fixed node count with minSize ≤ maxSize" in line


def test_desired_size_above_max_on_a_karpenter_pool_is_one_line() -> None:
    def edit(e: dict[str, Any]) -> None:
        e["gpuPools"][0].update(provisioner="karpenter", capacity={"type": "on-demand"}, desiredSize=6, maxSize=4)

    (line,) = config_errors(edit)
    assert "gpuPools[0].desiredSize: got 6 on a Karpenter pool" in line
    assert "provisioner: managed for a fixed node count with minSize ≤ desiredSize ≤ maxSize" in line


@pytest.mark.parametrize(
    ("section", "edit"),
    [
        ("systemPool", lambda e: e["systemPool"].update(minSize=5, maxSize=4, desiredSize=4)),
        ("gpuPools[0]", lambda e: e["gpuPools"][0].update(provisioner="managed", minSize=5, maxSize=4, desiredSize=4)),
    ],
    ids=["systemPool", "managed-gpu-pool"],
)
def test_min_greater_than_max_with_a_desired_size_is_one_line(section: str, edit: Any) -> None:
    # GIVEN minSize above maxSize, and a desiredSize (no desiredSize lies between such bounds)
    # WHEN it is validated THEN one line at minSize, whose fix places both bounds around desiredSize
    (line,) = config_errors(edit)
    assert f"inferstack:environment.{section}.minSize: got 5 (maxSize is 4, desiredSize 4)" in line
    assert "fix: lower minSize or raise maxSize so that minSize ≤ desiredSize (4) ≤ maxSize" in line


def test_a_system_pool_desired_size_below_its_floor_is_its_own_line() -> None:
    # GIVEN minSize above maxSize and a desiredSize of 0, which no bounds of a system pool (at least 1) admit
    lines = config_errors(lambda e: e["systemPool"].update(minSize=5, maxSize=4, desiredSize=0))
    # THEN two problems, two lines: the bounds, and desiredSize below the floor
    assert [line.split(": got")[0].rsplit(".", 1)[1] for line in lines] == ["minSize", "desiredSize"]
    assert "systemPool.desiredSize: got 0; allowed: at least 1, between minSize and maxSize" in lines[1]


def test_capacity_block_without_a_reservation_id() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][1]["capacity"].pop("reservationId"))
    assert "gpuPools[1].capacity.reservationId: got nothing (capacity.type is 'capacity-block')" in line
    assert "add `reservationId: cr-…`" in line


def test_unknown_tier() -> None:
    (line,) = config_errors(lambda e: e.update(tier="clod"))
    assert line == (
        f"{SOURCE}: inferstack:environment.tier: got 'clod'; allowed: cloud, onprem, edge; "
        "fix: set `tier:` to the tier this stack deploys (did you mean 'cloud'?)"
    )


def test_every_problem_gets_its_own_line() -> None:
    def edit(e: dict[str, Any]) -> None:
        e["gpuPools"][0].update(instanceType="p5.49xlarge")
        e["gpuPools"][1].update(zone="eu-west-1a")
        e["systemPool"]["maxSize"] = "six"

    lines = config_errors(edit)
    assert len(lines) == 2, "structural errors first: the zone check runs once the structure is valid"
    assert any(".instanceType:" in line for line in lines) and any(".systemPool.maxSize:" in line for line in lines)


def test_public_endpoint_open_to_the_world_is_refused() -> None:
    (line,) = config_errors(lambda e: e.setdefault("cluster", {}).update(endpointPublicAccessCidrs=["0.0.0.0/0"]))
    assert "cluster.endpointPublicAccessCidrs" in line and "0.0.0.0/0 opens the Kubernetes API" in line


def test_plan_exits_2_with_one_line_per_problem_and_no_traceback(tmp_path: Path) -> None:
    # GIVEN a stack file with two mistakes
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    env = document["config"]["inferstack:environment"]
    env["gpuPools"][0]["instanceType"] = "p5.49xlarge"
    env["network"]["cidrr"] = "10.0.0.0/16"
    (tmp_path / "Pulumi.broken.yaml").write_text(yaml.safe_dump(document))
    # WHEN inferstack plan runs on it
    result = plan_cli(tmp_path, "broken")
    # THEN it exits 2, prints exactly one line per problem, and no traceback
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"{tmp_path}/Pulumi.broken.yaml: inferstack:environment.") for line in lines)
    assert "Traceback" not in result.stderr + result.stdout


def test_invalid_yaml_is_one_line_naming_the_position(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  inferstack:environment:\n    tier: cloud\n   region: x\n")
    result = plan_cli(tmp_path, "bad")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{tmp_path}/Pulumi.bad.yaml: line 4, column 4: got invalid YAML")


def test_a_stack_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.latin.yaml").write_bytes(
        "config:\n  inferstack:environment:\n    tier: caf\xe9\n".encode("latin-1")
    )
    result = plan_cli(tmp_path, "latin")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{tmp_path}/Pulumi.latin.yaml: line 3: got text that is not UTF-8;")
    assert line.endswith("allowed: a UTF-8 YAML file; fix: save it as UTF-8")


def test_a_directory_named_like_a_stack_file_is_not_offered_as_a_stack(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.ghost.yaml").mkdir()
    (tmp_path / "Pulumi.real.yaml").write_text("config: {}\n")
    result = plan_cli(tmp_path, "ghost")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--stack: got 'ghost'; allowed: real;" in line


# --- issue 12: new keys ------------------------------------------------------------------------------------------


def test_ami_release_is_required() -> None:
    (line,) = config_errors(lambda e: e["cluster"].pop("amiReleaseVersion"))
    assert "cluster.amiReleaseVersion: got nothing" in line
    assert "e.g. '1.33.5-20251120'" in line and "aws ssm get-parameter" in line


def test_ami_release_of_another_kubernetes_version() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(amiReleaseVersion="1.32.9-20251120"))
    assert "cluster.amiReleaseVersion: got '1.32.9-20251120' (kubernetesVersion is '1.33')" in line


def test_ami_release_in_the_wrong_format() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(amiReleaseVersion="v20251120"))
    assert "cluster.amiReleaseVersion: got 'v20251120'" in line


def test_kubernetes_version_without_pinned_addons() -> None:
    lines = config_errors(lambda e: e["cluster"].update(kubernetesVersion="1.29", amiReleaseVersion="1.29.9-20251120"))
    (line,) = [x for x in lines if ".cluster.kubernetesVersion" in x]
    assert "got '1.29'; allowed: a version with pinned EKS add-ons: 1.33" in line


def test_deployer_network_may_not_be_the_internet() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(deployerCidrs=["0.0.0.0/0"]))
    assert "cluster.deployerCidrs" in line and "0.0.0.0/0" in line


def test_deployer_security_group_id_format() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(deployerSecurityGroupIds=["my-runners"]))
    assert "cluster.deployerSecurityGroupIds[0]: got 'my-runners'" in line


def test_admin_role_must_be_a_role_arn() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(adminRoleArns=["arn:aws:iam::111122223333:user/alice"]))
    assert "cluster.adminRoleArns[0]: got 'arn:aws:iam::111122223333:user/alice'" in line


def test_load_balancer_needs_a_certificate() -> None:
    (line,) = config_errors(lambda e: e["gateway"].pop("tlsCertificateArn"))
    assert "gateway.tlsCertificateArn: got nothing (loadBalancer is 'internal')" in line
    assert "set loadBalancer: none" in line


def test_certificate_from_another_region() -> None:
    arn = "arn:aws:acm:eu-west-1:111122223333:certificate/00000000-0000-4000-8000-000000000000"
    (line,) = config_errors(lambda e: e["gateway"].update(tlsCertificateArn=arn))
    assert f"gateway.tlsCertificateArn: got {arn!r}" in line and "us-east-1" in line


def test_certificate_arn_format() -> None:
    (line,) = config_errors(lambda e: e["gateway"].update(tlsCertificateArn="my-cert"))
    assert "gateway.tlsCertificateArn: got 'my-cert'" in line


def test_capacity_block_needs_karpenter() -> None:
    (line,) = config_errors(
        lambda e: e["gpuPools"][1].update(
            provisioner="managed",
            minSize=2,
            maxSize=2,
            capacity={"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718"},
        )
    )
    assert "gpuPools[1].provisioner: got 'managed' with capacity.type 'capacity-block'" in line
    assert "fix: set `provisioner: karpenter`" in line


def test_on_demand_fallback_needs_a_reservation() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][0].update(capacity={"onDemandFallback": True}))
    assert "gpuPools[0].capacity.onDemandFallback: got true with capacity.type 'on-demand'" in line


# --- fuzz audit: tracebacks and values that deployed, then broke ---------------------------------------------------


def test_more_than_three_zones_is_refused_before_the_subnet_layout_runs_out() -> None:
    zones = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    (line,) = config_errors(lambda e: e["network"].update(availabilityZones=zones))
    assert "network.availabilityZones: got " in line and "(4 zones)" in line
    assert "allowed: 2 to 3 distinct zones" in line and "fix: list two or three different zones" in line


def test_a_zone_listed_twice_is_refused() -> None:
    (line,) = config_errors(lambda e: e["network"].update(availabilityZones=["us-east-1a", "us-east-1a"]), stack="dev")
    assert "network.availabilityZones: got " in line and "('us-east-1a' listed twice)" in line


@pytest.mark.parametrize(
    ("repos", "problem"),
    [
        (["gateway"], "'model-loader' missing"),
        ([], "'gateway' missing"),
        (["gateway", "model-loader", "gateway"], "'gateway' listed twice"),
    ],
)
def test_image_repositories_keep_the_kits_images_once_each(repos: list[str], problem: str) -> None:
    (line,) = config_errors(lambda e: e.setdefault("modelStore", {}).update(imageRepositories=repos))
    assert f"modelStore.imageRepositories: got {json.dumps(repos)} ({problem})" in line
    assert "fix: list each repository once and keep gateway and model-loader" in line


@pytest.mark.parametrize("key", ["deployerCidrs", "endpointPublicAccessCidrs"])
def test_the_internet_in_two_halves_is_refused_like_0_0_0_0_slash_0(key: str) -> None:
    (line,) = config_errors(lambda e: e["cluster"].update({key: ["0.0.0.0/1", "128.0.0.0/1"]}))
    assert f"cluster.{key}: got " in line and "(0.0.0.0/1 " in line and "the internet" in line
    assert "/8 or longer" in line and "fix: list only the networks that run `pulumi up` or kubectl" in line


def test_a_private_slash_8_deployer_network_is_accepted() -> None:
    env = copy.deepcopy(raw_environment("prod"))
    env["cluster"]["deployerCidrs"] = ["10.0.0.0/8"]
    assert str(load_environment(env, SOURCE).cluster.deployer_cidrs[0]) == "10.0.0.0/8"  # type: ignore[union-attr]


def test_a_number_is_not_read_as_a_host_address() -> None:
    (line,) = config_errors(lambda e: e["cluster"].update(deployerCidrs=[123]))
    assert "cluster.deployerCidrs[0]: got 123 (not a CIDR string)" in line
    assert "fix: write the network address with its prefix length" in line


def test_system_pool_desired_size_beyond_max() -> None:
    (line,) = config_errors(lambda e: e["systemPool"].update(desiredSize=50))
    assert "systemPool.desiredSize: got 50; allowed: between minSize (3) and maxSize (6)" in line
    assert "fix: set desiredSize inside the bounds" in line


def test_gateway_replicas_beyond_max_replicas() -> None:
    (line,) = config_errors(lambda e: e["gateway"].update(replicas=50))
    assert "gateway.replicas: got 50 (maxReplicas is " in line and "fix: lower replicas or raise maxReplicas" in line


def test_one_key_hash_for_two_tenants_is_refused() -> None:
    (line,) = config_errors(lambda e: e["gateway"]["apiKeys"].append(dict(e["gateway"]["apiKeys"][0], tenant="other")))
    assert (
        "gateway.apiKeys[1].keySha256: got the hash of apiKeys[0] (tenant 'team-a') again, for tenant 'other'" in line
    )
    assert "fix: issue this tenant its own key" in line


def test_the_burst_tenant_may_not_be_a_local_tenant() -> None:
    (line,) = config_errors(lambda e: e["gateway"].update(burstTenant={"tenant": "team-a"}))
    assert "gateway.burstTenant.tenant: got 'team-a', also the tenant of apiKeys[0]" in line
    assert "fix: rename burstTenant.tenant" in line


def test_a_disabled_burst_tenant_may_share_a_name() -> None:
    env = copy.deepcopy(raw_environment("prod"))
    env["gateway"]["burstTenant"] = {"tenant": "team-a", "enabled": False}
    # WHEN loaded THEN it is accepted, still named and still off (not dropped to let the name through)
    burst = load_environment(env, SOURCE).gateway.burst_tenant
    assert (burst.tenant, burst.enabled) == ("team-a", False)


def test_a_route_alias_used_twice_is_refused() -> None:
    (line,) = config_errors(lambda e: e["gateway"]["routes"].append(dict(e["gateway"]["routes"][0])))
    assert "gateway.routes[1].alias: got 'chat', also routes[0].alias" in line
    assert "fix: rename one route, or merge the two" in line


@pytest.mark.parametrize("keyword", ["", "  "])
def test_a_blank_keyword_would_send_every_prompt_to_large(keyword: str) -> None:
    (line,) = config_errors(lambda e: e["gateway"]["routes"][0].update(largeIfKeywords=["prove", keyword]))
    assert "gateway.routes[0].largeIfKeywords: got " in line and "(item 1 is blank: it matches every prompt)" in line
    assert "fix: remove the blank keyword" in line


# --- messages: words, not regexes or pydantic's wording -------------------------------------------------------------


def test_a_pattern_error_says_what_the_pattern_allows_and_gives_an_example() -> None:
    (line,) = config_errors(lambda e: e["models"][0].update(name="Llama_3B"))
    assert line.endswith(
        "models[0].name: got 'Llama_3B'; allowed: a DNS label: lowercase letters, digits and '-', starting with a "
        "letter, ending with a letter or digit, at most 32 characters; fix: e.g. llama-3b"
    )


@pytest.mark.parametrize(
    ("edit", "allowed"),
    [
        (lambda e: e.update(region="US"), "an AWS region"),
        (lambda e: e["cluster"].update(adminRoleArns=["arn:aws:iam::123:role/x"]), "an IAM role ARN"),
        (lambda e: e["gateway"].update(tlsCertificateArn="not-an-arn"), "an ACM certificate ARN"),
        (lambda e: e["gateway"]["apiKeys"][0].update(keySha256="abc"), "the key's SHA-256"),
    ],
)
def test_no_pattern_error_prints_a_regex(edit: Any, allowed: str) -> None:
    (line,) = config_errors(edit)
    assert f"allowed: {allowed}" in line and "^" not in line and "see the README" not in line


def test_every_described_pattern_names_an_example_or_a_command() -> None:
    from components.specs import PATTERN_HELP

    assert all(allowed and fix for allowed, fix in PATTERN_HELP.values())


def test_a_list_too_short_is_said_in_words() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"].clear())
    assert line.endswith("gpuPools: got []; allowed: at least 1 item; fix: add items")


def test_a_number_that_is_text_names_the_type() -> None:
    (line,) = config_errors(lambda e: e["models"][0]["slo"].update(ttftP99Ms="fast"))
    assert "slo.ttftP99Ms: got 'fast'; allowed: a number; fix: write it without quotes" in line


def test_a_speculative_config_error_names_the_key_without_pydantics_url() -> None:
    (line,) = config_errors(
        lambda e: e["models"][0].update(speculative={"method": "ngram", "numSpeculativeTokens": -3})
    )
    assert (
        "models[0].speculative: got " in line and "(numSpeculativeTokens should be greater than or equal to 1)" in line
    )
    assert "errors.pydantic.dev" not in line and "Input should" not in line


@pytest.mark.parametrize(
    ("speculative", "said", "fix"),
    [
        (
            {"method": "ngram", "numSpeculativeTokens": 3},
            "speculative method 'ngram' needs `promptLookupMax`",
            "add `promptLookupMax: 4` (and optionally `promptLookupMin`)",
        ),
        (
            {"method": "eagle3", "numSpeculativeTokens": 3, "model": "a/b", "promptLookupMax": 4},
            "`promptLookupMax`/`promptLookupMin` with method 'eagle3'",
            "remove promptLookupMax/promptLookupMin, or use method ngram",
        ),
    ],
)
def test_ngram_lookup_keys_are_named_as_the_stack_file_writes_them(speculative: dict, said: str, fix: str) -> None:
    # GIVEN ngram without its lookup length, or lookup lengths on another method
    (line,) = config_errors(lambda e: e["models"][0].update(speculative=speculative))
    # THEN the line names the camelCase key the user wrote, with its own fix (not snake_case, not "see vLLM's docs")
    assert said in line and line.endswith(f"; fix: {fix}")
    assert "prompt_lookup" not in line


def test_a_speculative_draft_named_by_a_node_path_is_refused_with_the_fix() -> None:
    # GIVEN an EAGLE-3 draft named by a path on the node, which nothing fetches (vLLM would exit at start)
    (line,) = config_errors(
        lambda e: e["models"][0].update(
            speculative={"method": "eagle3", "numSpeculativeTokens": 3, "model": "/mnt/models/eagle3"}
        )
    )
    # THEN the plan refuses it, naming the key and how to name the draft
    assert "models[0].speculative: got " in line
    assert "'/mnt/models/eagle3' is not a Hugging Face id: name the draft as org/name" in line
    assert "Traceback" not in line
    # AND its allowed and fix say how to name the draft and where it must be, not "see vLLM's docs" (nor list mtp)
    allowed, fix = line.split("; allowed: ", 1)[1].split("; fix: ", 1)
    assert "org/name" in allowed and "mtp" not in allowed
    assert fix == "write the draft's org/name and put its checkpoint in the model store under <org/name>/hf/"


@pytest.mark.parametrize(
    ("speculative", "fix"),
    [
        ({"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 4, "model": "org/draft"}, "remove `model`"),
        ({"method": "eagle3", "numSpeculativeTokens": 3}, "set `model` to the draft's id, or use method ngram"),
    ],
)
def test_a_speculative_draft_missing_or_not_taken_is_told_its_own_fix(speculative: dict[str, Any], fix: str) -> None:
    # GIVEN a method that takes no draft given one, or one that needs a draft given none
    (line,) = config_errors(lambda e: e["models"][0].update(speculative=speculative))
    # WHEN / THEN the line's fix is the change to make
    assert "models[0].speculative: got " in line and line.endswith(f"; fix: {fix}")


def test_mtp_speculation_on_a_model_without_mtp_layers_is_refused() -> None:
    # GIVEN prod's Llama 3.1 8B on vLLM asked to draft with its own multi-token-prediction layers, which it has not:
    # vLLM takes the target as its own drafter only for DeepSeek-V3, MiMo, ERNIE 4.5 MoE and Qwen3-Next, and else
    # exits at start ("num_speculative_tokens was provided but without speculative model")
    (line,) = config_errors(lambda e: e["models"][0].update(speculative={"method": "mtp", "numSpeculativeTokens": 1}))
    # THEN the plan refuses it, with the methods a catalog model can run
    assert "models[0].speculative.method: got 'mtp' on meta-llama/Llama-3.1-8B-Instruct" in line
    assert "fix: use method eagle3 with a draft head (`model`), or ngram" in line


@pytest.mark.parametrize("draft", ["meta-llama/Llama-3.2-1B-Instruct", "org/not-in-the-catalog"])
def test_draft_model_speculation_is_refused_on_the_pinned_vllm(draft: str) -> None:
    # GIVEN prod's Llama 3.1 8B drafting with a separate draft model: the pinned vLLM v0.11.0 has no proposer for one
    # and exits at start ("Speculative decoding with draft model is not supported yet", vllm/config/speculative.py)
    (line,) = config_errors(
        lambda e: e["models"][0].update(
            speculative={"method": "draft_model", "numSpeculativeTokens": 4, "model": draft}
        )
    )
    # THEN the plan refuses it in one line at the method, naming the draft, the pinned version and what runs instead
    assert f"models[0].speculative.method: got 'draft_model' (draft {draft}), which the pinned vLLM v0.11.0" in line
    assert "allowed: eagle3 or eagle with a draft head (`model`), or ngram" in line
    assert "fix: use method eagle3 with an EAGLE-3 head trained for the target" in line


def test_eagle3_and_ngram_speculation_still_plan() -> None:
    # GIVEN the methods the pinned vLLM runs: an EAGLE-3 head (not a catalog model) and ngram
    for speculative in (
        {"method": "eagle3", "numSpeculativeTokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 4},
    ):
        env = copy.deepcopy(raw_environment("prod"))
        env["models"][0]["speculative"] = speculative
        # THEN it plans, with the method the user wrote
        loaded = load_environment(env, "stacks/Pulumi.prod.yaml")
        assert loaded.models[0].speculative.method == speculative["method"]


@pytest.mark.parametrize(
    ("text", "path", "got"),
    [
        ("- a\n- b\n", "(top level)", "got a list, not a mapping"),
        ("hello\n", "(top level)", "got the string 'hello', not a mapping"),
        ("config: [1, 2]\n", "config", "got a list, not a mapping"),
    ],
)
def test_a_stack_file_of_the_wrong_shape_says_what_it_got(tmp_path: Path, text: str, path: str, got: str) -> None:
    (tmp_path / "Pulumi.odd.yaml").write_text(text)
    result = plan_cli(tmp_path, "odd")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{tmp_path}/Pulumi.odd.yaml: {path}: {got}; allowed: a mapping")


def test_a_traces_endpoint_that_is_not_an_otlp_endpoint_is_refused() -> None:
    (line,) = config_errors(lambda env: env.setdefault("observability", {}).update(tracesEndpoint="not a url"))
    assert "observability.tracesEndpoint" in line and "host:port" in line


def test_an_otlp_endpoint_with_or_without_a_scheme_is_accepted() -> None:
    for endpoint in ("tempo-distributor.tracing:4317", "https://otlp.vendor.example:443"):
        env = copy.deepcopy(raw_environment("prod"))
        env.setdefault("observability", {})["tracesEndpoint"] = endpoint
        assert load_environment(env, "stacks/Pulumi.prod.yaml").observability.traces_endpoint == endpoint


def test_a_retention_size_that_the_volume_cannot_hold_is_refused() -> None:
    # Prometheus deletes by size only past retentionSize: at or above the volume it fills the disk first
    (line,) = config_errors(
        lambda env: env.setdefault("observability", {}).update(retentionSizeGib=100, storageGib=100)
    )
    assert "inferstack:environment.observability" in line and "retentionSizeGib" in line and "about 80" in line


@pytest.mark.parametrize(("tags", "what"), [({"aws:team": "a"}, "tag key 'aws:team'"), ({"team": "a\tb"}, "value")])
def test_tags_aws_would_refuse_are_refused(tags: dict[str, str], what: str) -> None:
    (line,) = config_errors(lambda env: env.update(tags=tags))
    assert "inferstack:environment.tags" in line and what in line


# --- fuzz audit 2: values `inferstack plan` accepted and `pulumi up` would not (each through the CLI) ---------------


def test_a_system_pool_instance_type_typo_is_refused_with_a_did_you_mean(tmp_path: Path) -> None:
    line = refused_by_plan(tmp_path, "prod", lambda e: e["systemPool"].update(instanceType="m7i.2xlarg"))
    assert "systemPool.instanceType: got 'm7i.2xlarg' (not in the system catalog)" in line
    assert "allowed: an x86_64 CPU type" in line and "fix: use a catalog type (did you mean 'm7i.2xlarge'?)" in line


@pytest.mark.parametrize(
    ("instance_type", "problem"),
    [
        ("p5.48xlarge", "(a GPU instance type: GPU nodes are gpuPools[])"),
        ("m7g.2xlarge", "(not in the system catalog)"),
    ],
)
def test_a_gpu_or_arm64_type_is_no_system_node(tmp_path: Path, instance_type: str, problem: str) -> None:
    # GIVEN a type the system nodes' AL2023_x86_64_STANDARD AMI cannot boot (Graviton) or should not (a GPU box)
    line = refused_by_plan(tmp_path, "dev", lambda e: e["systemPool"].update(instanceType=instance_type))
    assert f"systemPool.instanceType: got {instance_type!r} {problem}" in line


def test_the_bundled_and_default_system_types_are_in_the_system_catalog() -> None:
    from components.catalog.instances import SYSTEM_INSTANCES
    from components.specs import SystemPoolSpec

    used = {raw_environment(s).get("systemPool", {}).get("instanceType") for s in ("prod", "dev")}
    assert used | {SystemPoolSpec().instance_type} <= set(SYSTEM_INSTANCES)


@pytest.mark.parametrize("node_type", ["cache.r7g.larg", "r7g.large", "cache.r7g", "cache.r7g.Large"])
def test_an_elasticache_node_type_of_the_wrong_form_is_refused(tmp_path: Path, node_type: str) -> None:
    line = refused_by_plan(tmp_path, "prod", lambda e: e["cache"].update(nodeType=node_type))
    assert f"cache.nodeType: got {node_type!r}; allowed: an ElastiCache node type: cache.<family>.<size>" in line
    assert "fix: e.g. cache.r7g.large" in line


@pytest.mark.parametrize(
    "node_type",
    [
        "cache.r7g.large",
        "cache.t4g.micro",
        "cache.t3.small",
        "cache.m7g.xlarge",
        "cache.r6gd.16xlarge",
        "cache.c7gn.large",
    ],
)
def test_elasticache_node_types_aws_sells_pass_the_form_check(node_type: str) -> None:
    env = copy.deepcopy(raw_environment("prod"))
    env["cache"]["nodeType"] = node_type
    assert load_environment(env, SOURCE).cache.node_type == node_type


@pytest.mark.parametrize(
    ("cidr", "problem", "fix"),
    [
        ("8.8.0.0/16", "(not in a private RFC 1918 range", "use a private range no other network you reach uses"),
        ("100.64.0.0/16", "(not in a private RFC 1918 range", "use a private range"),
        ("10.0.0.0/12", "(wider than a VPC may be: AWS refuses it)", "use a /16"),
        ("10.0.0.0/22", "", "use a larger CIDR"),
    ],
)
def test_a_vpc_cidr_must_be_a_private_slash_16_to_20(tmp_path: Path, cidr: str, problem: str, fix: str) -> None:
    line = refused_by_plan(tmp_path, "prod", lambda e: e["network"].update(cidr=cidr))
    assert f"network.cidr: got {cidr} {problem}".rstrip() in line
    assert "allowed: a /16 to /20 inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 (RFC 1918)" in line
    assert f"fix: {fix}" in line


@pytest.mark.parametrize("cidr", ["172.16.0.0/16", "192.168.0.0/20", "10.255.0.0/16"])
def test_private_vpc_cidrs_from_16_to_20_are_accepted(cidr: str) -> None:
    env = copy.deepcopy(raw_environment("prod"))
    env["network"]["cidr"] = cidr
    env["cluster"]["deployerCidrs"] = [cidr]
    assert str(load_environment(env, SOURCE).network.cidr) == cidr  # type: ignore[union-attr]


@pytest.mark.parametrize("release", ["1.33.5-20251340", "1.33.5-20250230"])
def test_an_ami_release_whose_build_date_is_no_date(tmp_path: Path, release: str) -> None:
    line = refused_by_plan(tmp_path, "prod", lambda e: e["cluster"].update(amiReleaseVersion=release))
    date = release.rsplit("-", 1)[1]
    assert f"cluster.amiReleaseVersion: got {release!r} ({date} is not a date)" in line
    assert "fix: copy the release from the AMI's release notes or SSM (e.g. 1.33.5-20251120)" in line


def test_an_in_cluster_cache_bigger_than_a_system_node_is_refused_naming_the_node(tmp_path: Path) -> None:
    # GIVEN dev's in-cluster Redis on m7i.xlarge system nodes (16 GiB, 58 pods: 993 MiB kept by the kubelet)
    line = refused_by_plan(tmp_path, "dev", lambda e: e["cache"].update(memoryGib=16))
    assert (
        "cache.memoryGib: got 16 (the in-cluster Redis runs on a system node: m7i.xlarge has 16 GiB, 15.0 GiB" in line
    )
    assert "allowed: at most 15 GiB on m7i.xlarge" in line
    assert "fix: lower cache.memoryGib, pick a larger systemPool.instanceType" in line


def test_an_in_cluster_cache_that_fits_a_system_node_is_accepted() -> None:
    env = copy.deepcopy(raw_environment("dev"))
    env["cache"]["memoryGib"] = 15
    assert load_environment(env, "stacks/Pulumi.dev.yaml").cache.memory_gib == 15


@pytest.mark.parametrize(
    ("stack", "key", "value", "got"),
    [
        ("dev", "replicas", 3, "3 with kind 'in-cluster' (only kind: elasticache reads it)"),
        ("dev", "nodeType", "cache.r7g.xlarge", "'cache.r7g.xlarge' with kind 'in-cluster'"),
        ("prod", "memoryGib", 16, "16 with kind 'elasticache' (only kind: in-cluster reads it)"),
    ],
)
def test_a_cache_key_the_chosen_kind_ignores_is_refused(
    tmp_path: Path, stack: str, key: str, value: Any, got: str
) -> None:
    # GIVEN a key only the other cache kind reads: it used to plan, and then nothing read it
    line = refused_by_plan(tmp_path, stack, lambda e: e["cache"].update({key: value}))
    assert f"cache.{key}: got {got}" in line
    if key == "replicas":
        assert "fix: remove it: the in-cluster Redis runs one replica on a system node" in line
        assert "set kind: elasticache" in line


REGISTRY = "harbor.dc1.example.com/inferstack"


@pytest.mark.parametrize("stack", ["onprem", "edge"])
@pytest.mark.parametrize(
    ("value", "got", "fix"),
    [
        ("-1", "got '-1' (not a registry host[:port][/path])", "fix: e.g. harbor.dc1.example.com/inferstack"),
        (
            "https://" + REGISTRY,
            "(a URL scheme, which an image reference does not take)",
            f"remove https://: write {REGISTRY!r}",
        ),
        (f"http://{REGISTRY}/", "(a URL scheme", f"remove http://: write {REGISTRY!r}"),
        (
            REGISTRY + ":1.4",
            "(a tag (:1.4): the kit appends each image's name and tag",
            f"remove :1.4: write {REGISTRY!r}",
        ),
        ("harbor.dc1.example.com:latest", "(a tag (:latest)", "remove :latest: write 'harbor.dc1.example.com'"),
        (REGISTRY + "@sha256:" + "0" * 64, "(a digest (@sha256:", f"write {REGISTRY!r}"),
        (REGISTRY + "/", "(a trailing '/')", f"write {REGISTRY!r}"),
        ("Harbor.DC1.example.com/AI", "(capital letters)", "write 'harbor.dc1.example.com/ai'"),
        ("harbor/inferstack", "read 'harbor' as a namespace on Docker Hub (docker.io/harbor/...)", "or add its :port"),
        ("harbor.dc1.example.com:70000/ai", "(port 70000, outside 1 to 65535)", "write the registry's port"),
        ("harbor.dc1.example.com/-ai", "(not a registry host[:port][/path])", "e.g. harbor.dc1"),
        ("harbor.dc1.example.com//ai", "(not a registry host[:port][/path])", "e.g. harbor.dc1"),
        (
            "a" * 300,
            "(300 characters: <imageRegistry>/model-loader would pass the 255 characters",
            "use a shorter path",
        ),
    ],
    ids=[
        "number",
        "https",
        "http-slash",
        "tag",
        "tag-no-path",
        "digest",
        "slash",
        "capitals",
        "no-dot",
        "port",
        "dash-first",
        "empty-component",
        "long",
    ],
)
def test_an_image_registry_that_is_no_registry_host_is_refused(stack: str, value: str, got: str, fix: str) -> None:
    # GIVEN an imageRegistry the kit would write into <imageRegistry>/gateway:<tag>, a reference Kubernetes refuses
    # or resolves elsewhere (Docker Hub) WHEN the on-prem or edge stack is validated
    (line,) = config_errors(lambda e: e.update(imageRegistry=value), stack=stack)
    # THEN one line at imageRegistry names the problem, the registry form and the fix
    assert "inferstack:environment.imageRegistry: got " in line and got in line
    assert "allowed: a registry host[:port][/path] as image references write it (distribution/reference)" in line
    assert fix in line


@pytest.mark.parametrize(
    "value",
    [
        "registry.example.com:5000/team/ai",
        "10.0.0.5:5000",
        "localhost:5000",
        "[fd00::1]:5000",
        "harbor.example/a__b/c--d.e",
    ],
)
def test_an_image_registry_in_reference_form_is_taken(value: str) -> None:
    env = raw_environment("onprem")
    env["imageRegistry"] = value
    assert load_environment(env, "stacks/Pulumi.onprem.yaml").image_registry == value  # type: ignore[union-attr]


def test_the_longest_image_registry_makes_image_names_of_at_most_255_characters() -> None:
    from components.catalog.images import KIT_IMAGES
    from stacks.environment import IMAGE_REGISTRY_MAX

    longest = "harbor.example.com/" + "a" * (IMAGE_REGISTRY_MAX - len("harbor.example.com/"))
    # GIVEN the longest imageRegistry taken: every kit image's name (distribution/reference: at most 255) fits
    assert max(len(f"{longest}/{image}") for image in KIT_IMAGES) == 255
    env = raw_environment("edge")
    env["imageRegistry"] = longest
    assert load_environment(env, "stacks/Pulumi.edge.yaml").image_registry == longest  # type: ignore[union-attr]
    # AND one character more is refused
    (line,) = config_errors(lambda e: e.update(imageRegistry=longest + "a"), stack="edge")
    assert f"({IMAGE_REGISTRY_MAX + 1} characters: <imageRegistry>/model-loader would pass" in line


@pytest.mark.parametrize(
    ("change", "key", "fix"),
    [
        (lambda env: env["cluster"].update(context="dc1"), "cluster.context: got 'dc1' on tier cloud", "remove it"),
        (
            lambda env: env["cluster"].update(systemNodes={"count": 3, "cpu": 32, "memoryGib": 128}),
            "cluster.systemNodes: got",
            "size it with systemPool.instanceType, minSize and maxSize",
        ),
        (
            lambda env: env["cluster"].update(systemNodeSelector={"a": "b"}),
            "cluster.systemNodeSelector: got",
            "systemPool",
        ),
        (lambda env: env.update(nodes=[{"name": "a", "cpu": 8}]), "nodes: got", "use gpuPools[] and systemPool"),
        (
            lambda env: env.update(imageRegistry="harbor.example/x"),
            "imageRegistry: got",
            "modelStore.imageRepositories",
        ),
        (lambda env: env.update(persistentStorageClass="ceph"), "persistentStorageClass: got 'ceph'", "gp3"),
    ],
    ids=["context", "systemNodes", "systemNodeSelector", "nodes", "imageRegistry", "persistentStorageClass"],
)
def test_an_existing_clusters_key_on_the_cloud_tier_says_what_the_cloud_uses_instead(
    change: Any, key: str, fix: str
) -> None:
    # Before, each was "unknown key; allowed: <the cloud's keys>": true, but not why, nor what the cloud does instead.
    (line,) = config_errors(change)
    assert key in line and fix in line and "unknown key" not in line


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("adminRoleArns", "arn:aws:iam::111122223333:role/platform-admins"),
        ("deployerCidrs", "10.20.0.0/16"),
        ("deployerSecurityGroupIds", "sg-0123456789abcdef0"),
    ],
)
def test_an_admin_role_or_deployer_source_listed_twice_is_refused(key: str, value: str) -> None:
    # GIVEN an entry listed twice: each becomes one access entry or ingress rule named after it, and EKS keeps one
    # entry per role, a security group one rule per source
    (line,) = config_errors(lambda e: e["cluster"].update({key: [value, value]}))
    # THEN the key, the repeat and the fix are named
    assert f"cluster.{key}" in line and f"'{value}' listed twice" in line and f"remove the second {value}" in line
