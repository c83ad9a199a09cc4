#!/usr/bin/env python3
"""A loopback HTTP server that misbehaves on purpose, for the remote cache tier's fault tests.

usage: fault_server.py PORT_FILE
Binds 127.0.0.1 on a free port, writes the port to PORT_FILE, serves until killed. The first path
segment picks the behaviour; the rest is the object's name (e.g. /store/v2/<key>.kvjit):

  store     a plain object store: PUT keeps the body, GET/HEAD serve it (404 when absent)
  sleep     waits 10 s before answering (a remote past every timeout)
  500       answers 500 to everything
  403put    PUT answers 403, GET/HEAD behave like store (reads go on after refused writes)
  429       answers 429 to everything
  truncate  GET promises the stored object's length but sends half of it, then closes
  corrupt   GET serves the stored object with one payload byte flipped
  otherkey  GET serves another stored object than the one named (another key's entry)
  huge      GET announces a 2 GiB body and starts sending zeros
  headonly  HEAD answers 200 (as if every object were there), GET answers 404
  silent    accepts the connection, reads the request and never answers (until killed)
Objects are shared between behaviours: PUT to /store/..., then GET /corrupt/... serves it flipped.
"""
import http.server
import socketserver
import sys
import threading
import time

objects = {}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def split(self):
        parts = self.path.split("/", 2)
        mode = parts[1] if len(parts) > 1 else ""
        name = parts[2] if len(parts) > 2 else ""
        return mode, name

    def answer(self, code, body=b"", length=None):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def do_PUT(self):
        mode, name = self.split()
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if mode == "sleep":
            time.sleep(10)
        if mode in ("500",):
            return self.answer(500)
        if mode in ("403put",):
            return self.answer(403)
        if mode == "429":
            return self.answer(429)
        with lock:
            objects[name] = body
        self.answer(201)

    def do_GET(self):
        mode, name = self.split()
        if mode == "headonly":
            return self.answer(200, length=4096) if self.command == "HEAD" else self.answer(404)
        if mode == "silent":
            while True:
                time.sleep(60)
        if mode == "sleep":
            time.sleep(10)
            return self.answer(404)
        if mode == "500":
            return self.answer(500, b"server error")
        if mode == "429":
            return self.answer(429)
        if mode == "huge":
            self.send_response(200)
            self.send_header("Content-Length", str(2 << 30))
            self.end_headers()
            try:
                chunk = b"\0" * 65536
                for _ in range(32768):
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        with lock:
            if mode == "otherkey":
                body = next((v for k, v in objects.items() if k != name), None)
            else:
                body = objects.get(name)
        if body is None:
            return self.answer(404)
        if mode == "truncate":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "corrupt":
            body = bytearray(body)
            body[-1] ^= 0x40
            body = bytes(body)
        self.answer(200, body)

    do_HEAD = do_GET


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
