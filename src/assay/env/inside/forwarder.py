#!/usr/bin/env python3
"""Relay TCP connections on 127.0.0.1:PORT to a Unix socket, for each PORT=SOCKET argument.

Started inside the sandbox in front of each command (`assay.env.net.forwarder.wrap_command`)
so that case code written for upstream reaches the company LLM gateway and the customer's
services at `http://127.0.0.1:PORT`; the sockets are bound read-only at `/run/assay/`.
Prints `ready` once every port listens (or an error line and exits 1 or 2).
"""
from __future__ import annotations

import contextlib
import socket
import sys
import threading

BUF = 65536


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(BUF)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def relay(conn: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError as e:
        sys.stderr.write(f"forwarder: cannot reach {path}: {e}\n")
        conn.close()
        up.close()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        threading.Thread(target=relay, args=(conn, path), daemon=True).start()


def listen(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    s.listen(128)
    return s


def main(argv: list[str]) -> int:
    pairs: list[tuple[int, str]] = []
    for arg in argv:
        digits, sep, path = arg.partition("=")
        if not sep or not digits.isdigit() or not 0 < int(digits) < 65536 or not path:
            sys.stdout.write(f"error: bad argument {arg!r} (want PORT=/path/to.sock)\n")
            return 2
        pairs.append((int(digits), path))
    if not pairs:
        sys.stdout.write("error: no PORT=SOCKET pairs given\n")
        return 2
    listeners: list[tuple[socket.socket, str]] = []
    for port, path in pairs:
        try:
            listeners.append((listen(socket.AF_INET, "127.0.0.1", port), path))
        except OSError as e:
            sys.stdout.write(f"error: cannot listen on 127.0.0.1:{port}: {e}\n")
            return 1
        with contextlib.suppress(OSError):  # "localhost" may resolve to ::1 first; best effort
            listeners.append((listen(socket.AF_INET6, "::1", port), path))
    threads = [threading.Thread(target=serve, args=lp, daemon=True) for lp in listeners]
    for t in threads:
        t.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
