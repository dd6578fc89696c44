#!/usr/bin/env python3
"""The local stack's downstream: answers 200 to any request and logs each call's
Idempotency-Key and X-Runonce-* headers, one JSON line per call, on stdout.

    python3 sink.py 127.0.0.1:8099
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink(BaseHTTPRequestHandler):
    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        call = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "method": self.command,
            "path": self.path,
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "run_id": self.headers.get("X-Runonce-Run-Id"),
            "job": self.headers.get("X-Runonce-Job"),
            "attempt": self.headers.get("X-Runonce-Attempt"),
            "schedule_time": self.headers.get("X-Runonce-Schedule-Time"),
            "body_bytes": len(body),
        }
        print(json.dumps(call), flush=True)
        out = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):  # the JSON lines above are the log
        pass


if __name__ == "__main__":
    host, port = sys.argv[1].rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), Sink).serve_forever()
