"""The check every field-table test makes of a row's refused example (JSON routes and the audio
routes' forms alike)."""

from __future__ import annotations

from mstar.api_server.validation.field_table import FieldRow


def check_refused(resp, row: FieldRow) -> None:
    """The refusal has the row's status and names its field; a rejected field says so by name."""
    assert resp.status_code == row.refused_status, resp.text
    error = resp.json()["error"]
    assert error["param"] == row.error_param, error
    if row.status == "rejected":
        assert "not supported" in error["message"] and f"`{row.error_param}`" in error["message"]
