"""GET /v1/responses/{id}/input_items: a stored response's own input, as a page of items
(``client.responses.input_items.list``).

The items are those the model read (``kept.read_items``: no reasoning items; a message's role and
text parts), each with an id made from the response's id and its position, so that ``after``
pages stably. ``order`` is ``desc`` (newest first) unless ``asc`` is asked for, as OpenAI's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mstar.api_server.http.errors import APIError
from mstar.api_server.responses.protocol import InputItem

DEFAULT_PAGE = 20
MAX_PAGE = 100
ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


class InputItemsQuery(BaseModel):
    after: str | None = Field(None, description="The id of the item to list after.")
    limit: int = Field(DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    order: Literal["asc", "desc"] = "desc"
    include: list[str] | None = Field(None, description="Not supported: a 400 unless empty.")


def item_object(response_id: str, k: int, item: InputItem) -> dict[str, Any]:
    """Input item ``k`` as the API shows it: text content as a list of parts."""
    shown: dict[str, Any] = item.model_dump(exclude_none=True)
    if isinstance(item.content, str):
        kind = "output_text" if item.role == "assistant" else "input_text"
        shown["content"] = [{"type": kind, "text": item.content}]
    return {"id": f"{ID_PREFIX[item.type]}_{k}_{response_id}", **shown, "status": "completed"}


def page(response_id: str, items: list[InputItem], query: InputItemsQuery) -> dict[str, Any]:
    """The list object of the items ``query`` asks for."""
    if query.include:
        raise APIError(400, "`include` is not supported: the items hold their text already",
                       "include")
    shown = [item_object(response_id, k, item) for k, item in enumerate(items)]
    if query.order == "desc":
        shown.reverse()
    if query.after is not None:
        ids = [item["id"] for item in shown]
        if query.after not in ids:
            raise APIError(400, f"no input item {query.after[:80]!r} in this response", "after")
        shown = shown[ids.index(query.after) + 1:]
    data = shown[:query.limit]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(shown) > len(data)}
