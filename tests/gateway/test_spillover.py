"""Hybrid burst (issue 11, section 2): spillover to a remote hub with hysteresis, data residency, the uplink down.

Real processes and servers: the gateway (uvicorn), Redis, and two stand-in OpenAI upstreams, a local one and a
remote one (the hub), driven with the official `openai` client. Requests reaching the hub are counted at the hub's
stand-in itself. The decision logic and the config validation are also tested on their own, below.
"""

from __future__ import annotations

import email.utils
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from gateway_harness import API_KEY_A, API_KEY_B, StandIn, free_port, sha256, wait_for

from inferstack_gateway.config import ConfigError, SpilloverConfig, parse_config, render_yaml
from inferstack_gateway.metrics import Metrics
from inferstack_gateway.spillover import Spill, TierRoute
from inferstack_gateway.upstream import Upstream, retry_after_s, retry_headers

HUB_KEY = "sk-hub-burst-key"


def hybrid(local: StandIn, hub_url: str, key_file: Path, **spillover: Any) -> dict[str, Any]:
    """small: local first, the hub as fallback and spill target; large: the hub only (as an edge site has it)."""
    key_file.write_text(HUB_KEY + "\n")
    return {
        "upstreams": {
            "local": {"url": local.base},
            "hub": {"url": hub_url, "kind": "remote", "api_key_file": str(key_file)},
        },
        "tiers": {
            "small": {"upstreams": ["local", "hub"], **({"spillover": spillover} if spillover else {})},
            "large": {"upstreams": ["hub"]},
        },
        "models": {
            "local": {
                "tier": "small",
                "cache": {"policy": "never"},
                "complexity": [{"tier": "large", "keywords": ["prove"]}],
            },
            "plain": {"tier": "small", "cache": {"policy": "never"}},
            "private": {"tier": "small", "cache": {"policy": "never"}, "residency": "local"},
        },
    }


def ask(gw: Any, content: str = "hi", *, model: str = "local", api_key: str = API_KEY_A) -> str:
    result = gw.client(api_key=api_key).chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], temperature=1
    )
    return str(result.choices[0].message.content)


def burst(gw: Any, concurrency: int, rounds: int, **kwargs: Any) -> list[str | Exception]:
    """`concurrency` clients, each sending `rounds` requests back to back. Answers (or errors), in no order."""
    api_key, model = kwargs.get("api_key", API_KEY_A), kwargs.get("model", "local")
    clients = [gw.client(api_key=api_key) for _ in range(concurrency)]

    def client_loop(client: Any) -> list[str | Exception]:
        out: list[str | Exception] = []
        for _ in range(rounds):
            try:
                result = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "load"}], temperature=1
                )
                out.append(str(result.choices[0].message.content))
            except openai.APIStatusError as exc:
                out.append(exc)
        return out

    with ThreadPoolExecutor(concurrency) as pool:
        return [answer for answers in pool.map(client_loop, clients) for answer in answers]


def remote_share(answers: list[str | Exception]) -> float:
    served = [a for a in answers if isinstance(a, str)]
    assert len(served) == len(answers), [a for a in answers if not isinstance(a, str)]
    return sum(a.startswith("hub#") for a in served) / len(served)


# ---------------------------------------------------------------------------------------------------------------
# Real processes.


def test_below_the_threshold_nothing_is_sent_to_the_remote(gateway: Any, upstreams: Any, tmp_path: Path) -> None:
    # GIVEN a tier that spills above 6 requests in flight to its local upstream
    local, hub = upstreams("local", ttft_s=0.05), upstreams("hub")
    gw = gateway(None, **hybrid(local, hub.base, tmp_path / "hub-key", spill_above_inflight=6))
    # WHEN 4 clients keep it busy, under the threshold
    answers = burst(gw, concurrency=4, rounds=5)
    # THEN every answer is local and the hub has not seen a single request (counted at the hub itself)
    assert remote_share(answers) == 0 and len(answers) == 20
    assert hub.requests == []
    assert gw.metric("inferstack_gateway_spilling", tier="small") == 0
    # (counted as each request's task ends, just after its last bytes are sent: the client may read them first)
    assert wait_for(lambda: gw.metric(
        "inferstack_gateway_requests_total", route="/v1/chat/completions", status="200", cache="bypass",
        model="local", upstream_kind="local",
    ) == 20)  # fmt: skip


