"""Section 2: exact and semantic caching, with the real Redis and the real embedding model."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from gateway_harness import API_KEY_B, EmbeddingsProcess, GatewayHandle, StandIn, wait_for

# Cosine distances measured with all-MiniLM-L6-v2 (sentence-transformers, CPU).
PARAPHRASE = ("What is the capital of France?", "What's France's capital city?")  # 0.056
NEAR_MISS = ("How do I reset my password?", "How do I delete my password?")  # 0.191: different meaning
OTHER_COUNTRY = ("Capital of France?", "Capital of Germany?")  # 0.29


def ask(gw: GatewayHandle, content: str, *, api_key: str | None = None, **kwargs: Any) -> tuple[str, str]:
    """(answer, x-inferstack-cache) for a temperature-0 single-turn chat."""
    client = gw.client(api_key) if api_key else gw.client()
    kwargs.setdefault("temperature", 0)
    raw = client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": content}], **kwargs
    )
    return raw.parse().choices[0].message.content, raw.headers["x-inferstack-cache"]


def stored(gw: GatewayHandle, kind: str = "exact") -> bool:
    return gw.metric("inferstack_gateway_cache_writes_total", kind=kind, outcome="stored") > 0


def test_exact_hit_returns_the_first_answer_without_reaching_the_upstream(gateway: Any, upstreams: Any) -> None:
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream)
    first, result = ask(gw, "Say hi")
    assert result == "miss"
    assert wait_for(lambda: stored(gw))
    second, result = ask(gw, "Say hi")
    assert (second, result) == (first, "hit")
    assert len(upstream.requests) == 1


def test_whitespace_and_key_order_do_not_defeat_the_exact_cache(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    first, _ = ask(gw, "Say hi", max_tokens=16)
    assert wait_for(lambda: stored(gw))
    body = orjson.dumps({"max_tokens": 16, "temperature": 0.0, "messages": [{"content": "  Say hi\n", "role": "user"}],
                         "model": "local"})  # fmt: skip
    status, headers, raw = gw.http(
        "POST", "/v1/chat/completions", body, {"authorization": f"Bearer {gw.client().api_key}"}
    )
    assert (status, headers["x-inferstack-cache"]) == (200, "hit")
    assert orjson.loads(raw)["choices"][0]["message"]["content"] == first


@pytest.mark.parametrize(
    "change",
    [{"max_tokens": 7}, {"top_p": 0.5}, {"stop": ["\n"]}, {"seed": 3}, {"response_format": {"type": "json_object"}},
     {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}],
    ids=lambda c: next(iter(c)),
)  # fmt: skip
def test_output_changing_parameters_are_part_of_the_key(gateway: Any, upstreams: Any, change: dict[str, Any]) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    ask(gw, "Say hi")
    assert wait_for(lambda: stored(gw))
    answer, result = ask(gw, "Say hi", **change)
    assert result == "miss" and answer.startswith("up#2")


def test_streamed_request_is_served_from_a_cached_non_streamed_answer_as_sse(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up", tokens=3)
    gw = gateway(upstream)
    first, _ = ask(gw, "Say hi")
    assert wait_for(lambda: stored(gw))
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0, stream=True,
        stream_options={"include_usage": True},
    ) as response:  # fmt: skip
        assert response.headers["x-inferstack-cache"] == "hit"
        chunks = list(response.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == first
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert len(upstream.requests) == 1


def stream(gw: GatewayHandle, content: str, **kwargs: Any) -> tuple[str, str, Any]:
    """(answer, x-inferstack-cache, usage of the last chunk) for a streamed temperature-0 single-turn chat."""
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": content}], temperature=0, stream=True, **kwargs
    ) as response:
        chunks = list(response.parse())
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return answer, response.headers["x-inferstack-cache"], chunks[-1].usage


def test_a_streamed_answer_is_cached_after_the_stream_finished(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up", tokens=4)
    gw = gateway(upstream)
    streamed, result, _ = stream(gw, "Say hi", stream_options={"include_usage": True})
    assert result == "miss"
    assert wait_for(lambda: stored(gw))
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0
    )
    assert raw.headers["x-inferstack-cache"] == "hit"
    answer = raw.parse()
    assert answer.choices[0].message.content == streamed and answer.usage is not None
    assert answer.usage.completion_tokens == 4 and len(upstream.requests) == 1


def test_an_entry_without_usage_answers_only_requests_that_do_not_need_it(gateway: Any, upstreams: Any) -> None:
    """A stream that did not ask for usage stores an answer without it: it serves later such streams, but a
    non-streamed request (whose answer always carries usage) or a stream with include_usage goes upstream, and the
    answer it gets, with usage, replaces the entry."""
    upstream = upstreams("up", tokens=4)
    gw = gateway(upstream)
    streamed, result, _ = stream(gw, "Say hi")
    assert result == "miss" and wait_for(lambda: stored(gw))
    assert stream(gw, "Say hi") == (streamed, "hit", None)
    assert stream(gw, "Say hi", stream_options={"include_usage": True})[1] == "miss"
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="stored") >= 2)
    answer, result, usage = stream(gw, "Say hi", stream_options={"include_usage": True})
    assert answer.startswith("up#2") and result == "hit" and usage is not None and usage.completion_tokens == 4
    assert ask(gw, "Say hi")[1] == "hit"
    assert len(upstream.requests) == 2


def test_exact_entries_carry_the_route_ttl(gateway: Any, upstreams: Any, redis_server: Any) -> None:
    gw = gateway(upstreams("up"), models={"local": {"tier": "small", "cache": {"ttl_s": 120}}})
    ask(gw, "Say hi")
    assert wait_for(lambda: stored(gw))
    prefix = gw.app.config.redis.key_prefix
    (key,) = redis_server.command("KEYS", f"{prefix}x:*")
    assert 0 < redis_server.command("TTL", key) <= 120


def test_non_zero_temperature_bypasses_the_cache_unless_opted_in(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    assert ask(gw, "Say hi", temperature=0.8)[1] == "bypass"
    assert ask(gw, "Say hi", temperature=0.8)[1] == "bypass"
    opt_in = {"x-inferstack-cache-opt-in": "true"}
    first, result = ask(gw, "Say hi", temperature=0.8, extra_headers=opt_in)
    assert result == "miss"
    assert wait_for(lambda: stored(gw))
    assert ask(gw, "Say hi", temperature=0.8, extra_headers=opt_in) == (first, "hit")


def test_cache_control_no_store_bypasses_the_cache(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    ask(gw, "Say hi")
    assert wait_for(lambda: stored(gw))
    assert ask(gw, "Say hi", extra_headers={"cache-control": "no-store"})[1] == "bypass"


def test_policy_always_caches_any_temperature_and_never_caches_nothing(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(
        upstream,
        tiers={"small": {"upstreams": ["main"]}},
        models={"local": {"tier": "small", "cache": {"policy": "always"}},
                "nocache": {"tier": "small", "cache": {"policy": "never"}}},
    )  # fmt: skip
    assert ask(gw, "Say hi", temperature=1.2)[1] == "miss"
    raw = gw.client().chat.completions.with_raw_response.create(
        model="nocache", messages=[{"role": "user", "content": "Say hi"}], temperature=0
    )
    assert raw.headers["x-inferstack-cache"] == "bypass"


def test_one_tenant_never_receives_another_tenants_entry(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    answer_a, _ = ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    # A paraphrase (semantic candidate) and the same text (exact candidate) from tenant B never get A's answer.
    answer_b, result = ask(gw, PARAPHRASE[1], api_key=API_KEY_B)
    assert result == "miss" and answer_b != answer_a
    answer_b2, _ = ask(gw, PARAPHRASE[0], api_key=API_KEY_B)
    assert answer_b2 != answer_a
    assert ask(gw, PARAPHRASE[0]) == (answer_a, "hit")


def test_prompt_and_model_versions_partition_the_cache(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    assert ask(gw, PARAPHRASE[0], extra_headers={"x-inferstack-prompt-version": "v2"})[1] == "miss"
    assert ask(gw, PARAPHRASE[1], extra_headers={"x-inferstack-prompt-version": "v2"})[1] in ("miss", "semantic")
    bumped = gateway(
        upstream, models={"local": {"tier": "small", "version": "2", "cache": {"semantic": {"enabled": True}}}}
    )
    assert ask(bumped, PARAPHRASE[0])[1] == "miss"


def test_paraphrase_is_a_semantic_hit(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    first, _ = ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    assert ask(gw, PARAPHRASE[1]) == (first, "semantic")
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [({"content": [{"type": "text", "text": "What animal is this?"},
                   {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}]},
      {"content": [{"type": "text", "text": "What animal is this?"},
                   {"type": "image_url", "image_url": {"url": "https://example.invalid/dog.png"}}]}),
     ({"content": "What is my name?", "name": "alice"}, {"content": "What is my name?", "name": "bob"})],
    ids=["image-part", "name"],
)  # fmt: skip
def test_what_the_embedding_cannot_see_keeps_a_request_out_of_the_semantic_cache(
    gateway: Any, upstreams: Any, first: dict[str, Any], second: dict[str, Any]
) -> None:
    # GIVEN an answer to a question about one image (or from one named user): it was stored in the semantic cache
    upstream = upstreams("up")
    gw = gateway(upstream)

    def send(message: dict[str, Any]) -> tuple[str, str]:
        raw = gw.client().chat.completions.with_raw_response.create(
            model="local", messages=[{"role": "user", **message}], temperature=0
        )
        return raw.parse().choices[0].message.content, raw.headers["x-inferstack-cache"]

    assert send(first)[1] == "miss"
    assert wait_for(lambda: stored(gw))
    # WHEN the same text comes with another image (or name), THEN it is not served the first answer (it was a semantic
    # hit at distance 0, then promoted to its exact key), and the first request is still an exact hit
    answer, result = send(second)
    assert result == "miss" and answer.startswith("up#2")
    assert send(first)[1] == "hit"
    assert gw.metric("inferstack_gateway_cache_writes_total", kind="semantic", outcome="stored") == 0


def test_a_request_for_logprobs_is_not_cached(gateway: Any, upstreams: Any) -> None:
    # A stream's entry keeps no logprobs, so a hit could not give them: such requests bypass the cache.
    upstream = upstreams("up")
    gw = gateway(upstream)
    assert ask(gw, "Say hi", logprobs=True)[1] == "bypass"
    assert ask(gw, "Say hi", logprobs=True)[1] == "bypass"
    assert len(upstream.requests) == 2


def test_a_completion_asking_for_logprobs_0_is_not_cached(gateway: Any, upstreams: Any) -> None:
    # The legacy completions' logprobs is a count: 0 still returns the sampled tokens' logprobs (OpenAI API reference,
    # completions: "the API will always return the logprob of the sampled token"; vLLM: any value but null). A hit
    # rebuilt from a stream would have none to give.
    upstream = upstreams("up")
    gw = gateway(upstream)
    for _ in range(2):
        raw = gw.client().completions.with_raw_response.create(
            model="local", prompt="Say hi", temperature=0, logprobs=0
        )
        assert raw.headers["x-inferstack-cache"] == "bypass"
    assert len(upstream.requests) == 2


def test_a_semantic_hit_is_an_exact_hit_the_next_time_it_is_asked(gateway: Any, upstreams: Any) -> None:
    # GIVEN an answer cached for one phrasing, and a paraphrase answered from the semantic cache
    upstream = upstreams("up")
    gw = gateway(upstream)
    first, _ = ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    assert ask(gw, PARAPHRASE[1]) == (first, "semantic")
    # WHEN the paraphrase is asked again, word for word
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="from_semantic"))
    # THEN it is an exact hit (one Redis GET), not a second embedding and vector search
    assert ask(gw, PARAPHRASE[1]) == (first, "hit")
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("pair", [NEAR_MISS, OTHER_COUNTRY], ids=["delete-vs-reset-password", "germany-vs-france"])
def test_near_misses_are_not_served_from_the_semantic_cache(
    gateway: Any, upstreams: Any, pair: tuple[str, str]
) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    first, _ = ask(gw, pair[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    second, result = ask(gw, pair[1])
    assert result == "miss" and second != first


def test_the_threshold_is_per_route_and_a_loose_one_serves_wrong_answers(gateway: Any, upstreams: Any) -> None:
    # "Capital of Germany?" vs "Capital of France?" is ~0.29 with MiniLM: a miss at the strict default (0.1), but
    # a route configured with max_distance 0.35 serves France's answer for Germany. That is why the default is strict.
    strict = gateway(upstreams("strict"))
    france, _ = ask(strict, OTHER_COUNTRY[0])
    assert wait_for(lambda: stored(strict, "semantic"))
    assert ask(strict, OTHER_COUNTRY[1])[1] == "miss"
    loose = gateway(
        upstreams("loose"),
        namespace="loose:",
        models={"local": {"tier": "small", "cache": {"semantic": {"enabled": True, "max_distance": 0.35}}}},
    )
    france, _ = ask(loose, OTHER_COUNTRY[0])
    assert wait_for(lambda: stored(loose, "semantic"))
    assert ask(loose, OTHER_COUNTRY[1]) == (france, "semantic")


def test_multi_turn_requests_skip_the_semantic_cache(gateway: Any, upstreams: Any, embeddings_server: Any) -> None:
    gw = gateway(upstreams("up"))
    messages = [
        {"role": "user", "content": PARAPHRASE[0]},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And its population?"},
    ]
    raw = gw.client().chat.completions.with_raw_response.create(model="local", messages=messages, temperature=0)
    assert raw.headers["x-inferstack-cache"] == "miss"
    assert wait_for(lambda: stored(gw))
    assert embeddings_server.control.calls == 0
    assert not stored(gw, "semantic")


def test_the_system_prompt_partitions_the_semantic_cache(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", temperature=0,
        messages=[{"role": "system", "content": "Answer in French."}, {"role": "user", "content": PARAPHRASE[1]}],
    )  # fmt: skip
    assert raw.headers["x-inferstack-cache"] == "miss"


@pytest.mark.parametrize(
    ("stored_with", "asked_with"),
    [([("system", "Answer in French.")], [("developer", "Answer in French.")]),
     ([("system", "Answer in French.\nBe brief.")], [("system", "Answer in French."), ("system", "Be brief.")])],
    ids=["system-vs-developer", "one-vs-two-system-messages"],
)  # fmt: skip
def test_the_semantic_partition_keeps_each_instruction_message_as_it_was_sent(
    gateway: Any, upstreams: Any, stored_with: list[tuple[str, str]], asked_with: list[tuple[str, str]]
) -> None:
    """The model reads a developer message, or two system messages, through its chat template, not as the same text
    under another name: only the user's question may differ between a semantic hit and the request it answers."""
    upstream = upstreams("up")
    gw = gateway(upstream)

    def send(instructions: list[tuple[str, str]], question: str) -> tuple[str | None, str]:
        messages: list[Any] = [{"role": role, "content": text} for role, text in instructions]
        raw = gw.client().chat.completions.with_raw_response.create(
            model="local", temperature=0, messages=[*messages, {"role": "user", "content": question}]
        )
        return raw.parse().choices[0].message.content, raw.headers["x-inferstack-cache"]

    first, _ = send(stored_with, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    assert send(stored_with, PARAPHRASE[1]) == (first, "semantic")  # the same instructions: a paraphrase hits
    second, result = send(asked_with, PARAPHRASE[1])
    assert result == "miss" and second != first


def test_a_completion_prompt_is_semantically_matched_only_with_the_same_whitespace_at_its_ends(
    gateway: Any, upstreams: Any
) -> None:
    """A completion continues its prompt exactly: after "The capital of France is " the model goes on with "Paris",
    after "The capital of France is" with " Paris". The embedding does not see the space (distance 0), so the one
    prompt was answered with the other's continuation."""
    upstream = upstreams("up")
    gw = gateway(upstream)

    def complete(prompt: str) -> tuple[str, str]:
        raw = gw.client().completions.with_raw_response.create(model="local", prompt=prompt, temperature=0)
        return raw.parse().choices[0].text, raw.headers["x-inferstack-cache"]

    first, _ = complete("The capital of France is")
    assert wait_for(lambda: stored(gw, "semantic"))
    assert complete("The capital city of France is") == (first, "semantic")  # a paraphrase, the same ends: a hit
    for prompt in ("The capital of France is ", "\nThe capital of France is"):
        answer, result = complete(prompt)
        assert result == "miss" and answer != first


@pytest.mark.parametrize("mode", ["truncate", "error500"])
def test_truncated_and_failed_answers_are_never_cached(gateway: Any, upstreams: Any, mode: str) -> None:
    upstream = upstreams("up", mode=mode, tokens=4)
    gw = gateway(upstream)
    import openai

    with pytest.raises(openai.APIError):
        stream = gw.client().chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0, stream=True
        )
        list(stream)
    upstream.mode = "ok"
    assert ask(gw, "Say hi")[1] == "miss"
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("reason", ["abort", "error", "content_filter"])
def test_an_answer_the_model_did_not_finish_is_never_cached(
    gateway: Any, upstreams: Any, reason: str, streamed: bool
) -> None:
    """vLLM ends a request it aborted or failed with finish_reason "abort" or "error" (its FINISH_REASON_STRINGS), in
    a 200 answer that ends with [DONE]; OpenAI's "content_filter" omits content. None is the model's answer to the
    request: a cached copy would serve the cut-short text to everyone who asks again."""
    upstream = upstreams("up", tokens=3, finish_reason=reason)
    gw = gateway(upstream)
    if streamed:
        assert stream(gw, "Say hi", stream_options={"include_usage": True})[1] == "miss"
    else:
        assert ask(gw, "Say hi")[1] == "miss"
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="incomplete") > 0)
    upstream.finish_reason = "stop"
    answer, result = ask(gw, "Say hi")
    assert (answer, result) == ("up#2 w1 w2", "miss")
    assert wait_for(lambda: stored(gw))
    assert ask(gw, "Say hi") == (answer, "hit")
    assert len(upstream.requests) == 2
    # nor did the unfinished answer reach the semantic index: the one entry there is the finished answer
    assert gw.metric("inferstack_gateway_cache_writes_total", kind="semantic", outcome="stored") == 1


