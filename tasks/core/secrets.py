"""Secrets never leave the process: redacted wherever config is recorded, resolved from the environment where used.

A config value may name an environment variable instead of holding a secret (``${env:S3_SECRET}``); the
placeholder is what the config, MLflow params, manifests and Prefect see, and ``resolve`` reads the variable
only where the value is used (the Spark conf, the MLflow client). Literal secrets that do reach the config
anyway (a key that looks like one, credentials inside a URL) are replaced by ``***`` in every record.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tasks.core.errors import ConfigError

MASK = "***"
SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[._-]?key|access[._-]?key|credential|private[._-]?key|auth", re.I
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<password>[^@/\s]+)@", re.I)
_ENV = re.compile(r"\$\{env:(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")


def redact_text(text: str) -> str:
    """Credentials in URLs masked: ``https://user:pass@host`` -> ``https://user:***@host``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)


def redact(value: Any, key: str = "") -> Any:
    """A copy of ``value`` (config dicts, lists, strings) with secret-looking keys' values and URL credentials
    masked; ``${env:...}`` placeholders are kept (they hold no secret)."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, key) for v in value)
    if isinstance(value, str):
        if SECRET_KEY.search(key) and value and not _ENV.fullmatch(value):
            return MASK
        return redact_text(value)
    return value


def resolve(value: str, where: str) -> str:
    """``${env:NAME}`` placeholders replaced by the variable's value, read now; a missing one names ``where``."""

    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in os.environ:
            raise ConfigError(f"{where} refers to ${{env:{name}}}, but the environment variable {name} is not set")
        return os.environ[name]

    return _ENV.sub(one, value)


def refuse_literal_secrets(overrides: list[str] | tuple[str, ...] | None, where: str = "--set") -> None:
    """A literal secret in an override is refused (``ConfigError``: exit 2): overrides are the flow's parameters,
    and Prefect keeps a flow run's parameters in its database and shows them in its UI, unmasked. The value names
    an environment variable instead (``${env:NAME}``), read only where it is used."""
    for item in overrides or ():
        key, _, value = str(item).partition("=")
        value = _ENV.sub("", value)  # a placeholder holds no secret (and inside a URL it is not one either)
        if redact(value, key.strip()) != value or _secret_inside(key.strip(), value):
            raise ConfigError(
                f"{where} {key.strip()}=...: a literal secret would be stored in plain text (Prefect keeps a run's "
                f"parameters); write {key.strip()}=${{env:NAME}} and export NAME instead"
            )


def _secret_inside(key: str, value: str) -> bool:
    """A mapping value (``ingest.extra_conf={"spark...secret.key": "x"}``) with a secret-looking key inside."""
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return False
    return isinstance(parsed, (dict, list)) and redact(parsed, key) != parsed