def test_above_the_threshold_the_overflow_grows_with_load_and_returns_after(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a local upstream taking 0.2 s per answer, spilling above 4 in flight and returning under 2
    local, hub = upstreams("local", ttft_s=0.2), upstreams("hub", ttft_s=0.02)
    gw = gateway(None, **hybrid(local, hub.base, tmp_path / "hub-key", spill_above_inflight=4, return_below_inflight=2))
    # WHEN the load steps up from 2 to 8 to 16 clients, then back down to 2
    low = remote_share(burst(gw, concurrency=2, rounds=3))
    middle = remote_share(burst(gw, concurrency=8, rounds=4))
    high = remote_share(burst(gw, concurrency=16, rounds=4))
    assert wait_for(lambda: gw.app.upstreams["local"].inflight == 0)
    hub_before = len(hub.requests)
    after = remote_share(burst(gw, concurrency=2, rounds=3))
    # THEN nothing spills at 2, the overflow share grows with the load, and it falls back to zero after
    assert low == 0
    assert 0 < middle < high, (middle, high)
    assert after == 0 and len(hub.requests) == hub_before
    # AND the hub got the burst key, the local server no key at all; the metrics tell burst from local traffic
    assert {r["headers"].get("Authorization") for r in hub.requests} == {f"Bearer {HUB_KEY}"}
    assert all("Authorization" not in r["headers"] for r in local.requests)

    def counted_remote() -> float:
        return gw.metric(
            "inferstack_gateway_requests_total", route="/v1/chat/completions", status="200", cache="bypass",
            model="local", upstream_kind="remote",
        )  # fmt: skip

    # (counted as each request's task ends, just after its last bytes are sent: the client may read them first)
    assert len(hub.requests) > 0 and wait_for(lambda: counted_remote() == len(hub.requests))
    remote = len(hub.requests)
    assert gw.metric("inferstack_gateway_spill_changes_total", tier="small", to="remote") >= 1
    assert gw.metric("inferstack_gateway_spill_changes_total", tier="small", to="local") >= 1
    assert gw.metric("inferstack_gateway_spilling", tier="small") == 0
    # (hysteresis: the state changed far less often than once per request)
    changes = gw.metric("inferstack_gateway_spill_changes_total", tier="small", to="remote")
    assert changes < remote / 2, (changes, remote)


def test_a_slow_first_token_behind_an_early_role_event_spills_on_ttft(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a local server that opens each stream with a role-only event at once and sends its first token 300 ms
    # later (as Triton's OpenAI frontend does), in a tier that spills above a 150 ms TTFT average
    local, hub = upstreams("local", ttft_s=0.3, role_first=True), upstreams("hub")
    gw = gateway(None, **hybrid(local, hub.base, tmp_path / "hub-key", spill_above_ttft_ms=150))
    client = gw.client()

    def stream() -> str:
        chunks = client.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "hi"}], temperature=1, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    # WHEN streams are sent one after another
    served = [stream().split("#")[0] for _ in range(8)]
    # THEN the average follows the first token, not the role event: after a few local answers the tier spills
    assert served[:2] == ["local", "local"] and "hub" in served, served
    assert gw.app.upstreams["local"].ttft_ewma_s >= 0.15
    assert gw.metric("inferstack_gateway_spilling", tier="small") == 1


