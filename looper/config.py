"""``looper.toml`` -> a validated, immutable :class:`Config` (docs/REFERENCE.md section 5).

Every section and key is fixed; an unknown key, a value of the wrong type or out of
range is a :class:`~looper.errors.ConfigError` whose message names the file and the key
as ``section.key`` (for example ``loop.budget_seconds: must be > 0 (got -1)``).

Every key, its default and what it does: docs/REFERENCE.md (the same defaults as the fields below).

Secrets never live in this file: the OpenAI-compatible agent reads its key from the
environment variable *named* by ``agent.api_key_env``. :meth:`Config.redacted_dict` is
what may be stored or shown: notify URLs become ``scheme://***`` and credentials in
``agent.base_url`` are dropped.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from looper.core.keep.score import SCORE_TEST_MODES
from looper.errors import ConfigError

__all__ = [
    "AgentConfig",
    "Config",
    "DataConfig",
    "ExecutorConfig",
    "GateConfigSection",
    "LimitsConfig",
    "LoopConfig",
    "NotifyConfig",
    "load_config",
    "notify_urls",
    "redact_url",
]

NOTIFY_ENV = "LOOPER_NOTIFY_URLS"

_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_UNTIL_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GRES_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z0-9_.-]+)*(,[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z0-9_.-]+)*)*$")
_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9_.,-]*$")
_SLURM_KEYS = ("partition", "gres", "account", "sbatch_extra", "start_timeout", "requeue_limit")


class _Section(BaseModel):
    # strict: a TOML string "300" is not silently an int, true is not 1.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LoopConfig(_Section):
    tag: str = "nightly"
    budget_seconds: int = Field(default=300, gt=0)
    grace_seconds: int = Field(default=60, ge=0)
    stall_seconds: int = Field(default=180, gt=0)
    max_experiments: int = Field(default=0, ge=0)
    until: str = ""
    stuck_after: int = Field(default=3, ge=1)
    # a challenger runs at most 1 + noise_reruns seeds (1, 2, 4, 8): 2 seed sds found in ~90 % of decisions
    noise_reruns: int = Field(default=7, ge=0)
    baseline_seeds: int = Field(default=3, ge=2)  # seeds of a tag's baseline: the measured noise (>= 2)
    # a step budget for every run (LOOPER_MAX_STEPS); 0: wall clock only; "auto": measured per tag
    # by a warm-up run (looper.core.run.budget)
    max_steps: Annotated[int, Field(ge=0)] | Literal["auto"] = 0
    workers: int = Field(default=1, ge=1)
    # seeds of one experiment run at the same time, each pinned to its own cores (local executor only)
    seed_jobs: int = Field(default=1, ge=1)
    # seed_jobs > 1: start each waiting run's box (its imports done, its code not yet run) while the slot it
    # waits for trains, and evaluate a run while the next trains (looper.night.slots); "auto": with require_gpu
    prestart: Literal["auto", "on", "off"] = "auto"
    # LOOPER_SEED is the seed's value under the workspace's secret (looper.core.run.seedvalue), not its number:
    # a confirmation seed cannot be told from a search seed
    secret_seeds: bool = True
    # fresh seeds the night's final best is re-run on when the night ends (and by `looper confirm`); 0: off
    confirm_seeds: int = Field(default=3, ge=0)

    @field_validator("max_steps", mode="before")
    @classmethod
    def _max_steps(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError('expected a whole number of optimizer steps >= 0 (0: the wall clock alone) or "auto" '
                         f"(measured per tag by a warm-up run), got {v!r}")

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not _TAG_RE.match(v) or ".." in v or v.endswith(".lock") or v.endswith("."):
            raise ValueError(
                "expected a short name for the branch looper/<tag>: letters, digits, '.', '_', '-', "
                "starting with a letter or digit"
            )
        return v

    @field_validator("until")
    @classmethod
    def _until(cls, v: str) -> str:
        if v and not _UNTIL_RE.match(v):
            raise ValueError("expected HH:MM (24-hour local time) or \"\"")
        return v

    @property
    def until_time(self) -> _dt.time | None:
        """``until`` as a local time of day, or None when unset."""
        if not self.until:
            return None
        hh, mm = self.until.split(":")
        return _dt.time(int(hh), int(mm))


class DataConfig(_Section):
    dir: str = "data"
    scale: Literal["tiny", "demo", "full"] = "demo"
    seed: int = Field(default=0, ge=0)

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v


class GateConfigSection(_Section):
    score: Literal["weighted_f1", "macro_f1"] = "weighted_f1"
    max_class_drop: float = Field(default=0.05, ge=0.0, le=1.0)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)  # error rate of every keep, discard and class gate
    # the score test: "auto" picks pooled or paired per look (each at half its alpha); "pooled" or
    # "paired" fixes it from a pairing correlation measured elsewhere (the look's whole alpha)
    score_test: Literal[SCORE_TEST_MODES] = "auto"  # type: ignore[valid-type]  # one list, in looper.core.keep.score


class AgentConfig(_Section):
    kind: Literal["planner", "random", "evolve", "command", "openai"] = "planner"
    seed: int = 0  # random and evolve: the seed of their draws (a night replays)
    command: str = ""
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: int = Field(default=900, gt=0)
    max_failures: int = Field(default=2, ge=1)
    # kind = "command": its box (looper/agents/sandbox.py); "none" is an explicit opt-out
    sandbox: Literal["bwrap", "none"] = "bwrap"
    network: bool = False  # let the agent command reach the network (an API) from its box
    pass_env: list[str] = Field(default_factory=list)  # NAMES of the daemon's variables it sees (an API key)
    readable: list[str] = Field(default_factory=list)  # more paths shown read-only in its box (its program)

    @field_validator("pass_env")
    @classmethod
    def _env_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"expected NAMES of environment variables (e.g. OPENAI_API_KEY), not {name!r}")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if v and not _ENV_NAME_RE.match(v):
            raise ValueError("expected the NAME of an environment variable (e.g. OPENAI_API_KEY), not a key")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str) -> str:
        if v and urlsplit(v).scheme not in ("http", "https"):
            raise ValueError("expected an http:// or https:// URL")
        return v

    @model_validator(mode="after")
    def _kind_needs(self) -> AgentConfig:
        if self.kind == "command" and not self.command.strip():
            raise _KeyProblem("command", 'required when agent.kind = "command"')
        if self.kind == "openai":
            if not self.base_url:
                raise _KeyProblem("base_url", 'required when agent.kind = "openai"')
            if not self.model:
                raise _KeyProblem("model", 'required when agent.kind = "openai"')
            # an empty api_key_env is allowed: no key is sent (a local OpenAI-compatible server)
        return self


class ExecutorConfig(_Section):
    kind: Literal["local", "ssh", "slurm"] = "local"
    host: str = ""
    remote_dir: str = ""
    python: str = "python3"
    require_gpu: bool = False
    ssh_options: list[str] = Field(default_factory=list)
    gpu_index: int = Field(default=0, ge=0)
    sandbox: Literal["bwrap", "none"] = "bwrap"  # looper/executors/sandbox.py; "none" is an explicit opt-out
    sandbox_network: bool = False  # let train.py reach the network inside its sandbox
    # kind = "slurm" (docs/SLURM.md)
    partition: str = ""
    gres: str = ""
    account: str = ""
    sbatch_extra: list[str] = Field(default_factory=list)
    start_timeout: int = Field(default=600, gt=0)
    requeue_limit: int = Field(default=2, ge=0)

    @field_validator("partition", "account")
    @classmethod
    def _slurm_name(cls, v: str) -> str:
        if not _SLURM_NAME_RE.match(v):
            raise ValueError(f"not a SLURM name (letters, digits, '_', '.', ',', '-'): {v!r}")
        return v

    @field_validator("gres")
    @classmethod
    def _gres(cls, v: str) -> str:
        if v and not _GRES_RE.match(v):
            raise ValueError(f"not a SLURM gres request like 'gpu:1' or 'gpu:a100:2': {v!r}")
        return v

    @field_validator("sbatch_extra")
    @classmethod
    def _sbatch_extra(cls, v: list[str]) -> list[str]:
        for i, entry in enumerate(v):
            if not entry.startswith("-") or any(c in entry for c in "\r\n\0"):
                raise ValueError(f"entry {i} is not one sbatch option like '--mem=16G': {entry!r}")
        return v

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.kind != "slurm":
            for key in _SLURM_KEYS:
                data.pop(key, None)
        return data

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @model_validator(mode="after")
    def _kind_needs(self) -> ExecutorConfig:
        if self.kind == "ssh" and not self.host.strip():
            raise _KeyProblem("host", 'required when executor.kind = "ssh"')
        return self


class NotifyConfig(_Section):
    urls: list[str] = Field(default_factory=list)

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for i, u in enumerate(v):
            if "://" not in u:
                raise ValueError(f"entry {i} is not an apprise URL (expected scheme://...)")
        return v


class LimitsConfig(_Section):
    """Bounds on what a run may cost the daemon : the evidence it stores, the disk it needs,
    how long a candidate's evaluation may take."""

    log_max_bytes: int = Field(default=67_108_864, ge=4096)  # train.log / eval.log on disk: head and tail kept
    line_max_bytes: int = Field(default=16_384, ge=80)  # an output line is cut to this before any pattern runs
    json_max_bytes: int = Field(default=8_388_608, ge=1024)  # train.json / METRICS.json larger: a crash
    json_max_depth: int = Field(default=64, ge=4)  # nested deeper: a crash (never a RecursionError)
    min_free_bytes: int = Field(default=268_435_456, ge=0)  # free disk a run needs to start
    reserve_bytes: int = Field(default=16_777_216, ge=0)  # .looper/reserve: released before an outcome is written
    eval_time_factor: float = Field(default=5.0, ge=1.0)  # a candidate's evaluation may take factor x the best's
    eval_time_floor: int = Field(default=60, ge=1)  # ... + this many seconds; longer: the candidate's crash
    # Issue 39: each sandboxed run's own resources (looper/executors/limits.py; docs/SECURITY.md "Resources").
    # 0 = derived from this machine when the run starts (the numbers the docs give).
    run_limits: bool = True  # false: none of the limits below is applied
    memory_max_bytes: int = Field(default=0, ge=0)  # 0: 75 % of physical memory (at least 1 GiB)
    pids_max: int = Field(default=0, ge=0)  # processes + threads; 0: 128 x cores (at least 512, at most pid_max/2)
    tmp_max_bytes: int = Field(default=0, ge=0)  # each of the private /tmp and /dev/shm; 0: 1/8 of memory
    out_max_bytes: int = Field(default=0, ge=0)  # $LOOPER_OUT; 0: 16 GiB; never more than the free disk - min_free_bytes
    out_max_files: int = Field(default=100_000, ge=1)  # files and folders in $LOOPER_OUT
    oom_score_adj: int = Field(default=1000, ge=0, le=1000)  # the kernel's OOM killer picks the run before the daemon


