"""Which replica a new request goes to (MSTAR_ROUTE_POLICY), and what the choices were.

``least_loaded``: the replica with the fewest live requests here (then fewest waiting and least KV
cache in use by its last stats). ``prefix``: the replica this API server last sent the longest
prefix of the prompt to, whole KV blocks of MSTAR_KV_BLOCK_SIZE tokens, since that replica's prefix
cache most likely holds it; bounded by load: the replica takes the request only while its live
requests, counting this one, exceed the least-loaded replica's by at most
MSTAR_ROUTE_MAX_IMBALANCE. A prompt with no known prefix, or whose replica is too busy, goes to the
least-loaded replica, and its blocks are remembered there from then on.

The table is this process's guess, not the workers' caches: a worker may have evicted the blocks
(then the request is simply computed again, as it would be elsewhere). It keeps the hashes of the
last ``PREFIX_TABLE_ENTRIES`` block prefixes. Image placeholder tokens hash alike whatever the
image: a mismatch only costs the guess, never correctness (the workers' own cache keys decide hits).

With one replica nothing is hashed or remembered: every request goes to replica 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from mstar.ipc import messages as m

PREFIX_TABLE_ENTRIES = 65536  # block prefixes remembered (least recently routed go first)
Rule = Literal["only", "prefix", "least_loaded", "imbalance"]  # why a replica was chosen


def least_loaded(load: list[int], stats: dict[int, m.WorkerStats], among: list[int]) -> int:
    """The replica for a new request, of those ``among`` (the live ones): fewest live requests
    here, then (by its last stats) fewest waiting and least KV cache in use, then the lowest
    index."""
    def key(i: int) -> tuple:
        reported = stats.get(i)
        return (load[i], reported.waiting if reported else 0,
                reported.kv_cache_usage if reported else 0.0, i)

    return min(among, key=key)


def block_hashes(token_ids: Sequence[int], block_size: int, salt: str | None) -> list[int]:
    """One hash per whole block of the prompt, each covering every token up to the block's end
    (a chain, as the workers' prefix cache keys blocks); ``salt`` (a LoRA adapter's name) keeps
    different adapters' prefixes apart, as their KV differs."""
    hashes: list[int] = []
    previous = hash(salt)
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        previous = hash((previous, tuple(token_ids[start:start + block_size])))
        hashes.append(previous)
    return hashes


def cached_replica(table: dict[int, int], hashes: list[int], among: list[int]) -> int | None:
    """The live replica that was sent the longest of these block prefixes, if any was."""
    for key in reversed(hashes):
        replica = table.get(key)
        if replica is not None and replica in among:
            return replica
    return None


def within_imbalance(load: list[int], replica: int, among: list[int], max_imbalance: int) -> bool:
    """Whether ``replica`` may take one more request: its live requests, counting the new one,
    exceed the least-loaded live replica's by at most ``max_imbalance``."""
    return load[replica] + 1 - min(load[i] for i in among) <= max_imbalance


@dataclass
class Router:
    """The routing policy of one API server, its prefix table, and its counts for /metrics."""

    policy: Literal["prefix", "least_loaded"]
    block_size: int
    max_imbalance: int
    table: OrderedDict[int, int] = field(default_factory=OrderedDict)
    decisions: dict[tuple[int, Rule], int] = field(default_factory=dict)  # (replica, rule) -> n
    hits: dict[int, int] = field(default_factory=dict)  # replica -> requests with a cache hit
    cached_tokens: dict[int, int] = field(default_factory=dict)  # replica -> prompt tokens

    @classmethod
    def of(cls, settings) -> Router:
        return cls(settings.route_policy, settings.kv_block_size, settings.route_max_imbalance)

    def choose(self, token_ids: Sequence[int], salt: str | None, load: list[int],
               stats: dict[int, m.WorkerStats], among: list[int]) -> int:
        """The replica for a new request (``among``: the live ones), remembered and counted."""
        replica, rule = self._decide(token_ids, salt, load, stats, among)
        self.decisions[(replica, rule)] = self.decisions.get((replica, rule), 0) + 1
        return replica

    def _decide(self, token_ids: Sequence[int], salt: str | None, load: list[int],
                stats: dict[int, m.WorkerStats], among: list[int]) -> tuple[int, Rule]:
        if len(load) == 1:
            return among[0], "only"
        if self.policy == "least_loaded":
            return least_loaded(load, stats, among), "least_loaded"
        hashes = block_hashes(token_ids, self.block_size, salt)
        cached = cached_replica(self.table, hashes, among)
        if cached is not None and within_imbalance(load, cached, among, self.max_imbalance):
            replica, rule = cached, "prefix"
        else:
            replica = least_loaded(load, stats, among)
            rule = "least_loaded" if cached is None else "imbalance"
        self._remember(hashes, replica)
        return replica, rule

    def _remember(self, hashes: list[int], replica: int) -> None:
        for key in hashes:
            self.table[key] = replica
            self.table.move_to_end(key)
        while len(self.table) > PREFIX_TABLE_ENTRIES:
            self.table.popitem(last=False)

    def observe(self, replica: int, num_cached_tokens: int) -> None:
        """A finished request's prefix-cache hit on its replica (its cached prompt tokens)."""
        if num_cached_tokens > 0:
            self.hits[replica] = self.hits.get(replica, 0) + 1
            self.cached_tokens[replica] = self.cached_tokens.get(replica, 0) + num_cached_tokens