@pytest.mark.parametrize("marked", ["key", "model"])
def test_a_residency_local_request_never_reaches_the_remote_even_at_saturation(
    gateway: Any, upstreams: Any, tmp_path: Path, marked: str
) -> None:
    # GIVEN a saturated local upstream (at most 2 in flight) whose tier spills to a healthy hub,
    # and tenant B's key (or the `private` model) marked residency: local
    local, hub = upstreams("local", ttft_s=0.3), upstreams("hub")
    config = hybrid(local, hub.base, tmp_path / "hub-key", spill_above_inflight=2, return_below_inflight=1)
    config["upstreams"]["local"]["max_inflight"] = 2
    keys = [
        {"tenant": "tenant-a", "name": "key-a", "key_sha256": sha256(API_KEY_A)},
        {"tenant": "tenant-b", "name": "key-b", "key_sha256": sha256(API_KEY_B),
         **({"residency": "local", "models": ["plain"]} if marked == "key" else {})},
    ]  # fmt: skip
    gw = gateway(None, auth={"keys": keys}, **config)
    # WHEN 10 residency-local clients pile on at once
    answers = burst(gw, concurrency=10, rounds=2, api_key=API_KEY_B, model="private" if marked == "model" else "plain")
    # THEN not one request reaches the hub: the local upstream serves what it can, the rest get 503 + Retry-After
    assert hub.requests == []
    served = [a for a in answers if isinstance(a, str)]
    refused = [a for a in answers if isinstance(a, Exception)]
    assert served and all(a.startswith("local#") for a in served)
    assert refused, "the local upstream was never saturated: the test proves nothing"
    for error in refused:
        assert isinstance(error, openai.APIStatusError) and error.status_code == 503
        assert error.response.headers["retry-after"] == "1"
        assert error.body["code"] == "upstreams_saturated"  # type: ignore[index]
        assert "never sent to the hub" in error.message
    # AND (the control) tenant A's requests at the same saturation do go to the hub
    control = burst(gw, concurrency=6, rounds=2)
    assert remote_share(control) > 0 and len(hub.requests) > 0