class ConfirmConfig(_Section):
    """The transfer check after the morning's confirmation (docs/SHIPPING.md)."""

    transfer_steps: int = Field(default=0, ge=-1)  # 0 off; -1 a multiple of the night's steps per preset; N steps
    transfer_seeds: int = Field(default=3, ge=2)  # fresh seeds a side (the best and the baseline each)
    tuned_thresholds: bool = True  # at the night's end: the best's per-class F1 at val-tuned thresholds (report only)


class TrackingConfig(_Section):
    """Where the night is also written for people (MLflow); it never decides anything (docs/SHIPPING.md)."""

    mlflow_uri: str = ""  # "" off; sqlite:///mlflow.db (relative to the workspace) or http(s)://host:port
    mlflow_experiment: str = ""  # the MLflow experiment's name ("" = "looper/<tag>")
    timeout_seconds: float = Field(default=5.0, ge=0.5, le=60.0)  # the longest a settle waits for MLflow

    @field_validator("mlflow_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        parts = urlsplit(v.strip())
        if v.strip() and parts.scheme not in ("sqlite", "http", "https", "file", "databricks", "postgresql", "mysql"):
            raise ValueError(f"{v!r} is not an MLflow tracking URI (sqlite:///mlflow.db, http://host:5000, ...)")
        if parts.password:
            raise ValueError("holds a password: give MLflow's MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD "
                             "in the environment instead")
        return v.strip()


class Config(_Section):
    loop: LoopConfig = Field(default_factory=LoopConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    gate: GateConfigSection = Field(default_factory=GateConfigSection)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    confirm: ConfirmConfig = Field(default_factory=ConfirmConfig)

    @model_validator(mode="after")
    def _side_by_side(self) -> Config:
        if self.loop.seed_jobs > 1 and self.executor.kind not in ("local", "ssh"):
            raise _KeyProblem("loop.seed_jobs", "runs seeds side by side on one machine's cores: only with "
                                                f'executor.kind = "local" or "ssh" (got "{self.executor.kind}", '
                                                f"seed_jobs {self.loop.seed_jobs}: each SLURM job is an allocation of "
                                                "its own; more workers run more jobs at once)")
        return self

    def redacted_dict(self) -> dict[str, Any]:
        """A plain dict safe to store or show: no secret ever appears in it."""
        d = self.model_dump(mode="json")
        d["notify"]["urls"] = [redact_url(u) for u in self.notify.urls]
        if self.agent.base_url:
            d["agent"]["base_url"] = _strip_credentials(self.agent.base_url)
        return d


class _KeyProblem(ValueError):
    """Raised by a section-level validator to blame one key of that section."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


# -- loading -------------------------------------------------------------------------


def load_config(path: Path | None) -> Config:
    """Read and validate ``looper.toml``. No path, or a missing file, gives the defaults."""
    if path is None:
        return Config()
    path = Path(path)
    if not path.exists():
        return Config()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from exc
    return config_from_dict(data, source=str(path))


def config_from_dict(data: Mapping[str, Any], source: str = "looper.toml") -> Config:
    """Validate an already-parsed TOML document; errors name ``source`` and the key."""
    try:
        return Config.model_validate(dict(data))
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors()]
        if len(problems) == 1:
            raise ConfigError(f"{source}: {problems[0]}") from None
        raise ConfigError(f"{source}: {len(problems)} problems:\n  " + "\n  ".join(problems)) from None


#: Keys an older looper wrote that this one no longer reads: a file that still has one is told which
#: and why, one line (the key is deleted from the file; nothing is loaded around it).
REMOVED_KEYS = {"gate.noise_sigmas": "removed: the gate's alpha decides, [gate] alpha; delete the line"}


def _describe(err: Mapping[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    exc = ctx.get("error")
    if isinstance(exc, _KeyProblem):
        return ".".join([*loc, exc.key]) + f": {exc.problem}"
    key = _key_of(loc)
    if kind == "extra_forbidden":
        if len(loc) == 1:
            return f"{key}: unknown section (expected one of {', '.join(Config.model_fields)})"
        return f"{key}: {REMOVED_KEYS.get(key, 'unknown key')}"
    if kind == "model_type":
        return f"{key}: expected a table [{key}]" if len(loc) == 1 else f"{key}: expected a table"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "")
        expected = expected.replace(" or ", ", ")
        return f"{key}: must be one of {expected} (got {value!r})"
    bound = {
        "greater_than": ("gt", ">"),
        "greater_than_equal": ("ge", ">="),
        "less_than": ("lt", "<"),
        "less_than_equal": ("le", "<="),
    }.get(kind)
    if bound is not None:
        return f"{key}: must be {bound[1]} {ctx.get(bound[0])} (got {value!r})"
    type_names = {
        "int_type": "an integer",
        "float_type": "a number",
        "string_type": "a string",
        "bool_type": "true or false",
        "list_type": "a list",
    }
    if kind in type_names:
        return f"{key}: expected {type_names[kind]} (got {_toml_type(value)} {value!r})"
    if kind == "value_error":
        msg = str(exc) if exc is not None else str(err.get("msg", ""))
        return f"{key}: {msg}"
    return f"{key}: {err.get('msg', 'invalid value')}"


def _key_of(loc: list[str]) -> str:
    return ".".join(loc) if loc else "(top level)"


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


# -- notify URLs and redaction -------------------------------------------------------------


def notify_urls(cfg: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    """``notify.urls`` plus the space-separated ``LOOPER_NOTIFY_URLS``, in order, deduplicated.

    ``environ`` defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    extra = env.get(NOTIFY_ENV, "").split()
    seen: set[str] = set()
    out: list[str] = []
    for u in [*cfg.notify.urls, *extra]:
        if u not in seen:
            seen.add(u)
            out.append(u)
    return out


def redact_url(url: str) -> str:
    """``scheme://***``: an apprise URL carries its secrets anywhere after the scheme."""
    scheme, sep, _ = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return "***"
    return f"{scheme}://***"


def _strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
