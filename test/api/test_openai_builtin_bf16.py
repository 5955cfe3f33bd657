"""test_openai_builtin's checks once more, on the built-in model served in bfloat16 (what
MSTAR_DTYPE=auto picks on CPUs with avx512_bf16 or AMX; emulated, and slower, elsewhere):
json_schema output validates, and logit_bias changes the greedy first token."""

from __future__ import annotations

import pytest
from test_openai_builtin import (  # noqa: F401 (collected here, on this module's server)
    client,
    pytestmark,
    test_json_schema_output_validates,
    test_logit_bias_changes_the_greedy_first_token,
)


@pytest.fixture()
def server(builtin_server_bf16):
    return builtin_server_bf16