def test_with_the_remote_down_local_traffic_is_unaffected_and_hub_only_requests_fail_fast(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a site whose uplink is down: nothing listens at the hub's address
    local = upstreams("local", ttft_s=0.01)
    dead_hub = f"http://127.0.0.1:{free_port()}/v1"
    gw = gateway(None, **hybrid(local, dead_hub, tmp_path / "hub-key", spill_above_inflight=8))
    # WHEN local traffic and requests that need the hub (the large tier, hub-only) come in
    local_answers = burst(gw, concurrency=4, rounds=5)
    timings = []
    for _ in range(6):
        started = time.perf_counter()
        with pytest.raises(openai.APIStatusError) as caught:
            ask(gw, "please prove it")
        timings.append(time.perf_counter() - started)
        # THEN each hub-only request fails fast and says why, with a Retry-After, in OpenAI's error shape
        error = caught.value
        assert error.status_code == 503
        assert error.body["code"] == "hub_unavailable" and error.body["type"] == "service_unavailable"  # type: ignore[index]
        assert "served by the hub, which is unavailable" in error.message
        assert int(error.response.headers["retry-after"]) >= 1
    assert max(timings) < 0.5, timings
    # AND local traffic is untouched: every answer local, none failed
    assert remote_share(local_answers) == 0 and len(local_answers) == 20
    assert ask(gw, "still here").startswith("local#")
    # AND after 5 failures the hub's breaker is open, so the next ones do not even try to connect
    assert gw.metric("inferstack_gateway_circuit_open", upstream="hub") == 1


def test_a_hub_that_never_answers_costs_one_ttft_budget_then_fails_at_once(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a hub that accepts connections and never answers (a black-holed uplink), breaker at 2 failures
    local, hub = upstreams("local"), upstreams("hub", mode="hang")
    config = hybrid(local, hub.base, tmp_path / "hub-key")
    config["upstreams"]["hub"]["circuit_breaker"] = {"failures_to_open": 2, "open_s": 60}
    gw = gateway(None, budgets={"upstream_ttft_ms": 300}, **config)
    timings = []
    for _ in range(4):
        started = time.perf_counter()
        # WHEN a streamed request needs the hub
        with pytest.raises(openai.APIStatusError) as caught:
            list(gw.client().chat.completions.create(
                model="local", messages=[{"role": "user", "content": "prove it"}], stream=True, temperature=1
            ))  # fmt: skip
        timings.append(time.perf_counter() - started)
        # THEN it is a 503 hub_unavailable with Retry-After, not a hang
        assert caught.value.status_code == 503 and caught.value.body["code"] == "hub_unavailable"  # type: ignore[index]
        assert int(caught.value.response.headers["retry-after"]) >= 1
    # the first two cost the TTFT budget (plus a margin for a loaded box), then the open breaker answers at once
    assert all(t < 1.5 for t in timings[:2]), timings
    assert all(t < 0.25 for t in timings[2:]), timings
    assert len(hub.requests) == 2
    assert ask(gw, "local still answers").startswith("local#")


def spill_to_a_refusing_hub(gateway: Any, upstreams: Any, tmp_path: Path, status: int) -> tuple[Any, StandIn]:
    """A tier spilling above 2 in flight to a hub that refuses every request with `status`, and 6 clients keeping the
    local model past the threshold for 18 requests, more spills than it takes to open a breaker (5). Checks what
    both refusals share: every request answered by the local model, each refusal counted, and after the first one
    the hub left out (only the spills already on their way then, at most one per client, reached it) with its
    circuit closed (it is up, and a tier it serves alone must not read it as down)."""
    local, hub = upstreams("local", ttft_s=0.2), upstreams("hub", mode=f"error{status}")
    gw = gateway(None, **hybrid(local, hub.base, tmp_path / "hub-key", spill_above_inflight=2, return_below_inflight=1))
    answers = burst(gw, concurrency=6, rounds=3)
    assert len(hub.requests) > 0, "nothing spilled: the test proves nothing"
    assert [a for a in answers if not isinstance(a, str)] == []
    assert all(a.startswith("local#") for a in answers) and len(answers) == 18  # type: ignore[union-attr]
    errors = gw.metric("inferstack_gateway_upstream_errors_total", upstream="hub", reason=f"http_{status}")
    assert errors == len(hub.requests)
    assert len(hub.requests) <= 6, len(hub.requests)
    assert gw.metric("inferstack_gateway_circuit_open", upstream="hub") == 0
    return gw, hub


def test_a_hub_over_the_burst_keys_limit_leaves_spilled_requests_to_the_local_model(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a hub that answers 429 with Retry-After: 30: the limits of the one burst key every site shares
    # (gateway.burstTenant), which no client of this site holds. WHEN a tier spills to it THEN the local model
    # answers, and the hub is left out for its Retry-After with its circuit closed
    gw, _ = spill_to_a_refusing_hub(gateway, upstreams, tmp_path, 429)
    for attempt in range(6):
        # AND a request only the hub serves (tier large: the hub alone) gets the hub's 429 as it was, with its
        # Retry-After (which the openai client waits out before its retries): no one else to try
        with pytest.raises(openai.RateLimitError) as caught:
            gw.client().chat.completions.create(
                model="local", messages=[{"role": "user", "content": "please prove it"}], temperature=1
            )
        assert caught.value.body["code"] == "rate_limit_exceeded", attempt  # type: ignore[index]
        assert caught.value.response.headers["retry-after"] == "30"


def test_a_hub_that_serves_no_such_model_leaves_spilled_requests_to_the_local_model(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    # GIVEN a hub that does not serve the model it is asked for (the bundled onprem's llama-405b at prod, which serves
    # only llama-8b, llama-70b and chat: no hub.model, so the local name). WHEN a tier spills to it THEN the local
    # model answers, and the hub is left out for that model (asked for no other) with its circuit closed
    gw, hub = spill_to_a_refusing_hub(gateway, upstreams, tmp_path, 404)
    assert {r["body"]["model"] for r in hub.requests} == {"local"}
    # AND other models of the tier still spill to it
    asked = len(hub.requests)
    answers = burst(gw, concurrency=6, rounds=2, model="plain")
    assert all(isinstance(a, str) and a.startswith("local#") for a in answers), answers
    assert {r["body"]["model"] for r in hub.requests[asked:]} == {"plain"}
    # AND a request only the hub serves gets the hub's 404 as it was
    with pytest.raises(openai.NotFoundError) as caught:
        ask(gw, "please prove it")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


@pytest.mark.parametrize("refusal", ["error404", "error429"])
def test_a_hubs_refusal_after_the_local_model_failed_is_no_answer_of_the_sites(
    gateway: Any, upstreams: Any, tmp_path: Path, refusal: str
) -> None:
    # GIVEN a tier whose local model is down (500s) and whose fallback, the hub, does not serve its model (404) or is
    # over the burst key's limits (429): both about the hub and the site's burst key, neither about this client
    local, hub = upstreams("local", mode="error500"), upstreams("hub", mode=refusal)
    gw = gateway(None, **hybrid(local, hub.base, tmp_path / "hub-key"))
    # WHEN a client asks the tier
    with pytest.raises(openai.APIStatusError) as caught:
        ask(gw, "hi", model="plain")
    # THEN both upstreams were tried, and the client gets the tier's 503 naming both failures (retryable), not the
    # hub's "model does not exist" (a 404 the SDK never retries, for a model this site lists) or its limits on a key
    # the client never held
    assert (len(local.requests), len(hub.requests)) == (1, 1)
    assert caught.value.status_code == 503, caught.value.body
    assert caught.value.body["code"] == "upstreams_unavailable"  # type: ignore[index]
    status = refusal.removeprefix("error")
    assert "local: HTTP 500" in caught.value.message and f"hub: HTTP {status}" in caught.value.message
    assert gw.metric("inferstack_gateway_upstream_errors_total", upstream="hub", reason=f"http_{status}") == 1


def test_a_key_limited_to_some_models_sees_and_uses_only_those(gateway: Any, upstreams: Any, tmp_path: Path) -> None:
    # GIVEN tenant B's key limited to the `private` alias
    local, hub = upstreams("local"), upstreams("hub")
    keys = [
        {"tenant": "tenant-a", "name": "key-a", "key_sha256": sha256(API_KEY_A)},
        {"tenant": "tenant-b", "name": "key-b", "key_sha256": sha256(API_KEY_B), "models": ["private"]},
    ]
    gw = gateway(None, auth={"keys": keys}, **hybrid(local, hub.base, tmp_path / "hub-key"))
    # THEN it lists only that alias, uses it, and gets 404 model_not_found for the others (tenant A sees them all)
    assert [m.id for m in gw.client(api_key=API_KEY_B).models.list()] == ["private"]
    assert [m.id for m in gw.client().models.list()] == ["local", "plain", "private"]
    assert ask(gw, model="private", api_key=API_KEY_B).startswith("local#")
    with pytest.raises(openai.NotFoundError) as caught:
        ask(gw, model="local", api_key=API_KEY_B)
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


# ---------------------------------------------------------------------------------------------------------------
# The decision on its own.


def make_upstream(name: str, kind: str = "local") -> Upstream:
    url = f"http://{name}:8000/v1"
    config = parse_config(
        {
            "upstreams": {name: {"url": url, "kind": kind, **({"api_key": "k"} if kind == "remote" else {})}},
            "tiers": {"t": {"upstreams": [name]}},
            "models": {"m": {"tier": "t", "cache": {"policy": "never"}}},
            "auth": {"enabled": False},
        },
        env={},
    )
    return Upstream(name, config.upstreams[name], Metrics())


def test_the_spill_state_has_hysteresis_and_does_not_flap() -> None:
    # GIVEN spill at 4 in flight, return under 2
    local = make_upstream("local")
    changes: list[bool] = []
    spill = Spill(SpilloverConfig(spill_above_inflight=4, return_below_inflight=2), [local], changes.append)
    seen = []
    # WHEN the local load climbs to 5 and falls back to 0, one step at a time
    for load in [0, 1, 2, 3, 4, 5, 4, 3, 2, 1, 0, 1, 2, 3]:
        local.inflight = load
        seen.append(spill.decide())
    # THEN it spills from 4 up, keeps spilling down to 2, returns under 2, and stays local until 4 again
    assert seen == [False, False, False, False, True, True, True, True, True, False, False, False, False, False]
    assert changes == [True, False]


def test_a_load_oscillating_around_the_threshold_changes_state_once() -> None:
    local = make_upstream("local")
    changes: list[bool] = []
    spill = Spill(SpilloverConfig(spill_above_inflight=8, return_below_inflight=4), [local], changes.append)
    for load in [7, 8, 7, 8, 9, 7, 6, 5, 8, 7]:
        local.inflight = load
        spill.decide()
    assert changes == [True]


def test_the_ttft_average_spills_and_an_idle_local_upstream_is_still_probed() -> None:
    local = make_upstream("local")
    spill = Spill(SpilloverConfig(spill_above_ttft_ms=200), [local])
    for _ in range(20):
        local.observe_ttft(0.5)  # the local server slowed down to 500 ms
    local.inflight = 1
    assert spill.decide() is True
    # While spilling, an idle local upstream gets the request, so that its average can come down ...
    local.inflight = 0
    assert spill.decide() is False and spill.spilling
    for _ in range(20):
        local.observe_ttft(0.02)
    # ... and once it is under return_below_ttft_ms (default: half of 200 ms) the tier is back
    local.inflight = 1
    assert spill.decide() is False and not spill.spilling


def test_pick_orders_upstreams_for_each_case() -> None:
    local, hub = make_upstream("local"), make_upstream("hub", "remote")
    spill = Spill(SpilloverConfig(spill_above_inflight=1), [local])
    route = TierRoute("small", [local, hub], spill)
    assert route.pick(resident=False) == [local, hub]  # local first, the hub as fallback
    local.inflight = 1
    assert route.pick(resident=False) == [hub, local]  # spilling: the hub first, local if the hub fails
    assert route.pick(resident=True) == [local]  # residency: never the hub
    assert TierRoute("large", [hub]).pick(resident=True) == []


def test_the_decision_is_cheap() -> None:
    # Not a benchmark (benchmarks/spillover_bench.py is): a guard against an accidental O(n) or await, with a bound
    # 20x above the 0.1 ms target's share so that a loaded machine does not fail it.
    local, hub = make_upstream("local"), make_upstream("hub", "remote")
    route = TierRoute("small", [local, hub], Spill(SpilloverConfig(spill_above_inflight=4), [local]))
    started = time.perf_counter()
    for i in range(10_000):
        local.inflight = i & 7
        route.pick(resident=False)
    assert (time.perf_counter() - started) / 10_000 < 100e-6


# ---------------------------------------------------------------------------------------------------------------
# Config validation.


def config_with(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstreams": {
            "llama": {"url": "http://llama:8080/v1"},
            "hub": {"url": "http://hub.internal:8080/v1", "kind": "remote", "api_key": "${HUB_API_KEY}"},
        },
        "tiers": {"small": {"upstreams": ["llama", "hub"]}, "large": {"upstreams": ["hub"]}},
        "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
        "auth": {"keys": [{"tenant": "plant", "key_sha256": "a" * 64}]},
    }
    for key, value in changes.items():
        config[key] = {**config[key], **value}
    return config


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={"HUB_API_KEY": "sk-hub"}, source="gateway.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"models": {"secret": {"tier": "large", "cache": {"policy": "never"}, "residency": "local"}}},
         "models.secret.residency is local, but model 'secret' can route to tier 'large', which has only remote "
         "upstreams (hub): such requests could never be served. Fix: add a local upstream to tiers.large.upstreams"),
        ({"models": {"local": {"tier": "small", "cache": {"policy": "never"},
                               "complexity": [{"tier": "large", "keywords": ["prove"]}]}},
          "auth": {"keys": [{"tenant": "plant", "key_sha256": "a" * 64, "residency": "local"}]}},
         "auth.keys.0 (tenant 'plant') residency is local, but model 'local' can route to tier 'large', which has "
         "only remote upstreams (hub)"),
        ({"upstreams": {"hub": {"url": "http://hub.internal:8080/v1", "kind": "remote"}}},
         "upstreams.hub: a remote upstream (the hub) needs the hub's burst API key. Fix: set api_key: ${HUB_API_KEY}"),
        ({"tiers": {"small": {"upstreams": ["llama"], "spillover": {"spill_above_inflight": 8}}}},
         "tiers.small.spillover needs a remote upstream in tiers.small.upstreams"),
        ({"tiers": {"small": {"upstreams": ["llama", "hub"], "spillover": {"return_below_inflight": 2}}}},
         "tiers.small.spillover: spillover has no threshold. Fix: set spill_above_inflight"),
        ({"tiers": {"small": {"upstreams": ["llama", "hub"],
                              "spillover": {"spill_above_inflight": 8, "return_below_inflight": 8}}}},
         "return_below_inflight (8) must be under spill_above_inflight (8), or the tier flaps"),
        ({"auth": {"keys": [{"tenant": "plant", "key_sha256": "a" * 64, "models": ["nope"]}]}},
         "auth.keys.0.models: 'nope' is not defined under `models:`"),
    ],
    ids=["residency-model-remote-only", "residency-key-remote-only", "hub-without-key", "spill-without-remote",
         "spill-without-threshold", "return-not-below-spill", "key-unknown-model"],
)  # fmt: skip
def test_hybrid_config_errors_name_the_key_and_the_fix(changes: dict[str, Any], expected: str) -> None:
    message = error_of(config_with(**changes))
    assert expected in message, message
    assert "sk-hub" not in message


