"""A standalone master's REST API on loopback that answers from a script, for the backend and trigger tests."""

from __future__ import annotations

import http.server
import json
import threading


class ScriptedMaster:
    """A standalone master's REST API on loopback: each request gets the next answer (an HTTP status code, or a
    JSON body); the last answer repeats."""

    def __init__(self, answers: list):
        self.answers = list(answers)
        self.requests: list[str] = []
        master = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                master.requests.append(self.path)
                answer = master.answers.pop(0) if len(master.answers) > 1 else master.answers[0]
                body = b"master busy" if isinstance(answer, int) else json.dumps(answer).encode()
                self.send_response(answer if isinstance(answer, int) else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
