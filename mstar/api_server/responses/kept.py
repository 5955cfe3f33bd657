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


class StoredResponse:
    __slots__ = ("_body", "_conversation")

    def __init__(self, body: dict[str, Any], conversation: list[InputItem]) -> None:
        self._body = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        read = [read_part(item) for item in conversation if item.type != "reasoning"]
        self._conversation = CONVERSATION.dump_json(read, exclude_none=True)

    @property
    def body(self) -> dict[str, Any]:
        """The response object, as it was returned."""
        return json.loads(self._body)

    @property
    def conversation(self) -> list[InputItem]:
        """What a follow-up sees first: the input the model read, then the output."""
        return CONVERSATION.validate_json(self._conversation)

    @property
    def size(self) -> int:
        return len(self._body) + len(self._conversation) + ENTRY_OVERHEAD
