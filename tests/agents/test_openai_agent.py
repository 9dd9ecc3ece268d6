"""The openai agent against a real HTTP server on 127.0.0.1 speaking chat completions."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from looper.agents import make_agent
from looper.agents.base import AgentContext, HistoryView, ProposalRejected
from looper.agents.openai import OpenAIAgent
from looper.errors import ConfigError, HarnessError

KEY = "sk-test-0123456789abcdefghij"
Reply = Callable[[dict], tuple]  # (status, body) or (status, body, headers)


class Server:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body})
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})  # names are case-free
                reply = outer.replies[min(len(outer.requests), len(outer.replies)) - 1]
                status, text, *more = reply(body)
                data = text.encode()
                self.send_response(status)
                for name, value in (more[0] if more else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat(content: str) -> Reply:
    return lambda body: (200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}))


def status(code: int, headers: dict[str, str] | None = None) -> Reply:
    return lambda body: (code, json.dumps({"error": {"message": f"status {code}"}}), headers or {})


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(*replies: Reply) -> Server:
        s = Server(list(replies))
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def ctx(tmp_path: Path, train_py: str) -> AgentContext:
    return AgentContext(checkout=tmp_path, train_py=train_py, program_md="", prompt="THE PROMPT",
                        history=HistoryView())


def agent(url: str, **kw) -> OpenAIAgent:
    kw.setdefault("env", {"OPENAI_API_KEY": KEY})
    kw.setdefault("base_delay", 0.01)
    return OpenAIAgent(url, "test-model", "OPENAI_API_KEY", timeout_seconds=5, **kw)


def good_reply(train_py: str) -> str:
    new = train_py.replace("LR0 = 0.01 ", "LR0 = 0.005")
    return f"DESCRIPTION: LR0 0.01 -> 0.005\n\nHere is the file:\n```python\n{new}```\nLower LR for small data."


def test_good_reply_gives_the_new_train_py(serve, ctx: AgentContext, train_py: str) -> None:
    s = serve(chat(good_reply(train_py)))
    p = agent(s.url).propose(ctx)
    assert p.new_source is not None and "LR0 = 0.005" in p.new_source
    assert p.description == "LR0 0.01 -> 0.005"
    assert p.knobs == {"LR0": (0.01, 0.005)}
    assert "Lower LR" in p.rationale
    req = s.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "test-model"
    assert [m["role"] for m in req["body"]["messages"]] == ["system", "user"]
    assert req["body"]["messages"][1]["content"] == "THE PROMPT"
    assert s.headers[0]["authorization"] == f"Bearer {KEY}"


def test_a_500_then_success_is_retried(serve, ctx: AgentContext, train_py: str) -> None:
    s = serve(status(500), status(429), chat(good_reply(train_py)))
    a = agent(s.url)
    p = a.propose(ctx)
    assert p.new_source is not None and a.tries_used == 3 and len(s.requests) == 3


def test_backoff_grows_exponentially(serve, ctx: AgentContext, train_py: str) -> None:
    s = serve(status(503), status(503), status(503), chat(good_reply(train_py)))
    sleeps: list[float] = []
    agent(s.url, base_delay=1.0, sleep=sleeps.append).propose(ctx)
    assert sleeps == [1.0, 2.0, 4.0]


def test_reply_without_a_code_block_is_rejected(serve, ctx: AgentContext) -> None:
    s = serve(chat("DESCRIPTION: I would lower the LR.\nJust set LR0 = 0.005."))
    with pytest.raises(ProposalRejected, match="no ```python fenced block"):
        agent(s.url).propose(ctx)


def test_reply_that_does_not_compile_is_rejected(serve, ctx: AgentContext) -> None:
    s = serve(chat("DESCRIPTION: x\n```python\ndef f(:\n    pass\n```"))
    with pytest.raises(ProposalRejected, match="does not compile"):
        agent(s.url).propose(ctx)


def test_a_server_that_stays_down_is_a_harness_error(ctx: AgentContext) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    a = agent(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(HarnessError, match="failed 4 times") as info:
        a.propose(ctx)
    assert KEY not in str(info.value)


def test_a_server_that_keeps_answering_500_is_a_harness_error(serve, ctx: AgentContext) -> None:
    s = serve(status(500))
    with pytest.raises(HarnessError, match="HTTP 500"):
        agent(s.url, max_tries=3).propose(ctx)
    assert len(s.requests) == 3


def test_401_is_not_retried_and_never_shows_the_key(serve, ctx: AgentContext) -> None:
    s = serve(status(401))
    with pytest.raises(HarnessError, match="HTTP 401") as info:
        agent(s.url).propose(ctx)
    assert len(s.requests) == 1 and KEY not in str(info.value)


def test_missing_key_names_the_variable_not_a_value(ctx: AgentContext) -> None:
    with pytest.raises(HarnessError, match="environment variable OPENAI_API_KEY is not set"):
        agent("http://127.0.0.1:9/v1", env={"OTHER": "x"}).propose(ctx)


def test_registry_builds_the_openai_agent() -> None:
    class Cfg:
        kind = "openai"
        command = ""
        base_url = "http://127.0.0.1:9/v1/"
        model = "m"
        api_key_env = "MY_KEY"
        timeout_seconds = 30
        max_failures = 2

    a = make_agent(Cfg(), base_delay=0.0)
    assert isinstance(a, OpenAIAgent) and a.url == "http://127.0.0.1:9/v1/chat/completions"
    Cfg.model = ""
    with pytest.raises(ConfigError, match="agent.model"):
        make_agent(Cfg())


def test_retry_after_is_honoured_and_capped(serve, ctx: AgentContext, train_py: str) -> None:
    s = serve(status(429, {"Retry-After": "3"}), status(503, {"retry-after-ms": "1500"}),
              status(503, {"Retry-After": "900"}), status(503), chat(good_reply(train_py)))
    sleeps: list[float] = []
    a = agent(s.url, base_delay=1.0, max_delay=30.0, max_tries=5, sleep=sleeps.append)
    assert a.propose(ctx).new_source is not None
    # the server's wish (seconds, milliseconds), capped at max_delay; exponential when it says nothing
    assert sleeps == [3.0, 1.5, 30.0, 8.0] and a.tries_used == 5


def test_an_empty_api_key_env_sends_no_authorization_header(serve, ctx: AgentContext, train_py: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the SDK's own default must not leak in
    s = serve(chat(good_reply(train_py)))
    p = OpenAIAgent(s.url, "test-model", "", timeout_seconds=5).propose(ctx)
    assert p.new_source is not None
    assert "authorization" not in s.headers[0] and KEY not in json.dumps(s.headers[0])


def test_config_accepts_an_empty_api_key_env_for_openai() -> None:
    from looper.config import AgentConfig

    cfg = AgentConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", api_key_env="")
    a = make_agent(cfg)
    assert isinstance(a, OpenAIAgent) and a.api_key_env == "" and a._key() is None


@pytest.mark.parametrize("body,words", [
    ("not json", "not JSON"),
    ('{"choices": []}', "no choices[0].message.content"),
    ('{"choices": [{"message": {"role": "assistant", "content": null}}]}', "content is not text"),
])
def test_a_malformed_answer_is_retried_then_a_harness_error(serve, ctx: AgentContext, body: str, words: str) -> None:
    s = serve(lambda _: (200, body))
    a = agent(s.url, max_tries=2)
    with pytest.raises(HarnessError, match="failed 2 times") as info:
        a.propose(ctx)
    assert words in str(info.value) and len(s.requests) == 2 and a.tries_used == 2
