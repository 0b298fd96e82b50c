#!/usr/bin/env python3
"""Relay TCP connections on 127.0.0.1:PORT to a Unix socket, for each PORT=SOCKET argument.

Started inside the sandbox in front of each command (`assay.env.net.forwarder.wrap_command`)
so that case code written for upstream reaches the company LLM gateway and the customer's
services at `http://127.0.0.1:PORT`; the sockets are bound read-only at `/run/assay/`.
Prints `ready` once every port listens (or an error line and exits 1 or 2).
"""
import socket
import sys
import threading

BUF = 65536


def pump(src, dst):
    try:
        while True:
            data = src.recv(BUF)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def relay(conn, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError as e:
        sys.stderr.write("forwarder: cannot reach %s: %s\n" % (path, e))
        conn.close()
        up.close()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()


def serve(listener, path):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        threading.Thread(target=relay, args=(conn, path), daemon=True).start()


def listen(family, host, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    s.listen(128)
    return s


def main(argv):
    pairs = []
    for arg in argv:
        port, sep, path = arg.partition("=")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not path:
            sys.stdout.write("error: bad argument %r (want PORT=/path/to.sock)\n" % arg)
            return 2
        pairs.append((int(port), path))
    if not pairs:
        sys.stdout.write("error: no PORT=SOCKET pairs given\n")
        return 2
    listeners = []
    for port, path in pairs:
        try:
            listeners.append((listen(socket.AF_INET, "127.0.0.1", port), path))
        except OSError as e:
            sys.stdout.write("error: cannot listen on 127.0.0.1:%d: %s\n" % (port, e))
            return 1
        try:  # "localhost" may resolve to ::1 first; best effort
            listeners.append((listen(socket.AF_INET6, "::1", port), path))
        except OSError:
            pass
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
