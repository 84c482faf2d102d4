"""A job spec's ``env:`` and ``secret_env:``: which entries are allowed, how much they may
hold, and which of them are secrets.

The rule for secrets lives here and nowhere else: an ``env:`` entry is a secret when its name
ends in one of :data:`SECRET_SUFFIXES` (``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``,
``DB_PASSWORD``) or the spec names it in ``secret_env:``. A secret reaches the pods only
through the job's Secret (``secretKeyRef``, see :mod:`elasticps.cluster.job_secrets`), so its
value is in no rendered manifest and no ``submit --dry-run`` output.

Size: every rendered pod carries the whole ``env:`` (and the Volcano Job carries every role's
pod template), so the entries are bounded in total, not only one by one: at most
:data:`MAX_ENV_TOTAL` bytes of names and values keep a Volcano Job far below etcd's 1.5 MiB
object limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from elasticps.config import ENV_VARS, load_config
from elasticps.errors import ConfigError, shown

MAX_ENV_ENTRIES = 256
MAX_ENV_VALUE = 32 * 1024
MAX_ENV_TOTAL = 256 * 1024  # names + values of every entry together
SECRET_SUFFIXES = ("_KEY", "_SECRET", "_TOKEN", "_PASSWORD")

# PADDLE_* variables a job's `env:` may set; every other one is filled in by the renderer from
# the spec (or is unknown), so setting it there would be silently overridden or a typo.
TUNABLE_ENV = frozenset({
    "PADDLE_USE_GPU", "PADDLE_CHECKPOINT_INTERVAL", "PADDLE_CHECKPOINT_KEEP",
    "PADDLE_LEASE_TTL", "PADDLE_PORTS_NUM", "PADDLE_PORTS_NUM_FOR_SPARSE", "PADDLE_LOG_FORMAT",
    "PADDLE_MAX_MESSAGE_MB", "PADDLE_DATA_SCHEMES", "PADDLE_MAX_CONCURRENT_RPCS",
    "PADDLE_PSERVER_MEMORY_MB", "PADDLE_MAX_IDS_PER_REQUEST", "PADDLE_MAX_TABLES",
    "PADDLE_CHECKPOINT_DELTAS", "PADDLE_DENSE_GRAD_DTYPE", "PADDLE_DENSE_TIMEOUT",
    "PADDLE_COMPUTE_DTYPE", "PADDLE_STREAM_POLL_S", "PADDLE_STREAM_PERIOD_S", "PADDLE_WARM_START",
})
_KNOWN_ENV = frozenset(var.name for var in ENV_VARS)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _fail(name: str, reason: str) -> ConfigError:
    return ConfigError(f"job spec field '{name}': {reason}")


def is_secret_name(name: str) -> bool:
    """Whether an ``env:`` entry of this name is a secret by its name alone."""
    return name.upper().endswith(SECRET_SUFFIXES)


def check_env(env: object) -> dict[str, str]:
    """The spec's ``env:`` as sorted NAME -> text; a bad entry is a ConfigError naming it
    (never its value: it may be a credential)."""
    if not isinstance(env, Mapping):
        raise _fail("env", f"must be a mapping of NAME: value, got {type(env).__name__}")
    if len(env) > MAX_ENV_ENTRIES:
        raise _fail("env", f"has {len(env)} entries, more than {MAX_ENV_ENTRIES}")
    checked: dict[str, str] = {}
    for key, value in env.items():
        name = f"env.{key}"
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise _fail(name, "is not a valid environment variable name")
        if value is None or isinstance(value, Mapping | list):
            raise _fail(name, f"must be a string, number or boolean, got "
                              f"{type(value).__name__}")
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if len(text) > MAX_ENV_VALUE:
            raise _fail(name, f"is longer than {MAX_ENV_VALUE} characters")
        _check_paddle(name, key, text)
        checked[key] = text
    total = sum(len(key.encode()) + len(text.encode()) for key, text in checked.items())
    if total > MAX_ENV_TOTAL:
        raise _fail("env", f"its names and values hold {total:,} bytes in all, more than "
                           f"{MAX_ENV_TOTAL:,} (256 KiB): every pod carries them; put large "
                           "settings in a file in the image, the code directory or storage")
    return dict(sorted(checked.items()))


def _check_paddle(name: str, key: str, text: str) -> None:
    if key.startswith("PADDLE_") and key not in TUNABLE_ENV:
        reason = ("is set by elasticps from the job spec" if key in _KNOWN_ENV
                  else "is not a variable elasticps reads")
        raise _fail(name, f"{reason}; the PADDLE_* variables a job may set are "
                          f"{', '.join(sorted(TUNABLE_ENV))}")
    if key in TUNABLE_ENV:
        try:
            load_config(env={key: text})
        except ConfigError as exc:
            raise _fail(name, str(exc)) from exc


def check_secret_env(secret_env: object, env: Mapping[str, str]) -> tuple[str, ...]:
    """``secret_env:``: names of ``env:`` entries that are secrets whatever their names."""
    if isinstance(secret_env, str) or not isinstance(secret_env, Sequence):
        raise _fail("secret_env", f"must be a list of names of env: entries, got "
                                  f"{type(secret_env).__name__}")
    names: list[str] = []
    for item in secret_env:
        if not isinstance(item, str) or item not in env:
            raise _fail("secret_env", f"{shown(item)} is not the name of an env: entry")
        if item.startswith("PADDLE_"):
            raise _fail("secret_env", f"{item} is an elasticps setting, not a secret")
        if item not in names:
            names.append(item)
    return tuple(sorted(names))


def secret_names(env: Mapping[str, str], secret_env: Sequence[str]) -> tuple[str, ...]:
    """Every ``env:`` entry that reaches the pods through the job's Secret, sorted."""
    return tuple(sorted(name for name in env if is_secret_name(name) or name in secret_env))
