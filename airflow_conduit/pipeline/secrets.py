"""Secrets in settings: never printed, never logged, never written to a report or the DLQ.

Choice: a setting whose *key* looks like a secret (``password``, ``token``,
``secret``, ``key-file``, ...) is stored in the spec as a :class:`Secret`, an
object (deliberately not a ``str``) whose ``str()``, ``repr()`` and format are
``***``. So a spec, a settings dict or an f-string can be logged safely, and
``json.dumps`` of settings with a secret fails loudly instead of leaking.
Code that needs the real value asks for it explicitly:
``secret.get_secret_value()`` or :func:`reveal` for a whole settings dict.
:func:`redact` and :func:`redacted_dict` give JSON-ready copies with ``***``
in place of secrets (and of credentials embedded in URLs), for logs, run
reports and the DLQ's ``include-configs``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from airflow_conduit.pipeline.model import PipelineSpec

MASK = "***"

# A key is secret when one of its words (split on - _ .) is one of these ...
_SECRET_WORDS = frozenset({"password", "passwd", "pwd", "token", "secret", "passphrase", "credentials"})
# ... or when it contains one of these anywhere (sslpassword, clientsecret) ...
_SECRET_SUBSTRINGS = ("password", "passwd", "secret")
# ... or when it ends with one of these word sequences.
_SECRET_SUFFIXES = (("key", "file"), ("keyfile",), ("private", "key"), ("api", "key"), ("access", "key"), ("secret", "key"))

# Credentials written inside URLs and connection strings, in every form drivers accept:
# - userinfo: scheme://user:pass@host (the password runs to the authority's last '@': it may hold '@');
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://[^/:@\s]*):(?P<pw>[^/?#\s]+)@")
# - Oracle: jdbc:oracle:thin:user/pass@host... (also oci; the password runs to the last '@'; ``/@alias`` =
#   a wallet, no password);
_ORACLE_USER_PASSWORD = re.compile(r"(?P<k>(?:jdbc:)?oracle:[A-Za-z0-9]+:[^/@\s]*/)(?P<pw>\S+)@", re.IGNORECASE)
# - key=value properties after ?, &, ; or : (password=, PWD=, sslpassword=, Password = {a;b}), any case.
_URL_PASSWORD_PARAM = re.compile(
    r"(?P<k>(?:[A-Za-z0-9_.\-]*(?:password|passwd|pwd|passphrase|token|secret)|(?<![A-Za-z0-9])pass)\s*=\s*)"
    r"(?P<v>(?:\{[^}]*\}?)?[^&;\s]*)",
    re.IGNORECASE,
)


class Secret:
    """A secret setting value: prints as ``***``; ``get_secret_value()`` gives the real value."""

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        object.__setattr__(self, "_value", value)

    def get_secret_value(self) -> Any:
        return self._value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Secret is immutable")

    def __repr__(self) -> str:
        return MASK

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self):  # picklable, for settings shipped to Spark executors
        return (Secret, (self._value,))


def is_secret_key(key: str) -> bool:
    """True for setting names like password, sslpassword, db-password, auth_token, client.secret, ssl-key-file, api-key."""
    lowered = str(key).lower()
    if any(part in lowered for part in _SECRET_SUBSTRINGS):
        return True
    words = [w for w in re.split(r"[-_.\s]+", lowered) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(tuple(words[-len(s):]) == s for s in _SECRET_SUFFIXES if len(words) >= len(s))


def mask_url_credentials(text: str) -> str:
    """``jdbc:postgresql://u:pw@h/db?password=x`` -> ``jdbc:postgresql://u:***@h/db?password=***``.

    Also ``jdbc:oracle:thin:u/pw@h`` -> ``jdbc:oracle:thin:u/***@h`` and ``;Password={p;w}`` -> ``;Password=***``.
    """
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}:{MASK}@", text)
    text = _ORACLE_USER_PASSWORD.sub(lambda m: f"{m.group('k')}{MASK}@", text)
    return _URL_PASSWORD_PARAM.sub(lambda m: f"{m.group('k')}{MASK}", text)


def uri_has_userinfo_password(text: str) -> bool:
    """True for ``scheme://user:pass@host...`` (paths: a ``password=`` directory is a partition, not a secret)."""
    return _URL_USERINFO.search(text) is not None


def url_has_credentials(text: str) -> bool:
    """True when ``text`` holds a password in any inline form (even an empty ``password=``)."""
    return any(p.search(text) for p in (_URL_USERINFO, _ORACLE_USER_PASSWORD, _URL_PASSWORD_PARAM))


def redact(settings: Any) -> Any:
    """A JSON-ready copy of ``settings`` with every secret replaced by ``***``.

    Masks :class:`Secret` values, values under secret-looking keys (even when
    they were not wrapped, e.g. settings built by hand) and credentials
    embedded in URL strings. Works on nested mappings and lists.
    """
    if isinstance(settings, Secret):
        return MASK
    if isinstance(settings, dict):
        return {
            k: (MASK if is_secret_key(k) and v is not None else redact(v)) for k, v in settings.items()
        }
    if isinstance(settings, (list, tuple)):
        return [redact(v) for v in settings]
    if isinstance(settings, str):
        return mask_url_credentials(settings)
    return settings


def reveal(settings: Any) -> Any:
    """A copy of ``settings`` with the real values of secrets: only for handing them to a connector."""
    if isinstance(settings, Secret):
        return settings.get_secret_value()
    if isinstance(settings, dict):
        return {k: reveal(v) for k, v in settings.items()}
    if isinstance(settings, (list, tuple)):
        return type(settings)(reveal(v) for v in settings)
    return settings


def secret_values(spec: "PipelineSpec") -> tuple[str, ...]:
    """The real values of every secret setting in the spec (components and DLQ): to mask them in logged text."""
    values: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Secret):
            values.append(str(value.get_secret_value()))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for comp in spec.components():
        walk(comp.settings)
    walk(spec.dead_letter_queue.settings)
    return tuple(v for v in values if v)


def redacted_dict(spec: "PipelineSpec") -> dict[str, Any]:
    """The whole spec as a JSON-ready dict in the YAML's own key names, secrets masked."""
    from airflow_conduit.recovery.durations import format_duration

    def processors(procs) -> list[dict[str, Any]]:
        return [{"id": p.id, "plugin": p.plugin, "settings": redact(p.settings)} for p in procs]

    def connector(c) -> dict[str, Any]:
        return {"id": c.id, "plugin": c.plugin, "settings": redact(c.settings), "processors": processors(c.processors)}

    dlq = spec.dead_letter_queue
    return {
        "version": spec.version,
        "pipeline": {
            "id": spec.id,
            "description": spec.description,
            "mode": spec.mode,
            "trigger-interval": format_duration(spec.trigger_interval_seconds),
            "batch-deadline": format_duration(spec.batch_deadline_seconds),
            "sources": [connector(s) for s in spec.sources],
            "processors": processors(spec.processors),
            "destinations": [connector(d) for d in spec.destinations],
            "dead-letter-queue": {
                "plugin": dlq.plugin,
                "settings": redact(dlq.settings),
                "window-size": dlq.window_size,
                "window-nack-threshold": dlq.window_nack_threshold,
                "include-messages": dlq.include_messages,
                "include-configs": dlq.include_configs,
            },
            "errors": {
                "retry": {
                    "timeout": format_duration(spec.errors.retry.timeout_seconds),
                    "delay.max": format_duration(spec.errors.retry.delay_max_seconds),
                }
            },
        },
    }