def test_a_cancelled_stream_is_not_cached(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up", tokens=50, itl_s=0.02)
    gw = gateway(upstream)
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0, stream=True
    ) as response:
        next(response.iter_bytes())
    assert wait_for(lambda: upstream.aborted == 1)
    assert gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="stored") == 0
    assert ask(gw, "Say hi")[1] == "miss"


def test_semantic_entries_live_in_an_index_of_vector_and_tag_fields_only(
    gateway: Any, upstreams: Any, redis_server: Any
) -> None:
    gw = gateway(upstreams("up"))
    ask(gw, PARAPHRASE[0])
    assert wait_for(lambda: stored(gw, "semantic"))
    info = redis_server.command("FT.INFO", gw.app.store.index)
    attributes = info[info.index(b"attributes") + 1]
    types = sorted(attr[attr.index(b"type") + 1] for attr in attributes)
    assert types == [b"TAG", b"TAG", b"VECTOR"]


def test_another_embedding_model_never_reads_the_vectors_of_the_last_one(gateway: Any, upstreams: Any) -> None:
    """Vectors of two embedding models are not comparable even at the same size: a distance between them means
    nothing, and an answer stored under one model's vector was served for whatever the next model's vector of another
    question happened to lie near. Each model (and size) has an index of its own."""
    upstream = upstreams("up")
    before = gateway(upstream, embeddings={"model": "embedder-a"})
    first, _ = ask(before, PARAPHRASE[0])
    assert wait_for(lambda: stored(before, "semantic"))
    after = gateway(upstream, embeddings={"model": "embedder-b"})  # same Redis, same key prefix: a new release
    second, result = ask(after, PARAPHRASE[1])
    assert result == "miss" and second != first
    assert ask(after, PARAPHRASE[0]) == (first, "hit")  # the exact cache does not depend on the embedding model


