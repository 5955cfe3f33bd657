"""One stored response as the store keeps it: JSON bytes, holding only what will be read again.

The response object (``body``) is kept as returned, since GET returns it. The conversation a
follow-up continues keeps only what the model reads (``translate.to_chat``): no reasoning items,
and of every other item only its type's fields (``translate.ITEM_FIELDS``) and its parts' text.
So ids, statuses, summaries, encrypted reasoning, annotations and unknown fields sent in the
input cost nothing once the request is done. Kept as bytes, a response's ``size`` is the memory
it holds, which the store bounds (MSTAR_RESPONSES_STORE_MAX_MB).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from mstar.api_server.responses.protocol import ContentPart, InputItem
from mstar.api_server.responses.translate import ITEM_FIELDS

CONVERSATION = TypeAdapter(list[InputItem])
# What an entry costs besides its bytes: this object, its two bytes objects, the store's key and
# slot (measured with sys.getsizeof, rounded up).
ENTRY_OVERHEAD = 512


def read_part(item: InputItem) -> InputItem:
    """An item with only the fields the model reads."""
    fields = {name: getattr(item, name) for name in ITEM_FIELDS[item.type]}
    for name in ("content", "output"):
        if isinstance(fields.get(name), list):
            fields[name] = [ContentPart(type=p.type, text=p.text) for p in fields[name]]
    return InputItem(type=item.type, **fields)


def read_items(items: list[InputItem]) -> list[InputItem]:
    """The items the model reads (no reasoning), each with only the fields it reads."""
    return [read_part(item) for item in items if item.type != "reasoning"]


class StoredResponse:
    __slots__ = ("_body", "_conversation", "_inputs")

    def __init__(self, body: dict[str, Any], conversation: list[InputItem],
                 inputs: slice = slice(0)) -> None:
        """``inputs``: where the request's own input lies in ``read_items(conversation)`` (after
        the history a ``previous_response_id`` brought, before the output)."""
        self._body = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        self._conversation = CONVERSATION.dump_json(read_items(conversation), exclude_none=True)
        self._inputs = (inputs.start or 0, inputs.stop)

    @property
    def body(self) -> dict[str, Any]:
        """The response object, as it was returned."""
        return json.loads(self._body)

    @property
    def conversation(self) -> list[InputItem]:
        """What a follow-up sees first: the input the model read, then the output."""
        return CONVERSATION.validate_json(self._conversation)

    @property
    def inputs(self) -> list[InputItem]:
        """The request's own input items as the model read them (GET .../input_items)."""
        return self.conversation[slice(*self._inputs)]

    @property
    def size(self) -> int:
        return len(self._body) + len(self._conversation) + ENTRY_OVERHEAD
