"""``gateway.cache`` and ``gateway.budgets``: the stack keys for what the gateway caches, for how long, and how long a
request and an upstream's first token may take. Each reaches the ConfigMap the plan renders, read back by the
gateway's own ``load_config``; each bad value is one line from ``inferstack plan``; without them nothing changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.catalog.models import MODELS
from components.gateway.gateway import longest_answer_ms
from components.specs import GatewayBudgetsSpec, GatewayCacheSpec
from helpers import plan_with, refused_by_plan
from inferstack_cli import render
from inferstack_cli.plan import Plan
from inferstack_gateway.config import BudgetsConfig, CacheConfig, GatewayConfig, load_config

PlanOf = Callable[[str], Plan]
ENV = {"GATEWAY_REDIS_URL": "redis://cache:6379", "HUB_API_KEY": "k"}


def rendered_config(plan: Plan) -> str:
    (text,) = (
        yaml.safe_load(t)["data"]["gateway.yaml"]
        for p, t in render.renders(plan.resources).items()
        if p == "manifests/inferstack-gateway/configmap-gateway-config.yaml"
    )
    return text


def loaded(plan: Plan, tmp_path: Path) -> GatewayConfig:
    """The rendered ConfigMap as the gateway reads it in its pod: a file, through its own loader and schema."""
    path = tmp_path / "gateway.yaml"
    path.write_text(rendered_config(plan))
    return load_config(path, env=ENV)


@pytest.mark.parametrize(
    ("stack", "cache", "ttl"),
    [
        ("prod", {"policy": "always", "ttlSeconds": 600}, 600),  # cloud
        ("onprem", {"ttlSeconds": 86_400}, 86_400),
        ("edge", {"policy": "never"}, CacheConfig().ttl_s),
    ],
)
def test_the_keys_reach_the_gateways_config_on_every_tier(
    tmp_path: Path, stack: str, cache: dict[str, Any], ttl: int
) -> None:
    # GIVEN a bundled stack of each tier with a cache policy or lifetime, and a 10-minute request with 1-minute TTFT
    def edit(env: dict[str, Any]) -> None:
        env["gateway"]["cache"] = cache
        env["gateway"]["budgets"] = {"requestMs": 600_000, "upstreamTtftMs": 60_000}
        if cache.get("policy") == "never":  # the edge site's embedding model serves only the cache: it goes too
            env["models"] = [m for m in env["models"] if not m["model"].startswith("sentence-transformers/")]

    # WHEN planned and the gateway loads the ConfigMap
    config = loaded(plan_with(tmp_path, stack, edit), tmp_path)
    # THEN every alias (models and routes) caches as asked, exact and semantic entries for the same time
    policy = cache.get("policy", "temperature_zero")
    assert {a: (m.cache.policy, m.cache.ttl_s, m.cache.semantic.ttl_s) for a, m in config.models.items()} == {
        alias: (policy, ttl, ttl) for alias in config.models
    }
    assert "chat" in config.models  # the route's alias, not only the models
    # AND the two budgets are the gateway's, the other stages keep theirs
    defaults = BudgetsConfig()
    assert config.budgets == defaults.model_copy(update={"request_ms": 600_000, "upstream_ttft_ms": 60_000})


@pytest.mark.parametrize("stack", ["prod", "edge"])
def test_without_the_keys_the_gateway_config_is_unchanged(plan_of: PlanOf, stack: str, tmp_path: Path) -> None:
    # GIVEN a bundled stack, which sets none of the keys, and whose models' longest answers fit the gateway's 300 s
    # request budget, WHEN planned
    text = rendered_config(plan_of(stack))
    document = yaml.safe_load(text)
    # THEN the ConfigMap carries no budgets and no lifetime (the gateway's own defaults apply, and a stack that does
    # not use the keys renders what it rendered before they existed: its gateway pods are not rolled)
    assert "budgets" not in document
    caches = {alias: model["cache"] for alias, model in document["models"].items()}
    assert [a for a, c in caches.items() if "ttl_s" in c or "ttl_s" in c["semantic"]] == []
    assert {m["cache"]["policy"] for m in document["models"].values()} == {"temperature_zero"}
    config = loaded(plan_of(stack), tmp_path)
    assert config.budgets == BudgetsConfig()


def test_the_keys_defaults_are_the_gateways() -> None:
    # The renderer leaves out a key at its default: that is only the same config if the defaults agree.
    cache, budgets = GatewayCacheSpec(), GatewayBudgetsSpec()
    assert (cache.policy, cache.ttl_seconds) == (CacheConfig().policy, CacheConfig().ttl_s)
    assert cache.ttl_seconds == CacheConfig().semantic.ttl_s
    gateway = BudgetsConfig()
    assert (budgets.request_ms, budgets.upstream_ttft_ms) == (gateway.request_ms, gateway.upstream_ttft_ms)


@pytest.mark.parametrize(
    ("stack", "gateway", "expected"),
    [
        (
            "prod",
            {"cache": {"policy": "sometimes"}},
            ["gateway.cache.policy: got 'sometimes'", "'temperature_zero', 'always' or 'never'"],
        ),
        ("edge", {"cache": {"ttlSeconds": 0}}, ["gateway.cache.ttlSeconds: got 0", "greater than or equal to 1"]),
        (
            "onprem",
            {"cache": {"policy": "never", "ttlSeconds": 60}},
            ["gateway.cache: got", "ttlSeconds (60) with policy: never", "fix: remove ttlSeconds"],
        ),
        ("prod", {"budgets": {"requestMs": "5m"}}, ["gateway.budgets.requestMs: got '5m'", "a whole number"]),
        (
            "edge",
            {"budgets": {"requestMs": 5000}},
            [
                "gateway.budgets: got",
                "upstreamTtftMs (10000, its default) is not under requestMs (5000)",
                "fix: raise requestMs above 10000, or lower upstreamTtftMs below 5000",
            ],
        ),
        (
            "onprem",
            {"budgets": {"requestMs": 600_000, "upstreamTtftMs": 600_000}},
            ["upstreamTtftMs (600000) is not under requestMs (600000)"],
        ),
        (
            "prod",
            {"budgets": {"exactCacheMs": 10}},
            ["gateway.budgets.exactCacheMs: got unknown key", "allowed: requestMs, upstreamTtftMs"],
        ),
    ],
)
def test_each_bad_value_is_one_line_from_inferstack_plan(
    tmp_path: Path, stack: str, gateway: dict[str, Any], expected: list[str]
) -> None:
    # GIVEN a bundled stack with a bad cache or budget key WHEN `inferstack plan` runs on it
    line = refused_by_plan(tmp_path, stack, lambda env: env["gateway"].update(gateway))
    # THEN it exits 2 with one line naming the key, what it got, what is allowed and the fix (no traceback)
    assert [part for part in expected if part not in line] == [], line


@pytest.mark.parametrize(
    ("stack", "edit", "expected"),
    [
        (
            "edge",
            lambda env: None,
            "models[1].model: got the embedding model 'sentence-transformers/all-MiniLM-L6-v2' (minilm) with "
            "gateway.cache.policy: never, which caches nothing: only the semantic cache calls it; allowed: an "
            "embedding model only where the gateway caches; fix: remove models[1] (minilm), or set "
            "gateway.cache.policy to temperature_zero or always",
        ),
        (
            "dev",
            lambda env: env["gateway"].update(embeddingsUrl="http://embed.example.internal/v1"),
            "gateway.embeddingsUrl: got 'http://embed.example.internal/v1' with gateway.cache.policy: never, which "
            "caches nothing; allowed: embeddingsUrl only where the gateway caches; fix: remove embeddingsUrl, or set "
            "gateway.cache.policy to temperature_zero or always",
        ),
        (
            "onprem",
            lambda env: env["gateway"].update(semanticMaxDistance=0.05),
            "gateway.semanticMaxDistance: got 0.05 with gateway.cache.policy: never",
        ),
    ],
    ids=["edge-embedding-model", "cloud-embeddings-url", "onprem-distance"],
)
def test_what_only_the_semantic_cache_uses_is_refused_when_nothing_is_cached(
    tmp_path: Path, stack: str, edit: Callable[[dict[str, Any]], None], expected: str
) -> None:
    # GIVEN a bundled stack whose gateway caches nothing, with an embedding model (the edge site's MiniLM, whose
    # NetworkPolicy admits only the gateway), an embeddings URL or a semantic distance: used by no one
    def never(env: dict[str, Any]) -> None:
        env["gateway"]["cache"] = {"policy": "never"}
        edit(env)

    # WHEN it is planned THEN it is refused at that key, with the way out either side
    assert expected in refused_by_plan(tmp_path, stack, never)


@pytest.mark.parametrize(
    ("stack", "model", "itl_ms"),
    [
        ("onprem", "llama-405b", 60),  # 8,192 tokens at 60 ms: 491.5 s
        ("dev", "llama-3b", 40),  # 8,192 tokens at 40 ms: 327.7 s
    ],
)
def test_an_unset_request_budget_holds_the_longest_answer_a_model_may_stream_on_target(
    plan_of: PlanOf, tmp_path: Path, stack: str, model: str, itl_ms: int
) -> None:
    # GIVEN a bundled stack with a model that serves 8,192 tokens of context (the ultra-low-latency profile) at an ITL
    # target that makes an answer that long take more than the gateway's default 300 s request budget, which would
    # cut it while the model is still on target
    plan = plan_of(stack)
    models = list(plan.environment.models)
    (slow,) = [m for m in models if m.name == model]
    assert slow.slo.itl_p99_ms == itl_ms and MODELS[slow.model].max_context_tokens >= 8192
    assert longest_answer_ms(models) == 8192 * itl_ms > BudgetsConfig().request_ms
    # WHEN the gateway's config is rendered without gateway.budgets.requestMs
    config = loaded(plan, tmp_path)
    # THEN its request budget is that answer plus the upstream's time to first token, and nothing else changes
    assert config.budgets == BudgetsConfig().model_copy(update={"request_ms": 8192 * itl_ms + 10_000})


@pytest.mark.parametrize("request_ms", [120_000, 900_000])
def test_a_request_budget_that_is_set_is_kept_shorter_or_longer(tmp_path: Path, request_ms: int) -> None:
    # GIVEN the on-prem stack with requestMs set, under or over its longest answer (the user's word: a shorter one
    # cuts long answers on purpose)
    plan = plan_with(tmp_path, "onprem", lambda env: env["gateway"].update(budgets={"requestMs": request_ms}))
    # WHEN / THEN the gateway gets exactly that
    assert loaded(plan, tmp_path).budgets.request_ms == request_ms


def test_a_long_first_token_budget_with_request_ms_unset_is_planned_under_the_derived_request_budget(
    tmp_path: Path,
) -> None:
    # GIVEN the on-prem stack whose gateway waits 5 minutes for a first token (a 405B woken from zero replicas) and
    # leaves requestMs unset: the kit renders the 405B's longest answer plus that wait, not the 300 s default, so the
    # request's budget does outlast one upstream's first-token budget
    ttft_ms = 300_000
    plan = plan_with(tmp_path, "onprem", lambda env: env["gateway"].update(budgets={"upstreamTtftMs": ttft_ms}))
    # WHEN / THEN it is planned (not refused as "not under requestMs (300000)"), and the gateway gets a request
    # budget above the first-token one: the longest answer on target plus the wait
    budgets = loaded(plan, tmp_path).budgets
    longest = longest_answer_ms(list(plan.environment.models))
    assert (budgets.upstream_ttft_ms, budgets.request_ms) == (ttft_ms, longest + ttft_ms)
    assert budgets.upstream_ttft_ms < budgets.request_ms
