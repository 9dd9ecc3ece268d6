"""The openai agent against a third-party OpenAI-compatible server: a LiteLLM proxy on 127.0.0.1.

The proxy (``litellm --config cfg.yaml``, a dev dependency: ``pip install 'litellm[proxy]'``)
serves one model whose ``litellm_params.mock_response`` is a fixed reply: the fixture
workspace's train.py with QUALITY 0.5 -> 0.8. It checks the key itself (a ``master_key``), so
a wrong key, or none, is refused by the server, not by this project's code (LiteLLM 1.108
without a database answers an unknown key with HTTP 400 "No connected db." and a request
with no key at all with HTTP 500; the tests assert a refusal, not one of those codes).

The last test runs the whole loop against it, then stops the proxy while the first candidate
trains: the next proposal fails after its retries, and the night halts (exit 3) with exactly
one page. The proxy takes a while to start on a busy machine (imports); it is started once.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

from looper.agents.base import AgentContext, HistoryView
from looper.agents.openai import OpenAIAgent
from looper.errors import HarnessError

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LITELLM = Path(sys.executable).with_name("litellm")
MODEL = "fixture-model"
START_SECONDS = 300  # a cold start imports a lot; on 2 busy cores it has taken 110 s
TRAIN_PY = (FIXTURE / "train.py").read_text()
NEW_TRAIN_PY = TRAIN_PY.replace("QUALITY = 0.5 ", "QUALITY = 0.8 ").replace("SLEEP = 0.0 ", "SLEEP = 2.5 ")
REPLY = f"DESCRIPTION: QUALITY 0.5 -> 0.8\n\n```python\n{NEW_TRAIN_PY}```\nHigher quality, a slower run.\n"


class Proxy:
    """One ``litellm`` proxy process (and its children) in a process group of its own."""

    def __init__(self, folder: Path) -> None:
        if not LITELLM.exists():
            pytest.fail(f"the LiteLLM proxy is not installed in this environment ({LITELLM} missing): "
                        f"{sys.executable} -m pip install 'litellm[proxy]'")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.key = "sk-litellm-" + secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        cfg = folder / "litellm.yaml"
        cfg.write_text(json.dumps({  # JSON is YAML
            "model_list": [{"model_name": MODEL, "litellm_params": {
                "model": f"openai/{MODEL}", "api_key": "unused-upstream", "mock_response": REPLY}}],
            "general_settings": {"master_key": self.key},
        }))
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False",
                   NO_PROXY="127.0.0.1,localhost")
        for name in ("OPENAI_API_KEY", "DATABASE_URL", "LITELLM_MASTER_KEY"):
            env.pop(name, None)
        self.log = folder / "litellm.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([str(LITELLM), "--config", str(cfg), "--host", "127.0.0.1",
                                          "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"litellm exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health/liveliness", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)
        self.stop()
        pytest.fail(f"litellm did not answer within {START_SECONDS} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Stop it the hard way: the port refuses connections from now on."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    p = Proxy(tmp_path_factory.mktemp("litellm"))
    yield p
    p.stop()


def _ctx(tmp_path: Path) -> AgentContext:
    return AgentContext(checkout=tmp_path, train_py=TRAIN_PY, program_md="", prompt="THE PROMPT",
                        history=HistoryView())


def test_a_litellm_proxy_answers_the_agent(proxy: Proxy, tmp_path: Path) -> None:
    agent = OpenAIAgent(proxy.url, MODEL, "LITELLM_TEST_KEY", timeout_seconds=60,
                        env={"LITELLM_TEST_KEY": proxy.key})
    p = agent.propose(_ctx(tmp_path))
    assert p.new_source == NEW_TRAIN_PY
    assert p.description == "QUALITY 0.5 -> 0.8" and "slower run" in p.rationale
    assert p.knobs["QUALITY"] == (0.5, 0.8) and p.knobs["SLEEP"] == (0.0, 2.5)
    assert agent.tries_used == 1


def test_a_wrong_key_is_refused_by_the_proxy_and_never_shown(proxy: Proxy, tmp_path: Path) -> None:
    agent = OpenAIAgent(proxy.url, MODEL, "LITELLM_TEST_KEY", timeout_seconds=60,
                        env={"LITELLM_TEST_KEY": "sk-wrong-0123456789abcdef"}, base_delay=0.01)
    with pytest.raises(HarnessError, match=r"answered HTTP 4\d\d") as info:  # a refusal: not retried
        agent.propose(_ctx(tmp_path))
    assert agent.tries_used == 1 and "sk-wrong" not in str(info.value) and proxy.key not in str(info.value)


def test_an_empty_api_key_env_sends_no_key_not_even_openai_api_key(proxy: Proxy, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the SDK would read OPENAI_API_KEY by itself; with api_key_env = "" nothing may be sent, so the
    # proxy, whose key this is, must refuse the request
    monkeypatch.setenv("OPENAI_API_KEY", proxy.key)
    agent = OpenAIAgent(proxy.url, MODEL, "", timeout_seconds=60, base_delay=0.01)
    with pytest.raises(HarnessError, match=r"HTTP [45]\d\d") as info:  # refused: no key reached it
        agent.propose(_ctx(tmp_path))
    assert proxy.key not in str(info.value)


def _agent_section(ws, proxy: Proxy) -> None:  # noqa: ANN001
    path = ws.root / "looper.toml"
    section = (f'[agent]\nkind = "openai"\nbase_url = "{proxy.url}"\nmodel = "{MODEL}"\n'
               'api_key_env = "LITELLM_TEST_KEY"\ntimeout_seconds = 60\n\n')
    text, n = re.subn(r"\[agent\]\n(?:[^\[\n][^\n]*\n|\n)*", section, path.read_text())
    assert n == 1
    path.write_text(text)
    ws.git("commit", "-qam", "agent: openai against a local LiteLLM proxy")


def test_loop_through_litellm_then_the_proxy_stops_halts_with_one_page(proxy: Proxy, make_ws, pages):  # noqa: F811
    ws = make_ws()
    _agent_section(ws, proxy)
    env = ws.env()
    env["LITELLM_TEST_KEY"] = proxy.key
    daemon = ws.start(env=env)
    try:
        ws.wait_training(180, "the proxy's candidate to train")
        proxy.stop()  # while the candidate trains: its proposal was the proxy's last answer
        out, _ = daemon.communicate(timeout=180)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 3, out
    rows = ws.rows()
    assert rows[0]["description"] == "QUALITY 0.5 -> 0.8" and rows[0]["status"] == "keep", rows
    assert not [r for r in rows if r["status"] == "crash"]
    assert len(pages.pages) == 1
    page = json.dumps(pages.pages[0])
    assert "agent endpoint" in page and "failed 4 times" in page, page
    assert proxy.key not in page + out
