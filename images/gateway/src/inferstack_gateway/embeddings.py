"""Client of an OpenAI-compatible /v1/embeddings endpoint (the gateway never runs a model itself, so a semantic
lookup is network I/O and cannot block the event loop)."""

from __future__ import annotations

import asyncio
import time
from array import array

import orjson

from inferstack_gateway.config import EmbeddingsConfig
from inferstack_gateway.http_client import HttpClient, Target

RETRY_AFTER_S = 1.0
"""After a failed call the embeddings endpoint is skipped this long: a service that is down then costs a request
nothing at all, not even a refused connection, and is tried again by the first request after the window."""


_REFUSALS = frozenset({400, 413, 422, 500})
"""The statuses of a refused input: llama.cpp's server answers one past its batch with a 500 ("input is too large to
process"); other OpenAI-compatible servers refuse invalid input with a 400, 413 or 422."""


class EmbeddingError(Exception):
    pass


class InputTooLong(EmbeddingError):
    """The endpoint refused an input that may be longer than the model reads: the input's fault, not an outage."""


class Embedder:
    def __init__(self, config: EmbeddingsConfig, http: HttpClient) -> None:
        assert config.url is not None
        self._target = Target.parse(f"{config.url}/embeddings")
        self._model = config.model
        self._dimensions = config.dimensions
        self._timeout_s = config.timeout_ms / 1000
        self._window = config.max_input_tokens
        self._http = http
        self._down_until = 0.0
        self._headers = {"content-type": "application/json"}
        if config.api_key is not None:
            self._headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"

    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def embed(self, text: str) -> bytes:
        """The FLOAT32 vector of `text`, as the bytes a Redis VECTOR field stores."""
        payload = orjson.dumps({"model": self._model, "input": text})
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._http.request(b"POST", self._target, self._headers, payload)
                try:
                    raw = await response.read()
                finally:
                    response.close()
                if response.status != 200:
                    if self._may_be_too_long(text) and response.status in _REFUSALS:
                        raise InputTooLong(f"embeddings endpoint refused a long input (HTTP {response.status})")
                    self._down_until = time.monotonic() + RETRY_AFTER_S
                    raise EmbeddingError(f"embeddings endpoint answered HTTP {response.status}")
        except TimeoutError:
            self._down_until = time.monotonic() + RETRY_AFTER_S
            raise EmbeddingError(f"embeddings endpoint timed out ({self._timeout_s * 1000:.0f} ms)") from None
        except OSError as exc:  # HttpClientError is a ConnectionError
            self._down_until = time.monotonic() + RETRY_AFTER_S
            raise EmbeddingError(f"embeddings endpoint unreachable: {type(exc).__name__}") from None
        try:
            vector = orjson.loads(raw)["data"][0]["embedding"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise EmbeddingError("embeddings endpoint returned an unexpected body") from None
        if not isinstance(vector, list) or len(vector) != self._dimensions:
            got = len(vector) if isinstance(vector, list) else type(vector).__name__
            raise EmbeddingError(f"expected {self._dimensions} dimensions (embeddings.dimensions), got {got}")
        return array("f", vector).tobytes()

    def _may_be_too_long(self, text: str) -> bool:
        """Whether `text` could hold more tokens than the model reads (`embeddings.max_input_tokens`).

        The gateway's ~4 characters per token undercounts CJK, digits, code and URLs (all-MiniLM-L6-v2 reads 92
        tokens in 90 Chinese characters), so a prompt it let through can still be refused. A token is at least one
        byte in WordPiece and byte-level BPE vocabularies alike, so an input of fewer UTF-8 bytes than the window,
        less the two special tokens, always fits: a refusal of such an input is the endpoint's fault."""
        return self._window is not None and len(text.encode()) + 2 > self._window
