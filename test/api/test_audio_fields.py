"""Every row of the audio routes' field table (docs/openai_api.rst) behaves as the table says, on
the stub Whisper (multilingual); and the table, the docs and the published form fields agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from audio_files import encoded
from field_checks import check_refused
from starlette.testclient import TestClient
from whisper_stub import speech_script, whisper_app

from mstar.api_server.validation.audio_rows import AUDIO
from mstar.api_server.validation.field_table import TABLE, rst_table

PATHS = {"transcriptions": "/v1/audio/transcriptions", "translations": "/v1/audio/translations"}
BASE = {"language": "fr"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "openai_api.rst"
CASES = [(endpoint, row) for row in TABLE for endpoint in row.endpoints if endpoint in AUDIO]


@pytest.fixture(scope="module")
def client(tiny_tokenizer):
    a = tiny_tokenizer.encode(" the cat", add_special_tokens=False)
    app, _, _ = whisper_app(tiny_tokenizer, speech_script((a, a, "", "")), multilingual=True)
    return TestClient(app)


def _post(client: TestClient, endpoint: str, fragment: dict):
    fields = {**BASE, **fragment}
    data = fields.pop("file", None)
    audio = encoded() if data is None else data.encode()
    return client.post(PATHS[endpoint], files={"file": ("a.wav", audio, "audio/wav")},
                       data=fields)


@pytest.mark.parametrize("case", CASES, ids=[f"{e}:{r.name}" for e, r in CASES])
def test_each_audio_field_behaves_as_the_table_says(client, case):
    endpoint, row = case
    if row.accepted is not None:
        resp = _post(client, endpoint, row.accepted)
        assert resp.status_code == 200, resp.text
        assert "x-mstar-ignored-fields" not in resp.headers  # a known field, never "unknown"
    if row.refused is not None:
        check_refused(_post(client, endpoint, row.refused), row)
    assert row.accepted is not None or row.refused is not None


@pytest.mark.parametrize("endpoint", AUDIO)
def test_every_form_field_has_a_row_and_every_row_a_field(client, endpoint):
    schema = client.get("/openapi.json").json()
    body = schema["paths"][PATHS[endpoint]]["post"]["requestBody"]["content"]
    ref = body["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[1]
    fields = set(schema["components"]["schemas"][ref]["properties"])
    assert fields == {row.name for row in TABLE if endpoint in row.endpoints}


def test_the_docs_table_is_the_table_in_code():
    text = DOCS.read_text()
    start = text.index(".. audio-table-start") + len(".. audio-table-start\n\n")
    end = text.index(".. audio-table-end")
    assert text[start:end].strip() == rst_table(AUDIO).strip(), (
        "docs/openai_api.rst is stale: paste the output of `python -m "
        "mstar.api_server.validation.field_table transcriptions translations` between its "
        "audio-table markers")


def test_field_rows_are_named_once_per_endpoint():
    for endpoint in AUDIO:
        names = [row.name for row in TABLE if endpoint in row.endpoints]
        assert len(names) == len(set(names)), endpoint




def test_unknown_form_fields_follow_the_policy(tiny_tokenizer):
    a = tiny_tokenizer.encode(" the cat", add_special_tokens=False)
    for mode, status in (("warn", 200), ("reject", 400)):
        app, _, _ = whisper_app(tiny_tokenizer, speech_script((a, a, "", "")),
                                multilingual=True, unknown_request_fields=mode)
        resp = _post(TestClient(app), "transcriptions", {"temprature": "0.1"})
        assert resp.status_code == status, resp.text
        if mode == "warn":
            assert resp.headers["x-mstar-ignored-fields"] == "temprature"
        else:
            assert resp.json()["error"]["param"] == "temprature"
            assert "did you mean 'temperature'" in resp.json()["error"]["message"]
