"""A small HTTP/1.1 proxy on loopback that counts the requests passing it.

Used by the `files.watch` workload to count what an idle watch costs: epp-host
is pointed at it (ABX_OPENSANDBOX_BASE_URL) in server-proxy mode
(ABX_OPENSANDBOX_USE_SERVER_PROXY=true), so every request, execd's included,
passes it. One request per connection: the proxy sets `Connection: close`
on the way in, so a kept-alive connection cannot hide requests. WebSocket
upgrades are passed through untouched (and counted once). Stdlib only.
"""

from __future__ import annotations

import socket
import threading
import time


class CountingProxy:
    def __init__(self, upstream: str) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self.upstream = (host, int(port))
        self.seen: list[tuple[float, str, str]] = []  # (monotonic time, method, path)
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def count(self, method: str = "*", path: str = "", since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for t, m, p in self.seen
                       if t >= since and (method == "*" or m == method) and path in p)

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = client.recv(65536)
                if not data:
                    return
                buf += data
            head, rest = buf.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            method, path = (lines[0].split(b" ") + [b"", b""])[:2]
            with self.lock:
                self.seen.append((time.monotonic(), method.decode(), path.decode(errors="replace")))
            upgrade = any(l.lower().startswith(b"upgrade:") for l in lines[1:])
            if not upgrade:
                lines = [lines[0]] + [l for l in lines[1:]
                                      if not l.lower().startswith((b"connection:", b"keep-alive:"))]
                lines.append(b"Connection: close")
            upstream = socket.create_connection(self.upstream)
            upstream.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + rest)
            # Upstream's answer ends the exchange (it closes after one answer).
            threading.Thread(target=self.pipe, args=(client, upstream), daemon=True).start()
            self.pipe(upstream, client)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    @staticmethod
    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