def test_an_embedding_model_of_another_size_starts_an_index_of_its_own(gateway: Any, upstreams: Any) -> None:
    """An index's vector size is fixed when it is created. The entries of a 384-dimension model were in the one index,
    and after a change to an 8-dimension model every vector search was refused ("query vector blob size ... does not
    match"): counted as a Redis failure, which turned off the exact cache and the shared rate limits for
    redis.retry_after_ms after every request that tried the semantic stage."""
    upstream = upstreams("up")
    before = gateway(upstream)
    ask(before, PARAPHRASE[0])
    assert wait_for(lambda: stored(before, "semantic"))
    small = EmbeddingsProcess(dimensions=8)
    small.start()
    try:
        after = gateway(upstream, embeddings={"url": small.url, "dimensions": 8})
        answer, result = ask(after, "Say hi")
        assert result == "miss"
        assert wait_for(lambda: stored(after, "semantic"))
        assert ask(after, "Say hi") == (answer, "hit")
        # every input gets the same vector from this stand-in: the index of 8-dimension vectors answers the search
        assert ask(after, "Say hello") == (answer, "semantic")
        assert after.metric("inferstack_gateway_redis_errors_total", op="semantic") == 0
    finally:
        small.kill()


def test_latencies_measured_before_the_answer_are_in_the_histograms_after_it(gateway: Any, upstreams: Any) -> None:
    """The TTFT, upstream and lookup timings are observed after the response (off the path to the first token):
    each one still lands in its histogram, once per request, and the in-flight gauge counts a request that waits."""
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream)
    ask(gw, "Say hi")  # non-streamed miss: upstream, exact lookup, TTFT (local)
    assert wait_for(lambda: stored(gw))
    ask(gw, "Say hi")  # non-streamed exact hit: exact lookup, TTFT (none)
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0.7, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)  # streamed bypass: upstream, TTFT

    def count(name: str, **labels: str) -> float:
        return gw.metric(f"inferstack_gateway_{name}_count", **labels)

    # The stream's own observations follow its last byte, and its TTFT waits for the deferred batch.
    assert wait_for(lambda: count("ttft_seconds", model="local", upstream_kind="local") == 2)
    assert count("upstream_latency_seconds", upstream="main") == 2
    assert gw.metric("inferstack_gateway_upstream_latency_seconds_sum", upstream="main") > 0
    assert count("cache_lookup_seconds", kind="exact") == 2
    assert count("ttft_seconds", model="local", upstream_kind="none") == 1

    # The count drops in the request's own clean-up, just after the client has its last byte.
    assert wait_for(lambda: gw.metric("inferstack_gateway_in_flight_requests") == 0)
    upstream.ttft_s = 0.5
    waiting = threading.Thread(target=ask, args=(gw, "Say hello"), kwargs={"temperature": 0.7})
    waiting.start()
    try:
        assert wait_for(lambda: gw.metric("inferstack_gateway_in_flight_requests") == 1)
    finally:
        waiting.join()
    assert wait_for(lambda: gw.metric("inferstack_gateway_in_flight_requests") == 0)


