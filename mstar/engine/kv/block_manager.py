"""Ref-counted KV blocks with prefix caching of full blocks."""

from __future__ import annotations

from collections import OrderedDict

from mstar.engine.kv.state_cache import StateSlots
from mstar.engine.request.sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] = ()


def chain_hash(prev_hash: int | None, token_ids: tuple[int, ...],
               parts: tuple[str, ...] = ()) -> int:
    """Hash of a full block, chained so equal blocks only match after an equal prefix.

    ``parts``: content hashes of the media parts that condition the block (images and audio
    clips whose placeholders fall in it, cross-attention audio in every block; the chain carries
    those before it), so the same placeholder tokens of another clip never match.
    """
    return hash((prev_hash, token_ids, parts) if parts else (prev_hash, token_ids))


def chain_root(seq: Sequence) -> int | None:
    """Where a request's hash chain starts: its LoRA adapter's load (``Sequence.adapter_load``),
    so the base model and each adapter (whose K/V differ for the same tokens) never share blocks,
    nor an adapter and one loaded later under its name."""
    return None if seq.adapter_load is None else hash(("lora", seq.adapter_load))


class BlockManager:
    """Owns the KV cache blocks of every request, keyed by the request's number (``seq_no``).

    Free blocks stay in an LRU pool with their content hash, so a later request with the same
    prefix can reuse them until they are handed out for something else. Nothing here writes a
    ``Sequence``: the scheduler reads the block ids back by key.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool,
                 state_slots: StateSlots | None = None) -> None:
        self.num_blocks = num_blocks
        self.state_slots = state_slots  # hybrid models: a recurrent-state slot per sequence
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.tables: dict[int, list[int]] = {}  # key -> block ids, in position order
        self.num_hashed: dict[int, int] = {}  # key -> leading blocks already published
        self.slots: dict[int, int] = {}  # key -> recurrent-state slot

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_ids(self, key: int) -> list[int]:
        return self.tables.get(key, [])

    def state_slot(self, key: int) -> int | None:
        return self.slots.get(key)

    def _allocate_fresh(self) -> int:
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding the longest cached prefix of ``seq`` (at least one token left)."""
        if (not self.enable_prefix_caching or seq.params.pooling == "mean"
                or seq.params.thinker_rows):
            # mean pooling needs every prompt token's hidden state; a thinker's rows, its
            # media positions'
            return []
        hits: list[int] = []
        prev = chain_root(seq)
        max_blocks = (len(seq) - 1) // self.block_size
        for i in range(max_blocks):
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            prev = chain_hash(prev, tokens, self._parts_in_block(seq, i))
            block_id = self.hash_to_block.get(prev)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def _parts_in_block(self, seq: Sequence, i: int) -> tuple[str, ...]:
        """The content hashes of the media parts that condition block ``i`` (images, audio)."""
        if not seq.parts and seq.feed is None:
            return ()
        return seq.part_hashes_in(i * self.block_size, (i + 1) * self.block_size)

    def allocate_prompt(self, seq: Sequence, num_new_tokens: int) -> int | None:
        """Give a waiting sequence its cached prefix plus room for ``num_new_tokens``.

        Returns how many tokens came from the prefix cache, or None if it does not fit.
        """
        hits = self._cached_prefix(seq)
        num_cached = len(hits) * self.block_size
        num_new_tokens = min(num_new_tokens, len(seq) - num_cached)
        need_fresh = self.blocks_needed(num_cached + num_new_tokens) - len(hits)
        hits_in_free = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        if need_fresh + hits_in_free > self.num_free_blocks:
            return None
        if self.state_slots is not None:
            slot = self.state_slots.take()
            if slot is None:
                return None
            self.slots[seq.seq_no] = slot
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free[block_id]
            block.ref_count += 1
        self.tables[seq.seq_no] = hits + [self._allocate_fresh() for _ in range(need_fresh)]
        self.num_hashed[seq.seq_no] = len(hits)
        return num_cached

    def _shortfall(self, key: int, num_tokens: int) -> int:
        return max(0, self.blocks_needed(num_tokens) - len(self.block_ids(key)))

    def can_grow_to(self, key: int, num_tokens: int) -> bool:
        """Whether request ``key`` can get blocks for ``num_tokens`` tokens in total."""
        return self._shortfall(key, num_tokens) <= self.num_free_blocks

    def can_grow_all(self, keys: list[int], totals: list[int]) -> bool:
        need = sum(self._shortfall(k, t) for k, t in zip(keys, totals, strict=True))
        return need <= self.num_free_blocks

    def grow_to(self, key: int, num_tokens: int) -> tuple[int, ...]:
        """Blocks for ``num_tokens`` tokens in total; returns the ids added to the table."""
        table = self.tables[key]
        new = [self._allocate_fresh() for _ in range(self.blocks_needed(num_tokens) - len(table))]
        table += new
        return tuple(new)

    def commit_full_blocks(self, seq: Sequence, num_computed: int) -> None:
        """Publish blocks whose K/V are now in the cache (``num_computed`` tokens of ``seq``)
        so later requests can reuse them."""
        if not self.enable_prefix_caching:
            return
        key, table = seq.seq_no, self.tables[seq.seq_no]
        done = self.num_hashed[key]
        full = num_computed // self.block_size
        prev = self.blocks[table[done - 1]].hash if done else chain_root(seq)
        for i in range(done, full):
            block = self.blocks[table[i]]
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            prev = chain_hash(prev, tokens, self._parts_in_block(seq, i))
            block.hash, block.token_ids = prev, tokens
            self.hash_to_block.setdefault(prev, block.block_id)
        self.num_hashed[key] = max(done, full)

    def free_request(self, key: int) -> None:
        """Return a request's blocks (to the LRU pool, hashes kept) and its state slot."""
        # Reverse order: the tail of a chain is evicted before its (more shareable) head.
        for block_id in reversed(self.tables.pop(key, [])):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free[block_id] = None
        self.num_hashed.pop(key, None)
        slot = self.slots.pop(key, None)
        if slot is not None:
            self.state_slots.release(slot)
