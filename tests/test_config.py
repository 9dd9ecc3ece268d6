"""looper.toml: defaults, every key, clear errors that name the key, notify URLs, redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looper.config import Config, load_config, notify_urls, redact_url
from looper.errors import ConfigError, UsageError, exit_code_for

FULL_TOML = """
[loop]
tag = "weekend-2"
budget_seconds = 120
grace_seconds = 30
stall_seconds = 90
max_experiments = 40
until = "07:00"
stuck_after = 4
noise_reruns = 3
baseline_seeds = 4
max_steps = 150
workers = 2
confirm_seeds = 5
seed_jobs = 1
prestart = "off"
secret_seeds = false

[data]
dir = "/srv/hvac-data"
scale = "tiny"
seed = 7

[gate]
score = "macro_f1"
max_class_drop = 0.1
alpha = 0.01
score_test = "paired"

[agent]
kind = "openai"
command = "ignored-for-openai"
base_url = "https://llm.example/v1"
model = "qwen-coder"
api_key_env = "MY_LLM_KEY"
timeout_seconds = 600
max_failures = 5
seed = 11
sandbox = "none"
network = true
pass_env = ["MY_LLM_KEY"]
readable = ["/opt/agent"]

[executor]
kind = "ssh"
host = "gpu-box"
remote_dir = "/scratch/looper"
python = "/opt/py/bin/python"
require_gpu = true
ssh_options = ["-p", "2222"]
gpu_index = 1
sandbox = "none"
sandbox_network = true

[notify]
urls = ["ntfy://ntfy.sh/secret-topic", "mailto://user:pw@example.com"]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "looper.toml"
    p.write_text(text, encoding="utf-8")
    return p


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    return str(info.value)


def test_missing_file_and_none_give_the_contract_defaults(tmp_path: Path) -> None:
    for cfg in (load_config(None), load_config(tmp_path / "nope.toml"), load_config(write(tmp_path, ""))):
        assert cfg.loop.tag == "nightly"
        assert (cfg.loop.budget_seconds, cfg.loop.grace_seconds, cfg.loop.stall_seconds) == (300, 60, 180)
        assert (cfg.loop.max_experiments, cfg.loop.until, cfg.loop.until_time) == (0, "", None)
        assert (cfg.loop.stuck_after, cfg.loop.noise_reruns, cfg.loop.workers) == (3, 7, 1)
        assert (cfg.loop.seed_jobs, cfg.loop.prestart, cfg.loop.secret_seeds) == (1, "auto", True)
        assert (cfg.data.dir, cfg.data.scale, cfg.data.seed) == ("data", "demo", 0)
        assert (cfg.gate.score, cfg.gate.max_class_drop) == ("weighted_f1", 0.05)
        assert cfg.gate.alpha == 0.05 and cfg.gate.score_test == "auto"
        assert cfg.agent.kind == "planner" and cfg.agent.command == "" and cfg.agent.base_url == ""
        assert cfg.agent.model == "" and cfg.agent.api_key_env == "OPENAI_API_KEY"
        assert (cfg.agent.timeout_seconds, cfg.agent.max_failures) == (900, 2)
        assert (cfg.executor.kind, cfg.executor.host, cfg.executor.remote_dir) == ("local", "", "")
        assert (cfg.executor.python, cfg.executor.require_gpu) == ("python3", False)
        assert (cfg.executor.ssh_options, cfg.executor.gpu_index) == ([], 0)
        assert cfg.notify.urls == []


def test_every_key_is_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL_TOML))
    assert cfg.loop.model_dump() == {
        "tag": "weekend-2", "budget_seconds": 120, "grace_seconds": 30, "stall_seconds": 90,
        "max_experiments": 40, "until": "07:00", "stuck_after": 4, "noise_reruns": 3, "workers": 2,
        "baseline_seeds": 4, "max_steps": 150, "confirm_seeds": 5,
        "seed_jobs": 1,  # > 1 only with the local executor; read as 2 in tests/test_side_by_side.py
        "prestart": "off", "secret_seeds": False,
    }
    assert cfg.loop.until_time is not None and (cfg.loop.until_time.hour, cfg.loop.until_time.minute) == (7, 0)
    assert cfg.data.model_dump() == {"dir": "/srv/hvac-data", "scale": "tiny", "seed": 7}
    assert cfg.gate.model_dump() == {"score": "macro_f1", "max_class_drop": 0.1,
                                      "alpha": 0.01, "score_test": "paired"}
    assert cfg.agent.model_dump() == {
        "kind": "openai", "command": "ignored-for-openai", "base_url": "https://llm.example/v1",
        "model": "qwen-coder", "api_key_env": "MY_LLM_KEY", "timeout_seconds": 600, "max_failures": 5,
        "seed": 11, "sandbox": "none", "network": True, "pass_env": ["MY_LLM_KEY"], "readable": ["/opt/agent"],
    }
    assert cfg.executor.model_dump() == {
        "kind": "ssh", "host": "gpu-box", "remote_dir": "/scratch/looper", "python": "/opt/py/bin/python",
        "require_gpu": True, "ssh_options": ["-p", "2222"], "gpu_index": 1, "sandbox": "none",
        "sandbox_network": True,
    }
    assert cfg.notify.urls == ["ntfy://ntfy.sh/secret-topic", "mailto://user:pw@example.com"]


