"""The replica choice (``generation.routing``): the same prefix goes to the same replica while load
allows; no choice puts a replica more than MSTAR_ROUTE_MAX_IMBALANCE above the least loaded; one
replica changes nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mstar.api_server.generation.routing import (
    PREFIX_TABLE_ENTRIES,
    Router,
    block_hashes,
    cached_replica,
    within_imbalance,
)

BLOCK = 4


def _router(max_imbalance: int = 8, policy: str = "prefix") -> Router:
    return Router(policy, BLOCK, max_imbalance)


def _prompt(system: int, user: int, length: int = 3 * BLOCK) -> list[int]:
    """A prompt of ``length`` tokens of one system prompt, then a user message's tokens."""
    return [1000 + system] * length + [user, user + 1]


def test_block_hashes_chain_whole_blocks_and_keep_adapters_apart():
    ids = list(range(11))  # two whole blocks, three tokens left over
    hashes = block_hashes(ids, BLOCK, None)
    assert len(hashes) == 2
    assert block_hashes(ids[:8] + [99, 98], BLOCK, None) == hashes  # the tail is not hashed
    assert block_hashes([0, 1, 2, 3, 9, 9, 9, 9], BLOCK, None)[0] == hashes[0]
    assert block_hashes([0, 1, 2, 3, 9, 9, 9, 9], BLOCK, None)[1] != hashes[1]
    assert block_hashes(ids, BLOCK, "adapter") != hashes
    assert block_hashes([1, 2], BLOCK, None) == []


def test_cached_replica_takes_the_longest_known_prefix_on_a_live_replica():
    hashes = block_hashes(list(range(12)), BLOCK, None)
    table = {hashes[0]: 0, hashes[1]: 1}
    assert cached_replica(table, hashes, [0, 1]) == 1
    assert cached_replica(table, hashes, [0]) == 0  # replica 1 is down
    assert cached_replica({}, hashes, [0, 1]) is None


def test_within_imbalance_counts_the_new_request():
    assert within_imbalance([3, 1], 0, [0, 1], 3)
    assert not within_imbalance([3, 1], 0, [0, 1], 2)
    assert within_imbalance([9, 1], 0, [0], 1)  # only itself is up


@given(st.lists(st.integers(0, 7), min_size=1, max_size=60), st.integers(2, 4))
def test_a_shared_prefix_stays_on_one_replica_while_load_allows(systems, replicas):
    router, load = _router(max_imbalance=10**6), [0] * replicas
    home: dict[int, int] = {}
    for n, system in enumerate(systems):
        replica = router.choose(_prompt(system, n), None, load, {}, list(range(replicas)))
        assert home.setdefault(system, replica) == replica
        load[replica] += 1


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=80),
       st.integers(2, 4), st.integers(1, 6))
def test_no_choice_exceeds_the_allowed_imbalance(steps, replicas, max_imbalance):
    """Requests arrive (and some earlier ones finish) in any order; every choice leaves the chosen
    replica at most ``max_imbalance`` above the least-loaded one."""
    router, load = _router(max_imbalance), [0] * replicas
    live: list[int] = []
    for n, (system, finish_one) in enumerate(steps):
        if finish_one and live:
            load[live.pop(0)] -= 1
        replica = router.choose(_prompt(system, n), None, load, {}, list(range(replicas)))
        assert load[replica] + 1 - min(load) <= max_imbalance
        load[replica] += 1
        live.append(replica)


def test_a_busy_prefix_replica_is_passed_over_and_counted():
    router, load = _router(max_imbalance=2), [0, 0]
    first = router.choose(_prompt(0, 0), None, load, {}, [0, 1])
    load[first] = 2  # 2 + 1 - 0 > 2
    other = router.choose(_prompt(0, 1), None, load, {}, [0, 1])
    assert other != first
    assert router.decisions == {(first, "least_loaded"): 1, (other, "imbalance"): 1}


def test_distinct_prompts_spread_by_load():
    router, load = _router(), [0, 0]
    for system in range(4):
        load[router.choose(_prompt(system, 0), None, load, {}, [0, 1])] += 1
    assert load == [2, 2]


def test_least_loaded_policy_ignores_prefixes():
    router, load = _router(policy="least_loaded"), [0, 0]
    chosen = []
    for n in range(4):
        chosen.append(router.choose(_prompt(0, n), None, load, {}, [0, 1]))
        load[chosen[-1]] += 1
    assert chosen == [0, 1, 0, 1]
    assert not router.table


def test_one_replica_changes_nothing():
    router = _router()
    assert router.choose(_prompt(0, 0), None, [5], {}, [0]) == 0
    assert not router.table
    assert router.decisions == {(0, "only"): 1}


def test_a_down_replica_is_never_chosen_for_its_prefix():
    router, load = _router(), [0, 0]
    first = router.choose(_prompt(0, 0), None, load, {}, [0, 1])
    assert router.choose(_prompt(0, 1), None, load, {}, [1 - first]) == 1 - first


def test_the_prefix_table_is_bounded():
    router, load = _router(), [0, 0]
    for system in range(PREFIX_TABLE_ENTRIES // 3 + 2):
        router.choose(_prompt(system, 0), None, load, {}, [0, 1])
    assert len(router.table) == PREFIX_TABLE_ENTRIES


def test_observed_hits_are_counted_per_replica():
    router = _router()
    router.observe(1, 32)
    router.observe(1, 0)
    router.observe(0, 16)
    assert router.hits == {1: 1, 0: 1}
    assert router.cached_tokens == {1: 32, 0: 16}
