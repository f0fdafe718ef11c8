"""The model store on Redis (redis-py 8): fenced, atomic, versioned, announced.

Layout under `p = settings.topic_prefix` (default "rankstream"):
  `{p}:model:{name}`            hash: version, kind, meta (JSON envelope with offsets and
                                created_ms, see `stream.store`), arrays (`stream.codec` bytes),
                                write_id (the identity of the save, for fencing)
  `{p}:model:{name}:v:{n}`      the same hash for each of the newest `keep_versions` versions
  `{p}:model:{name}:versions`   sorted set indexing those snapshots (so trimming is exact)
  `{p}:models`                  set of model names
  `{p}:model-updated`           pub/sub channel, JSON {"name", "version"} per save
  `{p}:idem:{key}`              an idempotency key (`claim_key`): a claim token or the
                                first answer, with a TTL (SET NX PX), so memory is bounded

`save` is one Lua script (EVALSHA): check the stored version and write id against
`expected_version` / `expected_write_id` (`stream.store.check_fence`), write latest and
snapshot (each with its `write_id` field), trim, add the name, publish — atomic, so a
reader never sees a half-written model and two writers can never both win. Reads retry
with exponential back-off on connection errors. A save whose connection drops may have
been applied; its retry then finds the store one version ahead *with its own write id*
and reports success instead of a false `FencingError`.

`delete` (clean-up) drops all of a model's keys and its name in one script as well.

Through Sentinels (a redis+sentinel:// URL) Redis replicates asynchronously, so a save
is acknowledged only once a replica holds it too (`WAIT 1`): the Sentinels promote the
replica furthest ahead, so a failover of the primary alone loses no acknowledged
checkpoint. A save that no replica confirms within `REPLICA_ACK_S` raises
`StoreUnavailableError` (it may have landed: the writer's retry adopts it, as above);
a primary with no replica at all refuses writes (`min-replicas-to-write`, NOREPLICAS),
which is the same error. See docs/reference/guarantees.md for what is still not guaranteed.

Pub/sub is fire-and-forget: announcements published while a listener is disconnected
are lost, so long-running listeners should also check `latest_versions()` now and then.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING

import redis
import redis.exceptions
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from rankstream.stream.errors import (
    StoreUnavailableError,
    credentials_refused,
    translate_public_methods,
    translating,
)
from rankstream.stream.settings import SENTINEL_SCHEME, SentinelTarget, parse_sentinel_url
from rankstream.stream.store import (
    DEFAULT_KEEP_VERSIONS,
    Announcements,
    EncodedModel,
    Fence,
    ModelStore,
    StoredModel,
    check_fence,
    check_name,
    decode_model,
    finite_or_none,
)

if TYPE_CHECKING:
    from rankstream.stream.settings import Settings

log = logging.getLogger(__name__)

_SAVE_SCRIPT = """
local stored = redis.call('HMGET', KEYS[1], 'version', 'write_id')
local current = tonumber(stored[1] or '0')
local current_id = stored[2] or ''
if current ~= tonumber(ARGV[1]) or (ARGV[8] ~= '' and current_id ~= ARGV[8]) then
  return redis.error_reply('FENCED ' .. current .. ' ' .. current_id)
end
local v = current + 1
local fields = {'version', v, 'kind', ARGV[3], 'meta', ARGV[4], 'arrays', ARGV[5],
                'write_id', ARGV[9]}
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HSET', KEYS[1] .. ':v:' .. v, unpack(fields))
local index = KEYS[1] .. ':versions'
redis.call('ZADD', index, v, v)
local oldest_kept = v - tonumber(ARGV[6]) + 1
for _, old in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. oldest_kept)) do
  redis.call('DEL', KEYS[1] .. ':v:' .. old)
end
redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. oldest_kept)
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[7], cjson.encode({name = ARGV[2], version = v}))
return v
"""
_DELETE_SCRIPT = """
local index = KEYS[1] .. ':versions'
for _, v in ipairs(redis.call('ZRANGE', index, 0, -1)) do
  redis.call('DEL', KEYS[1] .. ':v:' .. v)
end
redis.call('DEL', index)
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
"""
# SET NX and, when it is held, what holds it, in one step (atomic for two claimants)
_CLAIM_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
"""
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_SAVE_ATTEMPTS = 5
REPLICA_ACK_S = 5.0  # how long a replicated save waits for one replica to hold it
# redis-py's refusals subclass its ConnectionError, so they are told apart first
_REFUSED = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
# Every public call: client failures become StoreUnavailableError, refusals CredentialsError.
_translated = translate_public_methods(
    translating(
        "redis",
        StoreUnavailableError,
        lambda: (RedisConnectionError, RedisTimeoutError, OSError),
        lambda: _REFUSED,
    )
)


