"""Request validation, normalization and the deterministic cache key.

Validation covers only the fields the gateway reads or keys on; everything else passes through to the upstream,
which stays the authority on the rest of the OpenAI schema.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

import orjson

from inferstack_gateway.errors import GatewayError, bad_request

Kind = Literal["chat", "completions"]

# Bump when the key material changes shape, so old entries are never read with a new meaning. 2: the digest is
# BLAKE2b-256 (it was SHA-256).
KEY_SCHEMA = 2

# Fields that do not change the generated output. Everything else is part of the key: an unknown field is
# assumed to matter, which can cost a hit but never serves a wrong answer.
NON_OUTPUT_FIELDS = frozenset({"model", "stream", "stream_options", "user", "metadata", "store", "service_tier"})

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_PLAIN_MESSAGE = frozenset({"role", "content"})
"""The keys of a message the semantic cache can stand for: anything else (`name`, tool calls) is not embedded."""
_FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
_INT_RANGES: dict[str, tuple[int | None, int | None]] = {
    "max_tokens": (1, None),
    "max_completion_tokens": (1, None),
    # OpenAI refuses n above 128 ("n: Must be less than or equal to 128"); vLLM has no bound of its own.
    "n": (1, 128),
    "seed": (None, None),
    "top_logprobs": (0, None),
    "best_of": (1, 20),  # OpenAI's bound for the legacy completions' best_of
}
_RANGED = frozenset(_FLOAT_RANGES) | frozenset(_INT_RANGES)
MAX_MESSAGES = 2048
"""Most messages in one chat request. A longer list is refused before it is normalized and keyed."""
CHARS_PER_TOKEN = 4
"""~4 characters per token for English BPE and WordPiece vocabularies: close enough for routing, admission and the
embedding window."""
MAX_DEPTH = 128
"""Deepest JSON nesting accepted. orjson parses 1024 levels but serializes only 254 (the cache key's digest and the
upstream body re-encode the request), and no OpenAI field needs more than a few dozen (tool schemas)."""


@dataclass(slots=True)
class ParsedRequest:
    """A validated request and what the gateway derives from it."""

    kind: Kind
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    temperature: float | None
    prompt: list[Any] | str | list[str] | list[int] | list[list[int]]
    """What the cache key hashes: the messages with their text trimmed (chat), or the prompt as sent (completions).
    The body sent upstream keeps every message as the client wrote it."""
    prompt_chars: int
    turns: int
    last_user_text: str
    single_turn_text: str | None
    """The one user message of a single-turn, text-only request (the semantic cache's embedding input), else None.

    Only messages of role and text content qualify: an image part or a `name` would not be in the embedding, so two
    requests that differ only there would share an answer."""
    instructions: list[Any]
    """What partitions the semantic cache besides the parameters: the system and developer messages as keyed (role and
    trimmed content), each as it was sent, since the model reads a developer message, or two system messages, through
    its chat template and not as one text; for a completion, the whitespace at each end of its prompt."""

    @property
    def prompt_tokens_estimate(self) -> int:
        return max(1, self.prompt_chars // CHARS_PER_TOKEN)

    @property
    def single_turn_tokens_estimate(self) -> int:
        """The semantic cache's embedding input, in estimated tokens (0 when the request has none)."""
        return len(self.single_turn_text or "") // CHARS_PER_TOKEN

    @property
    def most_tokens(self) -> int | None:
        """The most tokens the request may use: its prompt plus every choice at its output limit (None: no limit).

        Every choice generates up to the limit: `n` (and `best_of`) multiply it, as OpenAI counts it for its rate
        limits."""
        limit: int | None = self.body.get("max_completion_tokens") or self.body.get("max_tokens")
        if limit is None:
            return None
        choices: int = max(self.body.get("n") or 1, self.body.get("best_of") or 1)
        return self.prompt_tokens_estimate + choices * limit


def parse_json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request(f"The request body must be a JSON object, got {type(body).__name__}.")
    # Counting brackets is a C-speed scan; only a body with that many of them is walked for its real depth.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise bad_request(f"The request body nests JSON more than {MAX_DEPTH} levels deep.")
    return body


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (the value may be up to 1024 levels deep)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((child, level + 1) for child in item if isinstance(child, dict | list))
    return deepest


def _number(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if value is None:
        return
    low, high = _FLOAT_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise bad_request(f"'{name}' must be a number between {low:g} and {high:g}, got {value!r}.", name)
    body[name] = float(value)  # 0 and 0.0 must produce the same key


def _integer(body: dict[str, Any], name: str, minimum: int | None, maximum: int | None) -> None:
    value = body.get(name)
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        if minimum is not None and maximum is not None:
            bound = f"an integer between {minimum} and {maximum}"
        else:
            bound = "an integer" if minimum is None else f"an integer >= {minimum}"
        raise bad_request(f"'{name}' must be {bound}, got {value!r}.", name)


def _common(body: dict[str, Any]) -> tuple[str, bool, bool, float | None]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a non-empty string.", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request(f"'stream' must be a boolean, got {stream!r}.", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object.", "stream_options")
        include_usage = options.get("include_usage", False) is True
    if not _RANGED.isdisjoint(body):  # one C call when the request sets none of them
        for name in _FLOAT_RANGES:
            if name in body:
                _number(body, name)
        for name, (minimum, maximum) in _INT_RANGES.items():
            if name in body:
                _integer(body, name, minimum, maximum)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            body["stop"] = [stop]
        elif not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad_request("'stop' must be a string or a list of strings.", "stop")
    for name in ("tools", "functions"):
        if body.get(name) is not None and not isinstance(body[name], list):
            raise bad_request(f"'{name}' must be a list.", name)
    if body.get("response_format") is not None and not isinstance(body["response_format"], dict):
        raise bad_request("'response_format' must be an object.", "response_format")
    temperature = body.get("temperature")
    return model, stream, include_usage, temperature


def _text_of(content: Any, i: int) -> tuple[Any, str, bool]:
    """Return (content with its text trimmed, for the key; its text; whether it is text only) for the content of
    message `i` when it is not a string (`parse_chat` trims a string itself): a list of parts, or null."""
    where = f"messages[{i}]"
    if content is None:
        return None, "", True
    if isinstance(content, list):
        parts, texts = [], []
        text_only = True
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad_request(f"'{where}.content[{j}]' must be an object with a 'type'.", f"{where}.content")
            if part["type"] == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise bad_request(f"'{where}.content[{j}].text' must be a string.", f"{where}.content")
                text_only = text_only and part.keys() == {"type", "text"}
                part = {**part, "text": text.strip()}
                texts.append(part["text"])
            else:
                text_only = False
            parts.append(part)
        return parts, "\n".join(texts), text_only
    raise bad_request(f"'{where}.content' must be a string, a list of content parts or null.", f"{where}.content")


def parse_chat(body: dict[str, Any]) -> ParsedRequest:
    model, stream, include_usage, temperature = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' is required and must be a non-empty list.", "messages")
    if len(messages) > MAX_MESSAGES:
        raise bad_request(f"'messages' has {len(messages)} messages; at most {MAX_MESSAGES} are accepted.", "messages")
    normalized: list[Any] = []
    chars = turns = 0
    last_user = ""
    user_texts: list[str] = []
    instructions: list[Any] = []
    only_system_then_user = True
    text_only = True
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad_request(f"'messages[{i}]' must be an object.", "messages")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            roles = ", ".join(sorted(ROLES))
            raise bad_request(f"'messages[{i}].role' must be one of {roles}, got {role!r}.", "messages")
        content = message.get("content")
        if isinstance(content, str):  # the common case, without a call
            content = text = content.strip()
            plain = True
        else:
            content, text, plain = _text_of(content, i)
        text_only = text_only and plain and message.keys() <= _PLAIN_MESSAGE
        normalized.append({**message, "content": content})
        chars += len(text)
        if role == "user":
            turns += 1
            last_user = text
            user_texts.append(text)
            only_system_then_user = only_system_then_user and i == len(messages) - 1
        elif role in ("system", "developer"):
            instructions.append([role, content])
        else:
            only_system_then_user = False
    if body.get("continue_final_message"):
        # vLLM continues the final message as it is, as a completion continues its prompt: its whitespace changes the
        # answer, so it is keyed as sent.
        normalized[-1] = messages[-1]
    single = user_texts[0] if turns == 1 and only_system_then_user and text_only and user_texts[0] else None
    return ParsedRequest(
        kind="chat",
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        temperature=temperature,
        prompt=normalized,
        prompt_chars=chars,
        turns=turns,
        last_user_text=last_user,
        single_turn_text=single,
        instructions=instructions,
    )


def parse_completion(body: dict[str, Any]) -> ParsedRequest:
    model, stream, include_usage, temperature = _common(body)
    # A completion continues its prompt exactly: whitespace at either end changes the answer, so the prompt is keyed
    # (and sent) as it is.
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        text = "\n".join(prompt)
    elif isinstance(prompt, list) and prompt and all(_token_ids(p) for p in prompt):
        text = " " * (4 * sum(len(p) for p in prompt))  # a batch of token-id prompts: count 1 token each
    elif _token_ids(prompt):
        text = " " * (4 * len(prompt))  # token ids: count 1 token each
    else:
        raise bad_request(
            "'prompt' is required and must be a string, a list of strings, a list of token ids or a list of lists of "
            "token ids.",
            "prompt",
        )
    # The embedding does not see whitespace, and the continuation depends on it: a semantic hit must have the same
    # whitespace at both ends of its prompt.
    ends = (
        [prompt[: len(prompt) - len(prompt.lstrip())], prompt[len(prompt.rstrip()) :]]
        if isinstance(prompt, str)
        else []
    )
    return ParsedRequest(
        kind="completions",
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        temperature=temperature,
        prompt=prompt,
        prompt_chars=len(text),
        turns=1,
        last_user_text=text if isinstance(prompt, str) else "",
        single_turn_text=prompt if isinstance(prompt, str) and prompt.strip() else None,
        instructions=ends,
    )


def _token_ids(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)  # bool is not a token id


def _digest(material: Any) -> str:
    """BLAKE2b-256 of the material's canonical JSON, in hex (64 characters).

    BLAKE2b, not SHA-256: as collision-resistant, and CPython's own code, where hashlib's SHA-256 goes through
    OpenSSL's provider machinery, which costs about 20 µs more on a cold path such as one cacheable request every few
    tens of milliseconds (benchmarks/cold_calls.py); the exact key is taken before every cacheable request's first
    token."""
    return hashlib.blake2b(orjson.dumps(material, option=orjson.OPT_SORT_KEYS), digest_size=32).hexdigest()


class CacheKeys:
    """A request's cache keys. Only the exact key is taken before the first token on every cacheable request; the
    semantic stage's two are digested when first asked for (by a semantic lookup or a write-back), since a cold
    digest costs tens of microseconds (benchmarks/cold_calls.py) and a request whose semantic stage is skipped needs
    neither before its answer."""

    __slots__ = ("_instructions", "_partition", "_scope", "_tenant", "_tenant_tag", "exact")

    def __init__(self, scope: list[Any], prompt: Any, instructions: Any, tenant: str) -> None:
        self.exact: str = _digest([*scope, prompt])
        """Hex digest over tenant, model version, prompt version, tier, output-relevant parameters and the prompt."""
        self._scope = scope
        self._instructions = instructions
        self._tenant = tenant
        self._partition: str | None = None
        self._tenant_tag: str | None = None

    @property
    def partition(self) -> str:
        """Semantic partition: the exact key's material minus the user message (system and developer messages
        included)."""
        if self._partition is None:
            self._partition = _digest([*self._scope, self._instructions])
        return self._partition

    @property
    def tenant_tag(self) -> str:
        if self._tenant_tag is None:
            self._tenant_tag = hashlib.sha256(self._tenant.encode()).hexdigest()[:32]
        return self._tenant_tag


def cache_keys(
    request: ParsedRequest, *, tenant: str, alias: str, model_version: str, prompt_version: str, tier: str
) -> CacheKeys:
    params = {k: v for k, v in request.body.items() if k not in NON_OUTPUT_FIELDS and k not in ("messages", "prompt")}
    scope = [KEY_SCHEMA, request.kind, tenant, alias, model_version, prompt_version, tier, params]
    return CacheKeys(scope, request.prompt, request.instructions, tenant)


def unknown_model(model: str, known: list[str]) -> GatewayError:
    return GatewayError(
        404,
        f"The model '{model}' does not exist. Available models: {', '.join(sorted(known))}.",
        param="model",
        code="model_not_found",
    )