def test_upstream_ttft_is_the_first_event_with_output_not_the_first_byte(gateway: Any, upstreams: Any) -> None:
    """The TTFT SLO of a Triton model reads inferstack_gateway_upstream_ttft_seconds: Triton's OpenAI frontend opens
    every chat stream with a role-only event before the model has run, so the first byte says nothing of prefill."""
    # GIVEN an upstream that sends its role event at once and its first token 300 ms later
    upstream: StandIn = upstreams("up", ttft_s=0.3, role_first=True)
    gw = gateway(upstream)
    # WHEN a client streams a chat completion, then asks the same without streaming
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0.7, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    ask(gw, "Say hi", temperature=0.7)

    def upstream_ttft(suffix: str) -> float:
        return gw.metric(f"inferstack_gateway_upstream_ttft_seconds_{suffix}", upstream="main")

    # THEN the stream, and only the stream, is observed, at its first token, not at the role event
    assert wait_for(lambda: upstream_ttft("count") == 1)
    assert upstream_ttft("sum") >= 0.3
    assert gw.metric("inferstack_gateway_upstream_ttft_seconds_bucket", upstream="main", le="0.25") == 0
    # AND the client-facing TTFT (the dashboard's "Gateway time to first token") is the first token for both
    assert wait_for(
        lambda: gw.metric("inferstack_gateway_ttft_seconds_count", model="local", upstream_kind="local") == 2
    )
    assert gw.metric("inferstack_gateway_ttft_seconds_bucket", model="local", upstream_kind="local", le="0.25") == 0


