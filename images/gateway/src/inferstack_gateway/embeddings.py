"""Client of an OpenAI-compatible /v1/embeddings endpoint (the gateway never runs a model itself, so a semantic
lookup is network I/O and cannot block the event loop)."""

from __future__ import annotations

import asyncio
import time
from array import array
from typing import Literal

import orjson

from inferstack_gateway.config import EmbeddingsConfig
from inferstack_gateway.http_client import HttpClient, Target
from inferstack_gateway.logs import logger

RETRY_AFTER_S = 1.0
"""After a failed call the embeddings endpoint is skipped this long: a service that is down then costs a request
nothing at all, not even a refused connection, and is tried again after the window, by the background probe
(`Embedder.watch`) or by the first request that comes."""
IDLE_PROBE_S = 10.0
"""An endpoint that no request has used for this long is probed, so that the state /readyz reports is never older
than this (and the probe's timeout): with no traffic, a service that died would otherwise be reported as it last was."""
PROBE_INPUT = "inferstack readiness probe"
"""What the background probe embeds: a real embeddings call, short enough for any model's window."""

State = Literal["unknown", "up", "down"]


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
        self.state: State = "unknown"
        """From the last call that got an answer or failed (a request's or the probe's); "unknown" before the first."""
        self._observed = 0.0
        """time.monotonic() of that call's end."""
        self._headers = {"content-type": "application/json"}
        if config.api_key is not None:
            self._headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"

    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def observed_at(self) -> float | None:
        """The wall-clock time (time.time()) of the observation behind `state`; None before the first."""
        if self.state == "unknown":
            return None
        return time.time() - (time.monotonic() - self._observed)

    def _up(self) -> None:
        # On the request path: a clock read and a comparison, nothing more.
        self._observed = time.monotonic()
        if self.state != "up":
            if self.state == "down":
                logger.info("embeddings endpoint available again")
            self.state = "up"

    def _failed(self, error: str, retry_after: bool = True) -> EmbeddingError:
        self._observed = time.monotonic()
        if retry_after:
            self._down_until = self._observed + RETRY_AFTER_S
        if self.state != "down":
            # Logged once per outage, as Redis's.
            logger.warning("embeddings endpoint down, serving without the semantic cache", extra={"error": error})
            self.state = "down"
        return EmbeddingError(error)

    async def probe(self) -> None:
        """One real embeddings call off the request path; its outcome is recorded like a request's."""
        try:
            await self.embed(PROBE_INPUT)
        except EmbeddingError:
            pass  # recorded by embed
        except Exception as exc:
            logger.exception("embeddings probe failed")
            self._failed(f"probe failed: {type(exc).__name__}")

    def _probe_in(self) -> float:
        """Seconds until the next probe is due: at once before any observation, RETRY_AFTER_S after a failure (when
        the request path skips the endpoint), IDLE_PROBE_S after the last call that succeeded."""
        if self.state == "unknown":
            return 0.0
        if self.state == "down":
            due = max(self._down_until, self._observed + RETRY_AFTER_S)
        else:
            due = self._observed + IDLE_PROBE_S
        return due - time.monotonic()

    async def watch(self) -> None:
        """Keep `state` true without a request: probe when due (`_probe_in`), until cancelled at shutdown."""
        while True:
            wait = self._probe_in()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.probe()

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
                        self._up()  # it answered: the input's fault, not an outage
                        raise InputTooLong(f"embeddings endpoint refused a long input (HTTP {response.status})")
                    raise self._failed(f"embeddings endpoint answered HTTP {response.status}")
        except TimeoutError:
            raise self._failed(f"embeddings endpoint timed out ({self._timeout_s * 1000:.0f} ms)") from None
        except OSError as exc:  # HttpClientError is a ConnectionError
            raise self._failed(f"embeddings endpoint unreachable: {type(exc).__name__}") from None
        # An answer the semantic cache cannot use is reported as down too (the endpoint is not skipped for it, as
        # before: only an outage is).
        try:
            vector = orjson.loads(raw)["data"][0]["embedding"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise self._failed("embeddings endpoint returned an unexpected body", retry_after=False) from None
        if not isinstance(vector, list) or len(vector) != self._dimensions:
            got = len(vector) if isinstance(vector, list) else type(vector).__name__
            error = f"expected {self._dimensions} dimensions (embeddings.dimensions), got {got}"
            raise self._failed(error, retry_after=False)
        try:
            packed = array("f", vector).tobytes()
        except TypeError:  # a null (a NaN the server serialized) or a string among the numbers
            raise self._failed("embeddings endpoint returned a vector of non-numbers", retry_after=False) from None
        self._up()
        return packed

    def _may_be_too_long(self, text: str) -> bool:
        """Whether `text` could hold more tokens than the model reads (`embeddings.max_input_tokens`).

        The gateway's ~4 characters per token undercounts CJK, digits, code and URLs (all-MiniLM-L6-v2 reads 92
        tokens in 90 Chinese characters), so a prompt it let through can still be refused. A token is at least one
        byte in WordPiece and byte-level BPE vocabularies alike, so an input of fewer UTF-8 bytes than the window,
        less the two special tokens, always fits: a refusal of such an input is the endpoint's fault."""
        return self._window is not None and len(text.encode()) + 2 > self._window