def test_config_is_immutable() -> None:
    cfg = Config()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        cfg.loop.budget_seconds = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[loop]\ntagg = 'x'\n", "loop.tagg: unknown key"),
        ("[executor]\ngpu = 1\n", "executor.gpu: unknown key"),
        ("[looop]\ntag = 'x'\n", "looop: unknown section"),
        ("loop = 3\n", "loop: expected a table"),
    ],
)
def test_unknown_keys_and_sections_are_named(tmp_path: Path, text: str, expected: str) -> None:
    msg = error_of(tmp_path, text)
    assert expected in msg
    assert "looper.toml" in msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[loop]\nbudget_seconds = 0\n", "loop.budget_seconds: must be > 0"),
        ("[loop]\nbudget_seconds = -5\n", "loop.budget_seconds: must be > 0"),
        ("[loop]\nbudget_seconds = '300'\n", "loop.budget_seconds: expected an integer (got string"),
        ("[loop]\nbudget_seconds = 1.5\n", "loop.budget_seconds: expected an integer (got float"),
        ("[loop]\ngrace_seconds = -1\n", "loop.grace_seconds: must be >= 0"),
        ("[loop]\nstall_seconds = 0\n", "loop.stall_seconds: must be > 0"),
        ("[loop]\nmax_experiments = -1\n", "loop.max_experiments: must be >= 0"),
        ("[loop]\nuntil = '7am'\n", "loop.until: expected HH:MM"),
        ("[loop]\nuntil = '24:00'\n", "loop.until: expected HH:MM"),
        ("[loop]\nstuck_after = 0\n", "loop.stuck_after: must be >= 1"),
        ("[loop]\nnoise_reruns = -1\n", "loop.noise_reruns: must be >= 0"),
        ("[loop]\nworkers = 0\n", "loop.workers: must be >= 1"),
        ("[loop]\ntag = 'a b'\n", "loop.tag: expected a short name"),
        ("[loop]\ntag = '../x'\n", "loop.tag: expected a short name"),
        ("[data]\nscale = 'huge'\n", "data.scale: must be one of tiny, demo, full"),
        ("[data]\ndir = ''\n", "data.dir: must not be empty"),
        ("[data]\nseed = -1\n", "data.seed: must be >= 0"),
        ("[gate]\nscore = 'f1'\n", "gate.score: must be one of weighted_f1, macro_f1"),
        ("[gate]\nmax_class_drop = 1.5\n", "gate.max_class_drop: must be <= 1.0"),
        ("[gate]\nnoise_sigmas = 2.0\n", "gate.noise_sigmas: removed: the gate's alpha decides, [gate] alpha; delete the line"),
        ("[gate]\nalpha = 0\n", "gate.alpha: must be > 0.0"),
        ("[gate]\nalpha = 1.0\n", "gate.alpha: must be < 1.0"),
        ("[gate]\nscore_test = 'best'\n", "gate.score_test: must be one of auto, pooled, paired"),
        ("[agent]\nkind = 'gpt'\n", "agent.kind: must be one of planner, random, evolve, command, openai"),
        ("[agent]\nkind = 'command'\n", "agent.command: required when agent.kind = \"command\""),
        ("[agent]\nkind = 'openai'\nmodel = 'm'\n", "agent.base_url: required when agent.kind = \"openai\""),
        ("[agent]\nkind = 'openai'\nbase_url = 'https://x/v1'\n", "agent.model: required"),
        ("[agent]\nbase_url = 'ftp://x'\n", "agent.base_url: expected an http:// or https:// URL"),
        ("[agent]\napi_key_env = 'sk-123abc'\n", "agent.api_key_env: expected the NAME of an environment"),
        ("[agent]\ntimeout_seconds = 0\n", "agent.timeout_seconds: must be > 0"),
        ("[agent]\nmax_failures = 0\n", "agent.max_failures: must be >= 1"),
        ("[executor]\nkind = 'k8s'\n", "executor.kind: must be one of local, ssh"),
        ("[executor]\nkind = 'ssh'\n", "executor.host: required when executor.kind = \"ssh\""),
        ("[executor]\nrequire_gpu = 'yes'\n", "executor.require_gpu: expected true or false"),
        ("[executor]\nrequire_gpu = 1\n", "executor.require_gpu: expected true or false"),
        ("[executor]\nssh_options = '-p 22'\n", "executor.ssh_options: expected a list"),
        ("[executor]\ngpu_index = -1\n", "executor.gpu_index: must be >= 0"),
        ("[executor]\npython = ''\n", "executor.python: must not be empty"),
        ("[notify]\nurls = 'ntfy://x'\n", "notify.urls: expected a list"),
        ("[notify]\nurls = ['not a url']\n", "notify.urls: entry 0 is not an apprise URL"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, expected: str) -> None:
    msg = error_of(tmp_path, text)
    assert expected in msg, msg


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "[loop]\nbudget_seconds = 0\ntagg = 1\n[data]\nscale = 'x'\n")
    assert "3 problems" in msg
    for part in ("loop.budget_seconds", "loop.tagg", "data.scale"):
        assert part in msg


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "[loop]\ntag = 'ok'\nbudget_seconds = = 3\n")
    assert str(tmp_path / "looper.toml") in msg
    assert "line 3" in msg
    assert "TOML syntax error" in msg