def test_repeated_hits_come_from_the_near_cache_and_a_rewritten_entry_is_served_fresh(
    gateway: Any, upstreams: Any, redis_server: Any
) -> None:
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream)
    first, _ = ask(gw, "Say hi near")
    assert wait_for(lambda: stored(gw))
    answers = [ask(gw, "Say hi near") for _ in range(4)]
    assert answers == [(first, "hit")] * 4
    # the first hit read Redis (and kept the value); the three after it were answered from memory
    assert gw.metric("inferstack_gateway_near_cache_hits_total") == 3
    assert gw.metric("inferstack_gateway_near_cache_entries") == 1
    # WHEN another replica (or an operator) rewrites the entry in Redis
    invalidations = gw.metric("inferstack_gateway_near_cache_invalidations_total")
    (key,) = redis_server.command("KEYS", f"{gw.app.config.redis.key_prefix}x:*")
    entry = orjson.loads(redis_server.command("GET", key))
    entry["choices"][0]["message"]["content"] = "rewritten"
    redis_server.command("SET", key, orjson.dumps(entry), "EX", "600")
    # THEN the next hit serves the new entry: Redis invalidated the copy in memory
    assert wait_for(lambda: gw.metric("inferstack_gateway_near_cache_invalidations_total") > invalidations)
    assert ask(gw, "Say hi near") == ("rewritten", "hit")
    assert len(upstream.requests) == 1


