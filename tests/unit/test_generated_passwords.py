"""A generated password (``pulumi_random.RandomPassword``) plans as a secret, wherever it flows.

Under ``pulumi up`` the engine marks a resource's ``additionalSecretOutputs`` secret (RandomPassword's ``result``),
and everything built from it stays secret. The plan does the same, so the plan JSON never shows a generated
password and the policy pack sees the ``[secret]`` marker where one lands.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random
import pytest

from helpers import bundled_stacks, only
from inferstack_cli.mocks import RANDOM_PASSWORD, generated_password
from inferstack_cli.plan import MockEngine, Plan

PlanOf = Callable[[str], Plan]


def test_a_generated_password_is_secret_in_every_input_built_from_it(engine: MockEngine) -> None:
    # GIVEN a program that writes a generated password into a ConfigMap, a URL in an env value and a cache user
    password = random.RandomPassword("team-cache", length=32, special=False)
    opts = pulumi.ResourceOptions(provider=k8s.Provider("team-cluster", kubeconfig="apiVersion: v1"))
    k8s.core.v1.ConfigMap("team-config", data={"password": password.result}, opts=opts)
    url = pulumi.Output.concat("redis://:", password.result, "@cache:6379")
    k8s.core.v1.Pod(
        "team-worker",
        spec={"containers": [{"name": "w", "image": "w", "env": [{"name": "URL", "value": url}]}]},
        opts=opts,
    )
    aws.elasticache.User(
        "team-user",
        user_id="team",
        user_name="team",
        engine="valkey",
        access_string="on ~* +@all",
        authentication_mode={"type": "password", "passwords": [password.result]},
    )
    # WHEN it is planned
    plan = engine.settle()
    # THEN each place shows the marker, never the value
    assert only(plan, "kubernetes:core/v1:ConfigMap").inputs["data"] == {"password": "[secret]"}
    (env,) = only(plan, "kubernetes:core/v1:Pod").inputs["spec"]["containers"][0]["env"]
    assert env == {"name": "URL", "value": "[secret]"}
    assert only(plan, "aws:elasticache/user:User").inputs["authenticationMode"]["passwords"] == ["[secret]"]
    assert engine.resolve(password.result) == "[secret]"
    assert generated_password("team-cache") not in json.dumps([r.inputs for r in plan])


def test_an_apply_still_sees_the_generated_value(engine: MockEngine) -> None:
    # GIVEN a value computed from a generated password at plan time (the gateway hashes its burst key into its keys
    # file): secretness is a mark on the output, the apply gets the value
    password = random.RandomPassword("burst", length=48, special=False)
    digest = password.result.apply(lambda key: hashlib.sha256(key.encode()).hexdigest())
    # WHEN it is resolved THEN it is secret, and unwrapped it is the hash of the offline stand-in
    assert engine.resolve(digest) == "[secret]"
    expected = hashlib.sha256(generated_password("burst").encode()).hexdigest()
    assert engine.resolve(pulumi.Output.unsecret(digest)) == expected


@pytest.mark.parametrize("stack", bundled_stacks())
def test_no_bundled_plan_shows_a_generated_password(plan_of: PlanOf, stack: str) -> None:
    # GIVEN a bundled stack's plan, and the values its RandomPasswords have offline
    plan = plan_of(stack)
    passwords = [generated_password(r.name) for r in plan.resources if r.type == RANDOM_PASSWORD]
    assert passwords, f"{stack} generates no password"
    # WHEN the plan JSON is written THEN none of them is in it
    text = json.dumps(plan.to_json())
    assert [p for p in passwords if p in text] == []
    # AND the Grafana admin password (every stack) and the burst key (where issued) are secret outputs
    assert plan.outputs["grafana_admin_password"] == "[secret]"
    assert plan.outputs.get("burst_api_key", "[secret]") == "[secret]"


def test_the_elasticache_users_passwords_plan_as_secrets(plan_of: PlanOf) -> None:
    # GIVEN prod's ElastiCache, whose users each authenticate with a generated password
    users = [r for r in plan_of("prod").resources if r.type == "aws:elasticache/user:User"]
    # THEN every user's password is masked in the plan
    assert {u.name for u in users} == {"cache-default", "cache-gateway", "cache-exporter"}
    assert all(u.inputs["authenticationMode"]["passwords"] == ["[secret]"] for u in users)
