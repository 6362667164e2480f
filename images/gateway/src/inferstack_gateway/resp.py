"""The exact lookup's Redis reads: GETs pipelined on one connection, parsed by hiredis.

The exact lookup is the one Redis command on a cacheable request's path before its first token (and the whole of
an exact hit). Through redis-py's asyncio client a GET cost 0.64 ms on a 2-core machine when requests arrive one at a
time, against 0.26 ms for the same round trip written to a bare socket and parsed with hiredis, and 0.31 ms through
this module (`benchmarks/redis_get.py`): redis-py takes a pooled connection and gives it back, wakes a stream reader,
and runs a timeout context and a response callback per command. Here every GET goes out on one shared connection
in a single write, and replies are handed to their callers in order as hiredis parses them (Redis answers a
connection's commands in the order they were sent, which is what makes one connection enough for any number of
callers).

Everything else (writes, the rate-limit counters, the vector search, PING) stays on redis-py. A URL this module does
not take on (query options such as `ssl_cert_reqs`) leaves the reads on redis-py too: `FastReads.from_url` returns
None, so behaviour never depends on which client read the key.

Failures are redis-py's exceptions, so the store handles both clients alike, except the caller's own budget:
- no connection, or the connection lost: `redis.exceptions.ConnectionError` for every command in flight;
- no reply to the oldest command within `timeout_s` (Redis frozen, or the network gone): `redis.exceptions.TimeoutError`
  for every command in flight, and the connection is dropped; the next read opens a new one;
- an error reply (for example a wrong password at connect): `redis.exceptions.ResponseError` or
  `AuthenticationError`;
- the caller's own budget (`get(key, budget_s)`) run out: the builtin TimeoutError, for that caller only; the
  connection stays, and Redis is not reported.
A caller that gives up on a read (its budget ran out, or it was cancelled) leaves its slot in the queue; the reply is
read and dropped.

The near cache (`near_bytes` > 0): values read are also kept in this process, and a repeated GET is answered from
memory with no round trip, with Redis's server-assisted client-side caching keeping them true
(https://redis.io/docs/latest/develop/reference/client-side-caching/). The connection speaks RESP3 (`HELLO 3`) with
`CLIENT TRACKING ON`: Redis remembers the keys it read and pushes an `invalidate` message on the same connection when
one is written, deleted, expired or evicted, or all of them on FLUSHDB/FLUSHALL (a null key list). So that the
invalidations are read in order with the replies:
- a value is stored when its reply is parsed, inside `data_received`, never later from the caller's task; the GET is
  sent with a PTTL in the same write, and the value is stored with that expiry only if no invalidation arrived
  between the two replies;
- a key that has expired (by the PTTL, counted from when it was sent) is never served, whether or not Redis has
  sent its invalidation yet; and no entry is served more than `NEAR_MAX_AGE_S` after it was read, which bounds what
  Redis does not invalidate: SWAPDB, for one, changes a database's keys without a tracked write;
- everything is dropped when the connection is lost, and a new connection starts empty;
- a value is served only while the connection has heard from Redis within `NEAR_FRESH_S`: a connection gone silent
  (a network cut with no reset) could be missing invalidations, so after that the GET goes to Redis again, which
  also proves the connection alive (or fails it, through the watchdog); an idle connection PINGs Redis after a
  third of that silence (`HEARTBEATS_PER_FRESH`), so that an idle worker's next lookup still finds it fresh.
A Redis that refuses `HELLO 3` or `CLIENT TRACKING` (older than 6, or the command denied by an ACL) leaves the
near cache off for that connection, logged once; the reads work as without it. Size, least-recently-used eviction
and per-entry expiry are cachetools' `TLRUCache`. redis-py has client-side caching of its own, but only on its
synchronous client.

The miss filter (`known_prefix` and `known_keys` > 0): a Bloom filter (rbloom) of every key under the prefix that Redis
holds, so that a key it has never seen is answered as a miss with no round trip, which is what most exact lookups are.
The connection's tracking is then `CLIENT TRACKING ON BCAST PREFIX <prefix>`: Redis pushes an invalidation for every
key written, deleted, expired or evicted under the prefix by any client, and each one is added to the filter (a
push does not say which of these it was; a key added for its deletion only costs a round trip later). Once tracking
is on, a SCAN of the prefix adds the keys already there (SCAN returns every key present from its start to its end;
one written meanwhile is pushed), and only when the SCAN is complete does the filter answer. So the filter holds a
superset of Redis's keys: a key it lacks is absent, except one written by another replica so recently that its push
has not been read yet (which is a miss either way: the lookup would have raced the write). Nothing is ever taken out
of it, so deleted and expired keys stay in it until the next SCAN, `KNOWN_REBUILD_S` later, which builds a new filter
beside it (pushes go to both) and replaces it when complete. A push with no key list (a flush of any database, but
also DEBUG RELOAD and a replica's full resync, which load keys that are never pushed) stops the filter answering
until a new SCAN is complete. A SCAN refused (NOPERM, an unknown command) leaves the filter off on that connection;
another error (LOADING, BUSY) is tried again, `SCAN_RETRY_S` later and doubling. What no push reports is not seen:
SWAPDB brings another database's keys in unannounced, and they are taken for misses (an upstream call, never a wrong
answer) until the next rebuild. The filter answers only under the near cache's own conditions (the connection alive,
and heard from within `NEAR_FRESH_S`), and dies with its connection: a new connection scans again. Past `known_keys`
keys it still answers truly, with more false positives (each one a round trip). With the filter on, the near cache
keeps only keys under the prefix, the ones whose writes Redis pushes; a Redis that refuses broadcast tracking
(Dragonfly has none) leaves the filter off and the near cache on, with tracking in its default mode.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import random
import re
import ssl
from collections.abc import Callable
from typing import Any, cast

import hiredis
from cachetools import TLRUCache
from rbloom import Bloom
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

MAX_IN_FLIGHT = 10_000
"""Commands sent and not yet answered beyond which the connection is treated as stuck (a frozen Redis)."""

SECOND_LOOK_S = 0.001
"""How long after finding a command overdue the watchdog looks again, the sockets having been read in between."""

NEAR_FRESH_S = 1.0
"""The near cache answers only while its connection has heard from Redis within this long (see the module's text)."""

HEARTBEATS_PER_FRESH = 3
"""A tracking connection that has heard nothing from Redis for NEAR_FRESH_S / HEARTBEATS_PER_FRESH, with no command
waiting, sends a PING: an idle worker's near cache and miss filter stay fresh for its next lookup (a lone client's
requests seconds apart would otherwise each pay a round trip), and a Redis gone silent is found out by the watchdog
without a request waiting on it."""

NEAR_ENTRY_OVERHEAD = 400
"""Bytes counted per near-cache entry on top of its key's and value's lengths: cachetools' structures (about 290
bytes, measured with tracemalloc), the entry's tuple and the two bytes objects' headers."""

NEAR_MAX_AGE_S = 60.0
"""The longest an entry is served from memory, whatever its TTL: a bound on anything that changes Redis's keyspace
without a tracked write (SWAPDB, a replica promoted with other data under the same connection name)."""

KNOWN_REBUILD_S = 3600.0
"""How often the miss filter is rebuilt from a new SCAN (spread by up to a tenth either way, so that the workers of a
fleet do not scan together): deleted and expired keys stay in a filter until then."""

KNOWN_FALSE_POSITIVES = 0.01
"""The miss filter's rate of false positives (a round trip for a key Redis does not hold) at its sized key count."""

SCAN_COUNT = b"1000"
"""Keys Redis looks at per SCAN of the miss filter's build (each a command of well under a millisecond)."""

SCAN_RETRY_S = 0.5
SCAN_RETRY_MAX_S = 30.0
"""A SCAN answered with an error other than a refusal (LOADING, BUSY) is tried again after SCAN_RETRY_S, doubling up to
SCAN_RETRY_MAX_S."""

_SUPPORTED = {"host", "port", "db", "username", "password", "path", "connection_class"}

logger = logging.getLogger(__name__)


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out += (b"$%d\r\n" % len(part), part, b"\r\n")
    return b"".join(out)


class _Connection(asyncio.Protocol):
    def __init__(self, owner: FastReads) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        # (the caller's future, or None for a PTTL sent for the near cache; when sent; the key a near-cache fill
        # stores, on the PTTL's entry)
        self.waiting: collections.deque[tuple[asyncio.Future[Any] | None, float, bytes | None]] = collections.deque()
        self.lost = False
        self.tracking = False  # RESP3 with CLIENT TRACKING ON: the near cache may be filled and served
        self.heard = 0.0  # loop time of the last bytes from Redis
        self._fill: tuple[Any, int] | None = (
            None  # a GET's reply and the owner's invalidation count then, until its PTTL
        )
        # The miss filter that answers (set once a SCAN completed on this connection), the one a SCAN is filling (a
        # SCAN whose filter is no longer this one stops), the timer of the next rebuild or retry, and the SCANs that
        # failed in a row.
        self.known: Bloom | None = None
        self.filling: Bloom | None = None
        self.rebuild: asyncio.TimerHandle | None = None
        self.scan_failures = 0
        self.heartbeat: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiting = self.waiting
        loop = self.owner.loop
        if loop is not None:
            self.heard = loop.time()
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.fail(RedisConnectionError(f"unparseable reply from Redis: {exc}"))
                return
            if reply is False:
                return
            if type(reply) is hiredis.PushNotification:
                self._pushed(reply)
                continue
            if not waiting:
                self.fail(RedisConnectionError("a reply from Redis that no command asked for"))
                return
            future, sent, fill = waiting.popleft()
            if future is None:  # the PTTL that follows a near-cache fill's GET
                self._store(fill, reply, sent)
                continue
            if fill is not None:
                self._fill = (reply, self.owner.near_invalidations)
            if not future.done():  # a caller whose budget ran out has gone; its reply is dropped
                future.set_result(reply)

    def _pushed(self, push: list[Any]) -> None:
        """An out-of-band RESP3 message: `invalidate` with the keys written since they were read (with the miss filter,
        every key written under its prefix), or None for all (a flush)."""
        if not push or push[0] != b"invalidate":
            return
        self.owner.near_invalidations += 1
        near = self.owner.near
        keys = push[1] if len(push) > 1 else None
        if keys is None:
            if near is not None:
                near.clear()
            if self.known is not None or self.filling is not None:
                # Not only a flush of this database: a flush of any other, DEBUG RELOAD and a replica's full resync
                # send it too, and the last two load keys that are never pushed. The filter stops answering until a
                # new SCAN has walked the keys again.
                self.known = None
                self.owner.rescan(self)
            return
        if near is not None:
            for key in keys:
                near.pop(key, None)
        self.learn(keys)

    def learn(self, keys: list[bytes] | tuple[bytes, ...]) -> None:
        """Add keys Redis holds, or may, to the miss filter in use and to the one a SCAN is filling."""
        for known in (self.known, self.filling):
            if known is not None:
                known.update(keys)

    def _store(self, key: bytes | None, pttl: Any, sent: float) -> None:
        fill, self._fill = self._fill, None
        near = self.owner.near
        if near is None or key is None or fill is None:
            return
        if self.owner.known_keys and not key.startswith(self.owner.known_prefix):
            return  # broadcast tracking pushes the prefix's writes only: another key's copy could not be kept true
        value, invalidations = fill
        # Stored only if nothing was invalidated between the GET's reply and this one (the key may have been
        # rewritten in between: the PTTL would then be the new value's), and only a key that exists (-2: gone).
        if (
            type(value) is not bytes
            or invalidations != self.owner.near_invalidations
            or type(pttl) is not int
            or pttl == -2
        ):
            return
        # Counted from when the PTTL was sent, not from its reply: Redis ran it in between, so this errs early.
        expires = sent + NEAR_MAX_AGE_S if pttl == -1 else sent + min(pttl / 1000, NEAR_MAX_AGE_S)
        entry = (value, expires, len(key) + len(value) + NEAR_ENTRY_OVERHEAD)
        if entry[2] <= near.maxsize:  # a value larger than the whole near cache is not kept
            near[key] = entry

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.fail(RedisConnectionError("Redis closed the connection" + (f": {exc}" if exc else "")))

    def send(self, data: bytes, replies: int) -> list[asyncio.Future[Any]]:
        assert self.transport is not None
        loop = self.owner.loop
        assert loop is not None
        now = loop.time()
        futures = [loop.create_future() for _ in range(replies)]
        self.waiting.extend((future, now, None) for future in futures)
        self.transport.write(data)
        return futures

    def send_get(self, key: bytes) -> asyncio.Future[Any]:
        """GET `key`; on a tracking connection with a near cache, with a PTTL whose reply stores the value."""
        assert self.transport is not None
        loop = self.owner.loop
        assert loop is not None
        now = loop.time()
        future = loop.create_future()
        get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
        if self.tracking and self.owner.near is not None:
            self.waiting.append((future, now, key))
            self.waiting.append((None, now, key))
            self.transport.write(get + b"*2\r\n$4\r\nPTTL\r\n$%d\r\n%s\r\n" % (len(key), key))
        else:
            self.waiting.append((future, now, None))
            self.transport.write(get)
        return future

    def fail(self, error: RedisError) -> None:
        self.lost = True
        self.tracking = False
        self.known = self.filling = None  # its pushes stop: the filter it kept true goes with it
        if self.rebuild is not None:
            self.rebuild.cancel()
            self.rebuild = None
        if self.heartbeat is not None:
            self.heartbeat.cancel()
            self.heartbeat = None
        if self.transport is not None:
            self.transport.abort()
        waiting, self.waiting = self.waiting, collections.deque()
        for future, _, _ in waiting:
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: a caller that already left must not log "never retrieved"
        self.owner.forget(self)


class FastReads:
    """GET over one pipelined connection, opened on first use and again after a failure."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        path: str | None,
        db: int,
        username: str | None,
        password: str | None,
        tls: ssl.SSLContext | None,
        timeout_s: float,
        on_timeout: Callable[[RedisError], None] | None = None,
        near_bytes: int = 0,
        known_prefix: bytes | None = None,
        known_keys: int = 0,
    ) -> None:
        self._host = host
        self._port = port
        self._path = path
        self._tls = tls
        self._timeout_s = timeout_s
        self._on_timeout = on_timeout
        self._hello: list[bytes] = []
        if password is not None:
            auth = [b"AUTH", password.encode()] if username is None else [b"AUTH", username.encode(), password.encode()]
            self._hello.append(_command(*auth))
        if db:
            self._hello.append(_command(b"SELECT", str(db).encode()))
        self._connection: _Connection | None = None
        self._connecting: asyncio.Task[_Connection] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._suspect = False  # the oldest command was overdue at the last look
        self.loop: asyncio.AbstractEventLoop | None = None  # the serving loop, taken at the first connect
        # key -> (value, loop time it expires, bytes counted); at most near_bytes of keys, values and
        # NEAR_ENTRY_OVERHEAD each.
        self.near: TLRUCache[bytes, tuple[bytes, float, int]] | None = None
        if near_bytes > 0:
            self.near = TLRUCache(maxsize=near_bytes, ttu=_expires_at, timer=self._now, getsizeof=_near_size)
        self.near_hits = 0
        self.near_invalidations = 0
        self._near_refused = False  # logged once: this Redis does not do tracking
        # The miss filter: keys under known_prefix, sized for known_keys (0: off).
        self.known_keys = known_keys if known_prefix else 0
        self.known_prefix = known_prefix if known_prefix and self.known_keys else b""
        self.known_skips = 0  # lookups the filter answered as misses, with no round trip
        self.known_builds = 0  # SCANs completed
        self._scan_refused = False  # logged once
        self._broadcast_refused = False  # logged once
        self._scans: set[asyncio.Task[None]] = set()

    @classmethod
    def from_url(
        cls,
        url: str,
        timeout_s: float,
        on_timeout: Callable[[RedisError], None] | None = None,
        near_bytes: int = 0,
        known_prefix: bytes | None = None,
        known_keys: int = 0,
    ) -> FastReads | None:
        """A reader for a redis://, rediss:// or unix:// URL, or None for a URL with options it does not take on."""
        options = parse_url(url)
        if not set(options) <= _SUPPORTED:
            return None
        connection_class = options.get("connection_class")
        tls = None
        if connection_class is SSLConnection:
            tls = ssl.create_default_context()  # verified, as redis-py's default (ssl_cert_reqs=required)
        elif connection_class not in (None, UnixDomainSocketConnection):
            return None
        return cls(
            host=options.get("host", "localhost"),
            port=int(options.get("port", 6379)),
            path=options.get("path"),
            db=int(options.get("db", 0)),
            username=options.get("username"),
            password=options.get("password"),
            tls=tls,
            timeout_s=timeout_s,
            on_timeout=on_timeout,
            near_bytes=near_bytes,
            known_prefix=known_prefix,
            known_keys=known_keys,
        )

    def near_bytes(self) -> int:
        return int(self.near.currsize) if self.near is not None else 0

    def near_entries(self) -> int:
        return len(self.near) if self.near is not None else 0

    def known_ready(self) -> bool:
        """Whether the miss filter is built on the current connection (it answers while that connection is fresh)."""
        connection = self._connection
        return connection is not None and connection.known is not None

    def surely_absent(self, key: bytes) -> bool:
        """Whether the miss filter answers that Redis does not hold `key`, with no round trip (counted when it does).

        It answers only once built on the current connection and while that connection has been heard from within
        `NEAR_FRESH_S`; a key outside its prefix is never absent to it. A key it lacks cannot be in the near cache
        either (every key read is in it), so it is asked first."""
        connection = self._connection
        if connection is None:
            return False
        known = connection.known
        if known is None or key in known or not key.startswith(self.known_prefix):
            return False
        assert self.loop is not None
        if self.loop.time() - connection.heard >= NEAR_FRESH_S:
            return False
        self.known_skips += 1
        return True

    def expect(self, key: bytes) -> None:
        """Add a key this process is about to write: its push follows the write, and a lookup in between would miss."""
        if self._connection is not None:
            self._connection.learn((key,))

    def _now(self) -> float:
        loop = self.loop
        return loop.time() if loop is not None else -math.inf

    async def get(self, key: bytes, budget_s: float | None = None) -> bytes | None:
        """The value of `key`, or None. With `budget_s`, a builtin TimeoutError once that has passed with no reply.

        The budget is the caller's own (the exact stage's): running out of it leaves the connection as it is, and the
        reply, when it comes, is dropped. It fails the reply's future from a timer rather than wrapping the call in
        `asyncio.timeout()`, which on a cold path costs three times as much (benchmarks/cold_calls.py).

        A value in the near cache is returned at once, and so is None for a key the miss filter has never seen, both
        without a round trip (see the module's text)."""
        if self.surely_absent(key):
            return None
        connection = self._connection
        near = self.near
        if near is not None and connection is not None and connection.tracking:
            assert self.loop is not None
            if self.loop.time() - connection.heard < NEAR_FRESH_S:
                held = near.get(key)
                if held is not None:
                    self.near_hits += 1
                    return held[0]
        left_s = budget_s
        if connection is None or connection.lost:
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(budget_s):  # None: no budget
                connection = await self._connect()
            if left_s is not None:
                left_s -= asyncio.get_running_loop().time() - started  # the connect spent part of the budget
        loop = self.loop
        assert loop is not None
        if len(connection.waiting) >= MAX_IN_FLIGHT:
            self._timed_out(connection, f"{MAX_IN_FLIGHT} commands sent to Redis are unanswered")
            raise RedisTimeoutError("Redis is not answering")
        future = connection.send_get(key)
        self._arm()
        if left_s is None or budget_s is None:
            reply = await future
        else:
            expiry = loop.call_at(loop.time() + left_s, _expire, future, budget_s)
            try:
                reply = await future
            finally:
                expiry.cancel()
        if isinstance(reply, hiredis.ReplyError):
            raise ResponseError(str(reply))
        return cast(bytes | None, reply)

    async def open(self) -> None:
        """Open the connection now rather than at the first read (with the miss filter, its SCAN starts)."""
        if self._connection is None or self._connection.lost:
            await self._connect()

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._connecting is not None:
            self._connecting.cancel()
        if self._connection is not None:
            self._connection.fail(RedisConnectionError("the gateway is closing its Redis connection"))
        for scan in self._scans:
            scan.cancel()

    def forget(self, connection: _Connection) -> None:
        """A lost connection: its invalidations stop, so the near cache it kept true goes with it."""
        if self._connection is connection:
            self._connection = None
        if self.near is not None:
            self.near.clear()

    def _arm(self) -> None:
        """Arm the watchdog for a command just sent, unless it is armed already."""
        if self._watchdog is None:
            assert self.loop is not None
            self._watchdog = self.loop.call_at(self.loop.time() + self._timeout_s, self._check)

    def _check(self) -> None:
        """The watchdog: fail the connection if its oldest command has waited `timeout_s` (armed while any wait)."""
        self._watchdog = None
        connection, loop = self._connection, self.loop
        if connection is None or not connection.waiting or loop is None:
            return
        oldest = connection.waiting[0][1]
        if loop.time() - oldest < self._timeout_s:
            self._suspect = False
            self._watchdog = loop.call_at(oldest + self._timeout_s, self._check)
        elif not self._suspect:
            # Timers run before the sockets are read in an event-loop iteration: after the loop itself was held up
            # (a long callback, a collection), the reply may be waiting unread. Look again once the sockets were
            # read (a timer due now would run in this same timer pass, before them).
            self._suspect = True
            self._watchdog = loop.call_later(SECOND_LOOK_S, self._check)
        else:
            self._suspect = False
            self._timed_out(connection, f"no reply from Redis in {self._timeout_s * 1000:.0f} ms")

    def _timed_out(self, connection: _Connection, why: str) -> None:
        """Drop a connection that stopped answering, and say so: its callers may all have left on their budgets."""
        error = RedisTimeoutError(why)
        connection.fail(error)
        if self._on_timeout is not None:
            self._on_timeout(error)

    async def _connect(self) -> _Connection:
        # One connect for every caller that finds no connection; a caller that gives up does not cancel it.
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if self._connecting is None or self._connecting.done():
            self._connecting = self.loop.create_task(self._open())
            self._connecting.add_done_callback(_retrieve)
        return await asyncio.shield(self._connecting)

    async def _open(self) -> _Connection:
        loop = self.loop
        assert loop is not None
        where = self._path or f"{self._host}:{self._port}"
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._path is not None:
                    _, connection = await loop.create_unix_connection(lambda: _Connection(self), self._path)
                else:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(self), self._host, self._port, ssl=self._tls,
                        server_hostname=self._host if self._tls else None,
                    )  # fmt: skip
                if self._hello:
                    replies = await asyncio.gather(*connection.send(b"".join(self._hello), len(self._hello)))
                    for reply in replies:
                        if isinstance(reply, hiredis.ReplyError):
                            raise _refused(where, str(reply))
                if self.near is not None or self.known_keys:
                    await self._track(connection, where)
        except BaseException as exc:
            if connection is not None:
                connection.fail(RedisConnectionError("the connection did not complete its set-up"))
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError(
                    f"connect to Redis at {where} timed out ({self._timeout_s * 1000:.0f} ms)"
                ) from None
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"cannot connect to Redis at {where}: {exc.strerror or exc}") from None
            raise
        self._connection = connection
        if connection.tracking:
            self._beat(connection)
        if connection.filling is not None:
            self._start_scan(connection, connection.filling)
        return connection

    def _beat(self, connection: _Connection) -> None:
        """PING an idle tracking connection (see HEARTBEATS_PER_FRESH), and look again one interval later."""
        connection.heartbeat = None
        loop = self.loop
        if connection.lost or loop is None:
            return
        interval = NEAR_FRESH_S / HEARTBEATS_PER_FRESH
        if loop.time() - connection.heard >= interval and not connection.waiting:
            connection.send(_command(b"PING"), 1)
            self._arm()
        connection.heartbeat = loop.call_later(interval, self._beat, connection)

    async def _track(self, connection: _Connection, where: str) -> None:
        """RESP3 and CLIENT TRACKING ON for the near cache, in broadcast mode on the prefix for the miss filter. A Redis
        that refuses broadcast mode (Dragonfly has none) leaves the filter off and the near cache on; one that refuses
        RESP3 or tracking leaves both off."""
        reply = await connection.send(_command(b"HELLO", b"3"), 1)[0]
        if isinstance(reply, hiredis.ReplyError):
            self._refused_tracking(where, str(reply))
            return
        if self.known_keys:
            # Filled from the first push on, which may be read together with the reply that turns tracking on.
            connection.filling = self._new_filter()
            broadcast = _command(b"CLIENT", b"TRACKING", b"ON", b"BCAST", b"PREFIX", self.known_prefix)
            reply = await connection.send(broadcast, 1)[0]
            if not isinstance(reply, hiredis.ReplyError):
                connection.tracking = True
                return
            connection.filling = None
            if not self._broadcast_refused:
                self._broadcast_refused = True
                logger.warning(
                    "redis refused broadcast tracking: the exact cache's miss filter is off, every exact lookup that "
                    "the near cache cannot answer is a round trip",
                    extra={"redis": where, "error": str(reply)},
                )
        reply = await connection.send(_command(b"CLIENT", b"TRACKING", b"ON"), 1)[0]
        if isinstance(reply, hiredis.ReplyError):
            self._refused_tracking(where, str(reply))
            return
        connection.tracking = True

    def _refused_tracking(self, where: str, error: str) -> None:
        if not self._near_refused:
            self._near_refused = True
            logger.warning(
                "redis does not do client tracking: the near cache and the miss filter are off, every exact lookup is "
                "a round trip",
                extra={"redis": where, "error": error},
            )

    def _new_filter(self) -> Bloom:
        return Bloom(self.known_keys, KNOWN_FALSE_POSITIVES)

    def rescan(self, connection: _Connection) -> None:
        """Build a new miss filter with a new SCAN, beside the one in use if any (every push from now on goes in it):
        the hourly rebuild, and a restart after a push that emptied a database. A SCAN still filling an older one stops
        at its next step."""
        if connection.lost:
            return
        if connection.rebuild is not None:
            connection.rebuild.cancel()
            connection.rebuild = None
        connection.filling = self._new_filter()
        connection.scan_failures = 0
        self._start_scan(connection, connection.filling)

    def _start_scan(self, connection: _Connection, filling: Bloom) -> None:
        connection.rebuild = None
        if connection.lost or connection.filling is not filling:
            return
        assert self.loop is not None
        scan = self.loop.create_task(self._scan(connection, filling))
        self._scans.add(scan)
        scan.add_done_callback(self._scan_ended)

    def _scan_ended(self, scan: asyncio.Task[None]) -> None:
        self._scans.discard(scan)
        if not scan.cancelled() and scan.exception() is not None:
            logger.error("the miss filter's SCAN failed", exc_info=scan.exception())

    async def _scan(self, connection: _Connection, filling: Bloom) -> None:
        """Walk the prefix's keys into `filling`, and make it the filter that answers once the walk is complete."""
        assert self.loop is not None
        match = _glob_escape(self.known_prefix) + b"*"
        cursor = b"0"
        try:
            while True:
                sent = connection.send(_command(b"SCAN", cursor, b"MATCH", match, b"COUNT", SCAN_COUNT), 1)[0]
                self._arm()
                reply = await sent
                if connection.filling is not filling:  # the connection was lost, or a newer SCAN took over
                    return
                if isinstance(reply, hiredis.ReplyError):
                    self._scan_failed(connection, filling, str(reply))
                    return
                cursor, keys = reply
                filling.update(keys)
                if cursor == b"0":
                    break
        except RedisError:
            return  # the connection failed; the next one scans again
        connection.known, connection.filling = filling, None
        connection.scan_failures = 0
        self.known_builds += 1
        spread = KNOWN_REBUILD_S * (0.9 + 0.2 * random.random())
        connection.rebuild = self.loop.call_later(spread, self.rescan, connection)

    def _scan_failed(self, connection: _Connection, filling: Bloom, error: str) -> None:
        """An error reply to a SCAN: a refusal (an ACL, a server without SCAN) leaves the filter off on this connection;
        anything else (LOADING while Redis loads its data, BUSY behind a long script) is tried again later, from the
        start, into the same filter. A filter already answering goes on answering meanwhile: it is still a superset."""
        assert self.loop is not None
        if error.startswith(("NOPERM", "ERR unknown command")):
            connection.filling = None
            if not self._scan_refused:
                self._scan_refused = True
                logger.warning(
                    "redis refused SCAN: the exact cache's miss filter is off, every exact lookup is a round trip",
                    extra={"error": error},
                )
            return
        delay = min(SCAN_RETRY_MAX_S, SCAN_RETRY_S * 2**connection.scan_failures)
        connection.scan_failures += 1
        connection.rebuild = self.loop.call_later(delay, self._start_scan, connection, filling)


def _glob_escape(prefix: bytes) -> bytes:
    """The prefix as a SCAN MATCH pattern that matches it literally."""
    return re.sub(rb"([*?\[\]\\])", rb"\\\1", prefix)


def _expires_at(key: bytes, entry: tuple[bytes, float, int], now: float) -> float:
    return entry[1]


def _near_size(entry: tuple[bytes, float, int]) -> int:
    return entry[2]


def _expire(future: asyncio.Future[Any], budget_s: float) -> None:
    """The caller's budget ran out: it gets a TimeoutError now; the reply, when it comes, finds the future done."""
    if not future.done():
        future.set_exception(TimeoutError(f"no reply from Redis within the budget of {budget_s * 1000:g} ms"))


def _retrieve(task: asyncio.Task[_Connection]) -> None:
    """A connect whose callers all gave up still ends: its error is theirs, not the event loop's to log."""
    if not task.cancelled():
        task.exception()


def _refused(where: str, reply: str) -> RedisError:
    if reply.startswith(("WRONGPASS", "NOAUTH", "ERR invalid password", "ERR AUTH")):
        return AuthenticationError(f"Redis at {where} refused the credentials: {reply}")
    return ResponseError(f"Redis at {where} refused the connection's set-up: {reply}")
