"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter, in vLLM's shape.

Both need MSTAR_ALLOW_RUNTIME_LORA_UPDATING (else 403) and, like every route, the API key. A
load reads only inside MSTAR_LORA_DIR (links resolved first): any other path is a 403 naming
``lora_path``, so the route cannot be used to read arbitrary files. Every live replica applies
the change before the adapter's model name appears (or goes): a request never names an adapter
a replica lacks. An unloaded adapter's running requests finish on it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import Field

from mstar.api_server.context.served import ServedModel
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import error_responses
from mstar.api_server.openai.protocol import StrictModel
from mstar.settings.knobs.lora import ADAPTER_NAME

router = APIRouter()
RESPONSES = {200: {"description": "Success: a sentence saying so (vLLM's answer).",
                   "content": {"text/plain": {"schema": {"type": "string"}}}},
             **error_responses((400, 401, 403, 404, 413, 503))}
FORBIDDEN = "permission_error"  # the error type of a 403 here
UPDATE_TIMEOUT_S = 120.0  # an adapter read from disk by every replica


class LoadLoraRequest(StrictModel):
    lora_name: str = Field(description="The model name the adapter is served under.")
    lora_path: str = Field(description="The adapter's directory, inside MSTAR_LORA_DIR.")


class UnloadLoraRequest(StrictModel):
    lora_name: str = Field(description="A loaded adapter's name.")


@router.post("/v1/load_lora_adapter", response_model=None, responses=RESPONSES)
async def load_lora_adapter(req: LoadLoraRequest, request: Request) -> PlainTextResponse:
    settings = request.app.state.running.settings
    _check_allowed(settings)
    model: ServedModel = request.app.state.model
    if not ADAPTER_NAME.match(req.lora_name):
        raise APIError(400, "lora_name: letters, digits and ._:/- only", "lora_name")
    if model.serves(req.lora_name):
        raise APIError(400, f"The model name '{req.lora_name}' is already served", "lora_name")
    path = inside_lora_dir(req.lora_path, settings.lora_dir)
    await _update(request, req.lora_name, str(path))
    model.adapters.add(req.lora_name, str(path))
    return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")


@router.post("/v1/unload_lora_adapter", response_model=None, responses=RESPONSES)
async def unload_lora_adapter(req: UnloadLoraRequest, request: Request) -> PlainTextResponse:
    _check_allowed(request.app.state.running.settings)
    model: ServedModel = request.app.state.model
    if req.lora_name not in model.adapters:
        raise APIError(404, f"The LoRA adapter '{req.lora_name}' is not loaded", "lora_name",
                       code="model_not_found", kind="invalid_request_error")
    model.adapters.remove(req.lora_name)  # new requests stop selecting it now
    await _update(request, req.lora_name, "")
    return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")


def _check_allowed(settings) -> None:
    if not settings.allow_runtime_lora_updating:
        raise APIError(403, "Loading LoRA adapters at run time is off "
                       "(MSTAR_ALLOW_RUNTIME_LORA_UPDATING)", kind=FORBIDDEN)


def inside_lora_dir(path: str, lora_dir: Path | None) -> Path:
    """``path`` resolved (links followed), if it lies inside ``lora_dir``; else a 403."""
    if lora_dir is None:
        raise APIError(403, "MSTAR_LORA_DIR is unset: run-time loading reads no path",
                       "lora_path", kind=FORBIDDEN)
    root = Path(lora_dir).expanduser().resolve()
    resolved = (root / path).resolve()  # a relative path is taken inside the directory
    if not resolved.is_relative_to(root):
        raise APIError(403, f"lora_path {path!r} is outside MSTAR_LORA_DIR", "lora_path",
                       kind=FORBIDDEN)
    return resolved


async def _update(request: Request, name: str, path: str) -> None:
    """Every live replica applies the change, or the first refusal is the answer."""
    replies = await request.app.state.client.update_lora(name, path, UPDATE_TIMEOUT_S)
    refused = next((r for r in replies if r.status != 200), None)
    if refused is not None:
        raise APIError(refused.status, refused.message, "lora_path" if path else "lora_name")