class _FailFastOnCredentials(Retry):
    """redis-py's Retry, except that refused credentials are never retried.

    redis-py's AuthenticationError/AuthorizationError subclass its ConnectionError, so a
    wrong password was retried (about 12 s per call) and then looked transient to the
    workers, which retried forever; here it becomes a `CredentialsError` at once.
    """

    def call_with_retry(self, do, fail, *args, **kwargs):  # type: ignore[no-untyped-def]
        def attempt():  # type: ignore[no-untyped-def]
            try:
                return do()
            except _REFUSED as exc:
                raise credentials_refused("redis", exc) from exc

        return super().call_with_retry(attempt, fail, *args, **kwargs)


def _connection_options(deadline_s: float | None = None) -> dict:
    """Retries and timeouts; with `deadline_s`, no call waits longer than that (socket
    timeouts of that length, no retries): for callers that answer someone, such as an
    HTTP request."""
    retries = 6 if deadline_s is None else 0
    return {
        "retry": _FailFastOnCredentials(ExponentialBackoff(cap=2.0, base=0.05), retries=retries),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_timeout": 10 if deadline_s is None else deadline_s,
        "socket_connect_timeout": 5 if deadline_s is None else deadline_s,
        "health_check_interval": 30,
    }


def redis_client(
    url: str, password: str | None = None, deadline_s: float | None = None
) -> redis.Redis:
    """A client from the URL (redis:// or rediss:// for TLS; user:password for ACLs).

    `password` (settings.redis_password) overrides the URL's, so secrets can stay out
    of the URL (redis-py lets URL parts win over keywords, hence the pool edit).
    With `deadline_s` a call never waits longer than that (`_connection_options`).

    A redis+sentinel:// URL (`stream.settings.parse_sentinel_url`) gives a client of
    the primary the Sentinels name: after a failover its connections to the old
    primary fail (or are refused as read-only), and the retry asks the Sentinels again.
    """
    if url.startswith(f"{SENTINEL_SCHEME}:"):
        return _sentinel_client(parse_sentinel_url(url), password, deadline_s)
    pool = redis.ConnectionPool.from_url(url, **_connection_options(deadline_s))
    if password is not None:
        pool.connection_kwargs["password"] = password
    return redis.Redis(connection_pool=pool)


def _sentinel_client(
    target: SentinelTarget, password: str | None, deadline_s: float | None = None
) -> redis.Redis:
    sentinel = Sentinel(
        list(target.sentinels),
        sentinel_kwargs={"socket_timeout": 2.0, "socket_connect_timeout": 2.0},
    )
    credentials = {"username": target.username, "password": password or target.password}
    return sentinel.master_for(
        target.master,
        redis_class=redis.Redis,
        db=target.db,
        **{k: v for k, v in credentials.items() if v is not None},
        **_connection_options(deadline_s),
    )