def test_a_residency_local_key_limited_to_local_models_is_accepted() -> None:
    # GIVEN a residency-local key that may use only `local`, whose tiers all have a local upstream
    config = config_with(
        models={"big": {"tier": "large", "cache": {"policy": "never"}}},
        auth={"keys": [{"tenant": "plant", "key_sha256": "a" * 64, "residency": "local", "models": ["local"]}]},
    )
    # THEN the config is valid (the hub-only `big` alias is for the other tenants)
    assert parse_config(config, env={"HUB_API_KEY": "sk-hub"}).auth.keys[0].residency == "local"


def test_a_residency_local_key_in_the_keys_file_is_checked_at_start(tmp_path: Path) -> None:
    from inferstack_gateway.app import Gateway

    keys = tmp_path / "keys.yaml"
    keys.write_text(f"- tenant: plant\n  key_sha256: {'b' * 64}\n  residency: local\n")
    config = parse_config(
        config_with(models={"big": {"tier": "large", "cache": {"policy": "never"}}}, auth={"keys_file": str(keys)}),
        env={"HUB_API_KEY": "sk-hub"},
    )
    with pytest.raises(ConfigError, match=r"item 0 \(tenant 'plant'\): residency is local, but model 'big'"):
        Gateway(config)


def test_a_missing_hub_key_file_is_a_config_error(tmp_path: Path) -> None:
    from inferstack_gateway.app import Gateway

    config = config_with(upstreams={"hub": {"url": "http://hub:8080/v1", "kind": "remote",
                                            "api_key_file": str(tmp_path / "absent")}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"upstreams\.hub\.api_key_file: cannot read .*Fix: mount the Secret"):
        Gateway(parse_config(config, env={}))


def test_a_hybrid_config_renders_for_a_configmap_without_the_hub_key() -> None:
    # GIVEN the config a stack renders: the hub's key as ${VAR} (from a Secret), spillover and residency keys
    env = {"HUB_API_KEY": "${HUB_API_KEY}"}
    config = parse_config(
        config_with(
            tiers={"small": {"upstreams": ["llama", "hub"],
                             "spillover": {"spill_above_inflight": 12, "return_below_inflight": 6}}},
            models={"private": {"tier": "small", "cache": {"policy": "never"}, "residency": "local"}},
        ),
        env=env,
    )  # fmt: skip
    # WHEN it is rendered THEN the key stays a reference, and the YAML parses back to the same config
    rendered = render_yaml(config)
    assert "api_key: ${HUB_API_KEY}" in rendered and "kind: remote" in rendered
    assert parse_config(yaml.safe_load(rendered), env=env) == config


def test_the_default_return_threshold_is_half_and_at_least_one() -> None:
    assert SpilloverConfig(spill_above_inflight=12).return_inflight == 6
    assert SpilloverConfig(spill_above_inflight=1).return_inflight == 1
    assert SpilloverConfig(spill_above_ttft_ms=400).return_ttft_ms == 200


@pytest.mark.parametrize(
    ("headers", "passed_on"),
    [
        ({b"retry-after": b"30"}, [(b"retry-after", b"30")]),
        (
            {b"retry-after": b" 7 ", b"retry-after-ms": b"6500.5"},
            [(b"retry-after", b"7"), (b"retry-after-ms", b"6500.5")],
        ),
        ({b"retry-after": b"Sun, 06 Nov 1994 08:49:37 GMT"}, [(b"retry-after", b"0")]),  # past: at once
        ({}, []),
        # what cannot be read is dropped, never passed on or raised: a superscript digit, a number past any sane wait
        # (math.ceil of an infinite float raises), a negative, a word, an exponent, header injection
        ({b"retry-after": "\u00b2".encode("latin-1")}, []),
        ({b"retry-after": b"9" * 400}, []),
        ({b"retry-after": b"-5", b"retry-after-ms": b"-5"}, []),
        ({b"retry-after": b"soon", b"retry-after-ms": b"1e9"}, []),
        ({b"retry-after-ms": b"10\r\nx-evil: 1"}, []),
    ],
)
def test_an_upstreams_retry_advice_is_passed_on_only_as_numbers(
    headers: dict[bytes, bytes], passed_on: list[tuple[bytes, bytes]]
) -> None:
    assert retry_headers(headers) == passed_on


def test_an_http_date_retry_after_counts_from_now() -> None:
    in_90_s = email.utils.formatdate(time.time() + 90, usegmt=True).encode()
    assert 85 <= retry_after_s({b"retry-after": in_90_s}) <= 91  # type: ignore[operator]


@pytest.mark.parametrize(("spill_ms", "budgets"), [(10_000, {}), (2_000, {"upstream_ttft_ms": 1_500})])
def test_a_ttft_spill_threshold_at_or_over_the_ttft_budget_is_refused(spill_ms: int, budgets: dict[str, Any]) -> None:
    # GIVEN a tier that would spill on a TTFT average that streams cut at the TTFT budget (10 s default) never reach
    config = config_with(
        tiers={"small": {"upstreams": ["llama", "hub"], "spillover": {"spill_above_ttft_ms": spill_ms}}}
    )
    config["budgets"] = budgets
    # THEN the gateway refuses the config, naming the key, the budget and the fix
    with pytest.raises(ConfigError, match=r"tiers\.small\.spillover\.spill_above_ttft_ms \(\d+\) is not under "):
        parse_config(config, env={"HUB_API_KEY": "sk-hub"})
    # AND one just under the budget is taken
    config["tiers"]["small"]["spillover"]["spill_above_ttft_ms"] = (budgets.get("upstream_ttft_ms") or 10_000) - 1
    assert parse_config(config, env={"HUB_API_KEY": "sk-hub"}).tiers["small"].spillover is not None
