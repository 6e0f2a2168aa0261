"""A sandbox entrypoint for lifecycle_check.py: one port, plain HTTP and WebSocket echo.

GET <any path> answers JSON describing the process (path, cwd, HOME, a few env
variables); a WebSocket on any path echoes every message back. Run with the
server venv's Python (it has ``websockets``): ``python echo_server.py PORT``.
"""

import asyncio
import json
import os
import sys
from http import HTTPStatus

from websockets.asyncio.server import serve


async def _echo(connection) -> None:
    async for message in connection:
        await connection.send(message)


def _plain_http(connection, request):
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return None
    body = json.dumps({
        "path": request.path,
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "foo": os.environ.get("FOO"),
        "opensandbox_id": os.environ.get("OPENSANDBOX_ID"),
    })
    response = connection.respond(HTTPStatus.OK, body)
    response.headers["Content-Type"] = "application/json"
    return response


async def main(port: int) -> None:
    async with serve(_echo, "127.0.0.1", port, process_request=_plain_http):
        print(f"echo_server listening on 127.0.0.1:{port}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