def test_unreadable_and_non_utf8_files_are_config_errors(tmp_path: Path) -> None:
    p = tmp_path / "looper.toml"
    p.write_bytes(b"[loop]\ntag = '\xff\xfe'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(p)
    d = tmp_path / "dir.toml"
    d.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(d)


def test_config_error_is_a_usage_error_exit_2(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_config(write(tmp_path, "[loop]\nbudget_seconds = 0\n"))
    assert exit_code_for(info.value) == 2


def test_notify_urls_env_adds_to_file_urls() -> None:
    cfg = Config.model_validate({"notify": {"urls": ["ntfy://a", "json://b"]}})
    env = {"LOOPER_NOTIFY_URLS": "  tgram://bot/chat   ntfy://a\tjson://c "}
    assert notify_urls(cfg, env) == ["ntfy://a", "json://b", "tgram://bot/chat", "json://c"]
    assert notify_urls(cfg, {}) == ["ntfy://a", "json://b"]
    assert notify_urls(Config(), {"LOOPER_NOTIFY_URLS": ""}) == []


def test_notify_urls_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPER_NOTIFY_URLS", "ntfy://from-env")
    assert notify_urls(Config()) == ["ntfy://from-env"]


def test_redacted_dict_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-live-verysecret")
    text = FULL_TOML.replace("https://llm.example/v1", "https://bob:hunter2@llm.example/v1?key=abc123")
    cfg = load_config(write(tmp_path, text))
    red = cfg.redacted_dict()
    dumped = json.dumps(red)
    for secret in ("secret-topic", "user:pw", "pw@", "hunter2", "abc123", "sk-live-verysecret"):
        assert secret not in dumped
    assert red["notify"]["urls"] == ["ntfy://***", "mailto://***"]
    assert red["agent"]["api_key_env"] == "MY_LLM_KEY"
    assert red["agent"]["base_url"] == "https://llm.example/v1"
    # everything else survives: the store keeps the config that ran
    assert red["loop"]["budget_seconds"] == 120 and red["executor"]["ssh_options"] == ["-p", "2222"]
    # and redaction did not change the live config
    assert cfg.notify.urls[0] == "ntfy://ntfy.sh/secret-topic"


def test_redact_url_shapes() -> None:
    assert redact_url("tgram://123:ABC/456") == "tgram://***"
    assert redact_url("no scheme here") == "***"
    assert redact_url("://x") == "***"


def test_sandbox_defaults_on_and_rejects_unknown_modes(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert (cfg.executor.sandbox, cfg.executor.sandbox_network) == ("bwrap", False)
    with pytest.raises(ConfigError, match="executor.sandbox"):
        load_config(write(tmp_path, '[executor]\nsandbox = "docker"\n'))