def test_near_cache_mb_0_turns_it_off(gateway: Any, upstreams: Any) -> None:
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream, redis={"near_cache_mb": 0})
    first, _ = ask(gw, "Say hi far")
    assert wait_for(lambda: stored(gw))
    assert [ask(gw, "Say hi far") for _ in range(3)] == [(first, "hit")] * 3
    assert gw.app.metrics.registry.get_sample_value("inferstack_gateway_near_cache_hits_total") is None
    assert gw.app.store is not None and gw.app.store.reads is not None and gw.app.store.reads.near is None


def test_a_miss_on_a_key_redis_never_held_costs_no_round_trip_and_its_answer_is_then_a_hit(
    gateway: Any, upstreams: Any, redis_server: Any
) -> None:
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream, models={"local": {"cache": {"semantic": {"enabled": False}}}})
    # The gateway opens its lookup connection at start, and with it starts the SCAN of the exact keys
    assert wait_for(lambda: gw.metric("inferstack_gateway_miss_filter_ready") == 1)
    assert gw.metric("inferstack_gateway_miss_filter_builds_total") == 1
    # The key's first request reserves its lease of the shared limits, in a round trip that carries the lookup
    ask(gw, "A first request, which takes the key's lease")
    skips = gw.metric("inferstack_gateway_miss_filter_skips_total")
    # WHEN five questions never asked before arrive
    answers = [ask(gw, f"A question never asked before, number {i}") for i in range(5)]
    # THEN each is a miss that the filter answered without asking Redis, and goes upstream
    assert [cache for _, cache in answers] == ["miss"] * 5
    assert gw.metric("inferstack_gateway_miss_filter_skips_total") - skips == 5
    assert len(upstream.requests) == 6
    # AND once written back, each is an exact hit: the filter has learned the keys that were written
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="stored") == 6)
    assert [ask(gw, f"A question never asked before, number {i}") for i in range(5)] == [
        (answer, "hit") for answer, _ in answers
    ]
    assert len(upstream.requests) == 6


def test_miss_filter_keys_0_turns_it_off(gateway: Any, upstreams: Any) -> None:
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream, redis={"miss_filter_keys": 0})
    assert ask(gw, "Say hi unfiltered")[1] == "miss"
    assert gw.app.metrics.registry.get_sample_value("inferstack_gateway_miss_filter_skips_total") is None
    assert gw.app.store is not None and gw.app.store.reads is not None and not gw.app.store.reads.known_keys
