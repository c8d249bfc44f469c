"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 for tests."""
import http.server
import json
import threading


class FakeOpenAI:
    """A threaded chat-completions server on 127.0.0.1; `reply(body)` gives (status, content).
    Requests beyond `max_requests` get HTTP 503, so a runaway client cannot loop forever."""

    def __init__(self, reply, max_requests: int = 50):
        self.reply, self.max_requests, self.requests = reply, max_requests, []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append((self.path, body))
                status, content = ((503, None) if len(owner.requests) > owner.max_requests
                                   else owner.reply(body))
                payload = json.dumps({"choices": [{"message": {"role": "assistant",
                                                               "content": content}}]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
