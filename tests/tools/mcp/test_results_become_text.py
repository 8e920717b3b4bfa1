"""What a server returns, as the model reads it: text as it is, an image or an embedded
resource as a short description (a text resource's text follows, for the output bound
and the artifact), and ``isError`` as an ``Error:`` result naming the server."""

from __future__ import annotations

import json

import pytest

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tests.tools.mcp.conftest import Connect

CTX = CallContext(job_id="j", call_id="c1")


async def test_images_and_resources_are_described(
    connect: Connect, everything_server: list[str]
) -> None:
    catalog = await connect(
        f"mcp_servers: [{{name: every, command: {json.dumps(everything_server)}}}]"
    )
    image = catalog.tools["every_get-tiny-image"]
    out = str(await image.execute(image.args_model.model_validate({}), CTX))
    assert "[image image/png, " in out and " bytes]" in out
    assert len(out) < 2000  # the base64 itself is not given to the model
    resource = catalog.tools["every_get-resource-reference"]
    out = str(
        await resource.execute(
            resource.args_model.model_validate({"resourceType": "Text", "resourceId": 1}), CTX
        )
    )
    assert "[resource " in out


async def test_is_error_is_an_error_result(connect: Connect, filesystem_server: list[str]) -> None:
    catalog = await connect(
        f"mcp_servers: [{{name: fs, command: {json.dumps(filesystem_server)}}}]"
    )
    tool = catalog.tools["fs_read_text_file"]
    missing = f"{filesystem_server[1]}/missing.txt"
    with pytest.raises(ToolError, match=r"^mcp server 'fs': .*(ENOENT|no such file)"):
        await tool.execute(tool.args_model.model_validate({"path": missing}), CTX)