@_translated
class RedisModelStore(ModelStore):
    """`ModelStore` on Redis; see the module docstring for keys and guarantees."""

    def __init__(self, settings: Settings, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> None:
        if not settings.redis_url:
            raise ValueError("RedisModelStore needs settings.redis_url")
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.keep_versions = keep_versions
        self._prefix = settings.topic_prefix
        self._client = redis_client(settings.redis_url, settings.redis_password)
        # idempotency keys and ping answer an HTTP request: bounded by its deadline
        self._prompt = redis_client(
            settings.redis_url, settings.redis_password, deadline_s=settings.api_deadline_s
        )
        self._claim_script = self._prompt.register_script(_CLAIM_SCRIPT)
        self._release_script = self._prompt.register_script(_RELEASE_SCRIPT)
        self._replicated = settings.redis_url.startswith(f"{SENTINEL_SCHEME}:")
        self._save_script = self._client.register_script(_SAVE_SCRIPT)
        self._delete_script = self._client.register_script(_DELETE_SCRIPT)
        self.channel = f"{self._prefix}:model-updated"

    def _key(self, name: str) -> str:
        return f"{self._prefix}:model:{check_name(name)}"

    def load(self, name: str) -> StoredModel | None:
        return self._load_hash(name, self._key(name))

    def load_version(self, name: str, version: int) -> StoredModel | None:
        return self._load_hash(name, f"{self._key(name)}:v:{int(version)}")

    def versions(self, name: str) -> list[int]:
        return sorted(int(v) for v in self._client.zrange(f"{self._key(name)}:versions", 0, -1))

    def names(self) -> list[str]:
        return sorted(n.decode() for n in self._client.smembers(f"{self._prefix}:models"))

    def latest_versions(self) -> dict[str, int]:
        names = self.names()
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.hget(self._key(name), "version")
        return {n: int(v) for n, v in zip(names, pipe.execute(), strict=True) if v is not None}

    def _save_encoded(self, name: str, encoded: EncodedModel, fence: Fence, keep: int) -> int:
        """Fenced atomic write of version expected+1; FencingError if someone was first."""
        key = self._key(name)
        args = [fence.version, name, encoded.kind, encoded.envelope, encoded.arrays,
                keep, self.channel, fence.write_id or "", encoded.write_id]  # fmt: skip
        delay = 0.05
        for attempt in range(_SAVE_ATTEMPTS):
            try:
                return self._save_once(name, [key, f"{self._prefix}:models"], args)
            except ResponseError as exc:
                if str(exc).startswith("NOREPLICAS"):
                    raise StoreUnavailableError(f"redis save of {name!r}: {exc}") from exc
                if not str(exc).startswith("FENCED"):
                    raise
                _, actual, *stored_id = str(exc).split()
                check_fence(
                    name,
                    fence,
                    stored_version=int(actual),
                    stored_write_id=stored_id[0] if stored_id else None,
                    write_id=encoded.write_id,
                )
                # An earlier attempt landed before its reply was lost. (Its WAIT was lost
                # with the reply; the writer's next save waits for everything before it.)
                return int(actual)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
                log.warning("redis save of %r failed (%s); retrying in %.2fs", name, exc, delay)
                time.sleep(delay)
                delay = min(delay * 4, 2.0)
        raise AssertionError("unreachable")

    def _save_once(self, name: str, keys: list[str], args: list) -> int:
        """One save; replicated, it and its WAIT go on one connection (WAIT counts the
        replicas holding that connection's writes), so a replica holds it on return."""
        if not self._replicated:
            return int(self._save_script(keys=keys, args=args))
        pipe = self._client.pipeline(transaction=False)
        self._save_script(keys=keys, args=args, client=pipe)
        pipe.wait(1, int(REPLICA_ACK_S * 1000))
        version, acks = pipe.execute()
        if int(acks) < 1:
            raise StoreUnavailableError(
                f"redis save of {name!r} v{version}: no replica confirmed it within "
                f"{REPLICA_ACK_S:.0f} s (a failover could lose it; the save is retried)"
            )
        return int(version)

    def delete(self, name: str) -> bool:
        """Remove latest, every snapshot, the index and the name, in one script (atomic)."""
        key = self._key(name)
        return bool(self._delete_script(keys=[key, f"{self._prefix}:models"], args=[name]))

    def listen(self) -> PubSubAnnouncements:
        """Subscribes before returning: every save after this call is delivered."""
        return PubSubAnnouncements(self._client, self.channel)

    def claim_key(self, key: str, token: bytes, ttl_s: float) -> bytes | None:
        held = self._claim_script(keys=[self._idem(key)], args=[token, _ms(ttl_s)])
        return None if held is None else bytes(held)

    def settle_key(self, key: str, answer: bytes, ttl_s: float) -> None:
        self._prompt.set(self._idem(key), answer, px=_ms(ttl_s))

    def release_key(self, key: str, token: bytes) -> None:
        self._release_script(keys=[self._idem(key)], args=[token])

    def ping(self) -> None:
        self._prompt.ping()

    def close(self) -> None:
        self._client.close()
        self._prompt.close()

    def _idem(self, key: str) -> str:
        return f"{self._prefix}:idem:{key}"

    def _load_hash(self, name: str, key: str) -> StoredModel | None:
        fields = self._client.hgetall(key)
        if not fields:
            return None
        encoded = EncodedModel(
            kind=fields[b"kind"].decode(),
            envelope=fields[b"meta"].decode(),
            arrays=fields[b"arrays"],
            write_id=fields.get(b"write_id", b"").decode(),
        )
        return decode_model(name, int(fields[b"version"]), encoded)


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 1)


@_translated
class PubSubAnnouncements(Announcements):
    """(name, version) from the update channel; `close` (any thread) ends iteration."""

    _SLICE_S = 0.2  # longest a blocked reader waits before noticing `close`

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._pubsub = client.pubsub()
        self._pubsub.subscribe(channel)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait for the subscription to be live
            message = self._pubsub.get_message(timeout=0.5)
            if message is not None and message["type"] == "subscribe":
                return
        raise RedisConnectionError(f"no confirmation of the subscription to {channel}")

    def get(self, timeout: float | None = None) -> tuple[str, int] | None:
        """Next announcement, or None after `timeout` seconds or once closed."""
        limit = finite_or_none(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        while not self._closed:
            wait = (
                self._SLICE_S
                if deadline is None
                else min(self._SLICE_S, deadline - time.monotonic())
            )
            if wait < 0:
                return None
            with self._lock:
                if self._closed:
                    return None
                try:
                    message = self._pubsub.get_message(timeout=wait)
                except (RedisConnectionError, RedisTimeoutError) as exc:
                    log.warning("redis pub/sub interrupted (%s); resubscribing", exc)
                    message = None
                    time.sleep(min(wait, 0.5))
            if message is not None and message["type"] == "message":
                data = json.loads(message["data"])
                return str(data["name"]), int(data["version"])
        return None

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._pubsub.close()
