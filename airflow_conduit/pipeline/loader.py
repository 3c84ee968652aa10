"""Load and validate a pipeline spec file (pure Python: no Spark, no Airflow).

Every problem is collected, each naming the file, the key path (for example
``pipeline.sources[0].settings.format``), the line and what was expected, so a
wrong spec is refused before Spark starts and fixed in one pass.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from typing import Any

from airflow_conduit.pipeline import model
from airflow_conduit.pipeline.spec_durations import parse_duration, parse_duration_bare_ms
from airflow_conduit.pipeline.envvars import substitute
from airflow_conduit.pipeline.problems import Problem, SpecError
from airflow_conduit.pipeline.secrets import Secret, is_secret_key
from airflow_conduit.pipeline.setting_kinds import Context, PluginSchema, _type_name
from airflow_conduit.pipeline.settings_schema import SCHEMAS_BY_ROLE
from airflow_conduit.pipeline.yaml_source import MAX_SPEC_CHARS, YamlDocument, YamlSyntaxError, load_yaml

TOP_KEYS = ("version", "pipeline")
PIPELINE_KEYS = (
    "id", "description", "mode", "trigger-interval", "batch-deadline", "sources", "processors", "destinations", "dead-letter-queue", "errors",
)
CONNECTOR_KEYS = ("id", "plugin", "settings", "processors")
PROCESSOR_KEYS = ("id", "plugin", "settings")
DLQ_KEYS = ("plugin", "settings", "window-size", "window-nack-threshold", "include-messages", "include-configs")
ERRORS_KEYS = ("retry",)
RETRY_KEYS = ("timeout", "delay.max")

# Ids name folders under the state directory (checkpoints, commit markers): no ':' or '/'.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
BUILTIN_PREFIX = "builtin:"

Path = tuple


def format_key_path(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class _Validator:
    """Walks the YAML data once, collecting problems and building the typed spec."""

    def __init__(self, file: str, doc: YamlDocument, env: Mapping[str, str], base_dir: str):
        self.file = file
        self.doc = doc
        self.env = env
        self.base_dir = base_dir
        self.problems: list[Problem] = []
        self.id_uses: list[tuple[str, Path]] = []  # (id, key path of the id) of every component
        self.secret_keys: set[str] = set()
        self.secret_paths: list[str] = []

    # -- reporting -------------------------------------------------------------------------
    def report(self, path: Path, message: str) -> None:
        self.problems.append(Problem(self.file, format_key_path(path), message, self.doc.line(path)))

    def check_keys(self, data: dict, path: Path, allowed: tuple[str, ...], what: str) -> None:
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(allowed)}"
                self.report(path + (key,), f"unknown key {key!r} in {what}{hint}")

    def mapping(self, value: Any, path: Path, what: str, required: bool = False) -> dict | None:
        if value is None:
            if required:
                self.report(path, f"missing {what} (a mapping)")
            return None if required else {}
        if not isinstance(value, dict):
            self.report(path, f"expected {what} to be a mapping, got {_type_name(value)}")
            return None
        return value

    def sequence(self, value: Any, path: Path, what: str, non_empty: bool = False) -> list:
        if value is None:
            if non_empty:
                self.report(path, f"missing {what}: at least one is required")
            return []
        if not isinstance(value, list):
            self.report(path, f"expected {what} to be a list, got {_type_name(value)}")
            return []
        if non_empty and not value:
            self.report(path, f"{what} is empty: at least one is required")
        return value

    # -- scalars ---------------------------------------------------------------------------
    def integer(self, data: dict, key: str, path: Path, default: int, minimum: int = 0) -> int:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.report(path + (key,), f"expected an integer >= {minimum}, got {_type_name(value)} {value!r}")
            return default
        return value

    def boolean(self, data: dict, key: str, path: Path, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            self.report(path + (key,), f"expected true or false, got {_type_name(value)} {value!r}")
            return default
        return value

    def duration(self, data: dict, key: str, path: Path, default: float, positive: bool = False,
                 bare_ms: bool = False) -> float:
        """A duration (``bare_ms``: a number without a unit is milliseconds, as in Kafka Connect)."""
        if key not in data:
            return default
        try:
            seconds = (parse_duration_bare_ms if bare_ms else parse_duration)(data[key])
        except ValueError as exc:
            self.report(path + (key,), str(exc))
            return default
        if positive and seconds <= 0:
            self.report(path + (key,), f"expected a duration greater than 0, got {data[key]!r}")
            return default
        return seconds

    def component_id(self, data: dict, path: Path, what: str) -> str:
        value = data.get("id")
        id_path = path + ("id",)
        if value is None:
            self.report(path, f"missing required key 'id' of the {what}")
            return f"<{format_key_path(path)}>"
        if not isinstance(value, str) or not ID_PATTERN.match(value):
            self.report(
                id_path,
                f"expected an id of letters, digits, '_', '-', '.' (starting with a letter or digit, at most 128), got {value!r}",
            )
            return str(value)
        if value == model.DEAD_LETTER_QUEUE_ID:
            self.report(id_path, f"the id {value!r} is reserved for the dead letter queue")
        else:
            self.id_uses.append((value, id_path))
        return value

    def report_duplicate_ids(self) -> None:
        """Ids are unique across sources, destinations and all processors; the later use (in the file) is reported."""
        first: dict[str, Path] = {}
        for value, id_path in sorted(self.id_uses, key=lambda use: self.doc.line(use[1]) or 0):
            if value in first:
                self.report(id_path, f"duplicate id {value!r}: already used at {format_key_path(first[value])}")
            else:
                first[value] = id_path

    def plugin(self, data: dict, path: Path, role: str, default: str | None = None) -> str | None:
        schemas = SCHEMAS_BY_ROLE[role]
        value = data.get("plugin", default)
        if value is None:
            self.report(path, f"missing required key 'plugin' of the {role}; one of: {', '.join(schemas)}")
            return None
        if not isinstance(value, str):
            self.report(path + ("plugin",), f"expected a plugin name, got {_type_name(value)}")
            return None
        name = value[len(BUILTIN_PREFIX):] if value.startswith(BUILTIN_PREFIX) else value
        if name not in schemas:
            close = difflib.get_close_matches(name, list(schemas), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.report(
                path + ("plugin",),
                f"unknown {role} plugin {value!r}{hint} (available: {', '.join(schemas)}, optionally prefixed 'builtin:')",
            )
            return None
        return name

    # -- settings --------------------------------------------------------------------------
    def resolve_env(self, value: Any, path: Path) -> tuple[Any, bool]:
        """Substitute ${VAR} in every string under ``value``; returns (value, whether any was substituted)."""
        if isinstance(value, str):
            result = substitute(value, self.env)
            for name in result.malformed:
                self.report(path, f"malformed reference '${{{name}}}': expected ${{NAME}} with NAME of letters, digits and '_'")
            for name in result.missing:
                self.report(path, f"environment variable {name!r} is not set (referenced as ${{{name}}})")
            return result.value, bool(result.used)
        if isinstance(value, dict):
            out, used = {}, False
            for k, v in value.items():
                out[k], u = self.resolve_env(v, path + (k,))
                used = used or u
            return out, used
        if isinstance(value, list):
            items = [self.resolve_env(v, path + (i,)) for i, v in enumerate(value)]
            return [v for v, _ in items], any(u for _, u in items)
        return value, False

    def settings(self, raw: Any, path: Path, role: str, plugin: str | None) -> dict[str, Any]:
        data = self.mapping(raw, path, "settings")
        if data is None or plugin is None:
            return {}
        schema: PluginSchema = SCHEMAS_BY_ROLE[role][plugin]
        before = len(self.problems)
        self.check_keys(data, path, tuple(schema.settings), f"the settings of {role} plugin {plugin!r}")
        out: dict[str, Any] = {}
        for key, setting in schema.settings.items():
            if key not in data:
                continue
            env_problems = len(self.problems)
            value, from_env = self.resolve_env(data[key], path + (key,))
            if len(self.problems) > env_problems:
                continue
            try:
                out[key] = setting.kind.coerce(value, Context(self.base_dir, from_env))
            except ValueError as exc:
                message = str(exc)
                if is_secret_key(key):  # never echo a secret, even a wrongly typed one
                    message = f"expected {setting.kind.doc}, got {_type_name(value)}"
                self.report(path + (key,), message)
        self.apply_conditions(schema, data, out, path)
        for group in schema.one_of:
            given = [k for k in group if k in data]
            if not given:
                self.report(path, f"needs one of the settings {', '.join(group)}")
            elif len(given) > 1:
                self.report(path, f"give only one of the settings {', '.join(given)}")
        if len(self.problems) == before:
            for check in schema.checks:
                check(out, lambda key, message: self.report(path + (key,), message))
        for key in list(out):
            if is_secret_key(key) and out[key] is not None:
                out[key] = Secret(out[key])
                self.secret_keys.add(key)
                self.secret_paths.append(format_key_path(path + (key,)))
        return out

    def apply_conditions(self, schema: PluginSchema, data: dict, out: dict, path: Path) -> None:
        def current(key: str) -> Any:
            if key in out:
                return out[key]
            other = schema.settings.get(key)
            return other.default if other is not None and other.has_default else None

        def holds(condition) -> bool:
            return condition is None or current(condition[0]) in condition[1]

        def describe(condition) -> str:
            other, values = condition
            return f"{other} is {' or '.join(map(str, values))}"

        def undecidable(condition) -> bool:  # the other key was given but is invalid: already reported
            return condition is not None and condition[0] in data and condition[0] not in out

        for key, setting in schema.settings.items():
            if undecidable(setting.only_when) or undecidable(setting.required_when):
                continue
            given = key in data
            if given and not holds(setting.only_when):
                self.report(path + (key,), f"applies only when {describe(setting.only_when)}")
                out.pop(key, None)
                continue
            if given:
                continue
            if setting.required or (setting.required_when and holds(setting.required_when)):
                why = f" (required when {describe(setting.required_when)})" if setting.required_when else ""
                self.report(path, f"missing required setting {key!r}: {setting.doc}{why}")
            elif setting.has_default and holds(setting.only_when):
                out[key] = setting.default

    # -- structure -------------------------------------------------------------------------
    def processors(self, raw: Any, path: Path) -> tuple[model.ProcessorSpec, ...]:
        result = []
        for index, item in enumerate(self.sequence(raw, path, "processors")):
            item_path = path + (index,)
            data = self.mapping(item, item_path, "a processor", required=True)
            if data is None:
                continue
            self.check_keys(data, item_path, PROCESSOR_KEYS, "a processor")
            pid = self.component_id(data, item_path, "processor")
            plugin = self.plugin(data, item_path, "processor")
            settings = self.settings(data.get("settings"), item_path + ("settings",), "processor", plugin)
            result.append(model.ProcessorSpec(id=pid, plugin=plugin or "", settings=settings))
        return tuple(result)

    def connectors(self, raw: Any, path: Path, role: str, cls):
        result = []
        for index, item in enumerate(self.sequence(raw, path, f"{role}s", non_empty=True)):
            item_path = path + (index,)
            data = self.mapping(item, item_path, f"a {role}", required=True)
            if data is None:
                continue
            self.check_keys(data, item_path, CONNECTOR_KEYS, f"a {role}")
            cid = self.component_id(data, item_path, role)
            plugin = self.plugin(data, item_path, role)
            settings = self.settings(data.get("settings"), item_path + ("settings",), role, plugin)
            procs = self.processors(data.get("processors"), item_path + ("processors",))
            result.append(cls(id=cid, plugin=plugin or "", settings=settings, processors=procs))
        return tuple(result)

    def dead_letter_queue(self, raw: Any, path: Path) -> model.DeadLetterQueueSpec:
        data = self.mapping(raw, path, "dead-letter-queue")
        if data is None:
            data = {}
        self.check_keys(data, path, DLQ_KEYS, "dead-letter-queue")
        plugin = self.plugin(data, path, "destination", default="log")
        settings = self.settings(data.get("settings"), path + ("settings",), "destination", plugin)
        self.dlq_record_settings(plugin, settings, path + ("settings",))
        defaults = model.DeadLetterQueueSpec()
        return model.DeadLetterQueueSpec(
            plugin=plugin or defaults.plugin,
            settings=settings,
            window_size=self.integer(data, "window-size", path, defaults.window_size),
            window_nack_threshold=self.integer(data, "window-nack-threshold", path, defaults.window_nack_threshold),
            include_messages=self.boolean(data, "include-messages", path, defaults.include_messages),
            include_configs=self.boolean(data, "include-configs", path, defaults.include_configs),
        )

    def dlq_record_settings(self, plugin: str | None, settings: dict[str, Any], path: Path) -> None:
        """A Kafka DLQ record is the original record (its bytes, key, headers): the destination's record settings do not apply."""
        if plugin != "kafka":
            return
        for key in ("key", "value", "headers", "header-fields"):
            if key in settings:
                self.report(path + (key,), "not a setting of a Kafka dead letter queue: a DLQ record keeps the original "
                            "record's value, key and headers (docs/kafka.md, Kafka DLQ)")

    def errors(self, raw: Any, path: Path) -> model.ErrorsSpec:
        data = self.mapping(raw, path, "errors") or {}
        self.check_keys(data, path, ERRORS_KEYS, "errors")
        retry_path = path + ("retry",)
        retry = self.mapping(data.get("retry"), retry_path, "errors.retry") or {}
        self.check_keys(retry, retry_path, RETRY_KEYS, "errors.retry")
        defaults = model.RetrySpec()
        return model.ErrorsSpec(
            retry=model.RetrySpec(
                # Kafka Connect's keys, so a bare number is Connect's milliseconds (docs/spec.md)
                timeout_seconds=self.duration(retry, "timeout", retry_path, defaults.timeout_seconds, bare_ms=True),
                delay_max_seconds=self.duration(retry, "delay.max", retry_path, defaults.delay_max_seconds, positive=True,
                                                bare_ms=True),
            )
        )

    def version(self, data: dict) -> str:
        value = data.get("version", model.SPEC_VERSIONS[-1])
        text = str(value)
        text = text[:-2] if text.endswith(".0") else text
        if isinstance(value, bool) or text not in model.SPEC_VERSIONS:
            self.report(("version",), f"unsupported version {value!r}; expected one of: {', '.join(model.SPEC_VERSIONS)}")
        return text

    def pipeline(self) -> model.PipelineSpec | None:
        top = self.doc.data
        if top is None:
            self.report((), "the file is empty; expected a mapping with 'version' and 'pipeline'")
            return None
        if not isinstance(top, dict):
            self.report((), f"expected a mapping with 'version' and 'pipeline' at the top, got {_type_name(top)}")
            return None
        for dup_path, line in self.doc.duplicates:
            self.problems.append(Problem(self.file, format_key_path(dup_path), "key given twice in the same mapping", line))
        if "pipelines" in top:  # Conduit's own files hold a list of pipelines
            self.report(("pipelines",), "one pipeline per file: write 'pipeline:' (a mapping), not 'pipelines:' (a list)")
        self.check_keys({k: v for k, v in top.items() if k != "pipelines"}, (), TOP_KEYS, "the file")
        version = self.version(top)
        path: Path = ("pipeline",)
        data = self.mapping(top.get("pipeline"), path, "'pipeline'", required="pipelines" not in top)
        if data is None:
            return None
        self.check_keys(data, path, PIPELINE_KEYS, "pipeline")

        pid = data.get("id")
        if pid is None:
            self.report(path, "missing required key 'id' of the pipeline")
        elif not isinstance(pid, str) or not ID_PATTERN.match(pid):
            self.report(path + ("id",), f"expected an id of letters, digits, '_', '-', '.' (at most 128), got {pid!r}")
        description = data.get("description", "")
        if not isinstance(description, str):
            self.report(path + ("description",), f"expected a string, got {_type_name(description)}")
            description = ""
        mode = data.get("mode", "available-now")
        if mode not in model.MODES:
            self.report(path + ("mode",), f"expected one of {', '.join(model.MODES)}, got {mode!r}")
        trigger = self.duration(data, "trigger-interval", path, 5.0, positive=True)
        deadline = self.duration(data, "batch-deadline", path, model.PipelineSpec.batch_deadline_seconds, positive=True)

        sources = self.connectors(data.get("sources"), path + ("sources",), "source", model.SourceSpec)
        processors = self.processors(data.get("processors"), path + ("processors",))
        destinations = self.connectors(data.get("destinations"), path + ("destinations",), "destination", model.DestinationSpec)
        dlq = self.dead_letter_queue(data.get("dead-letter-queue"), path + ("dead-letter-queue",))
        errors = self.errors(data.get("errors"), path + ("errors",))
        self.report_duplicate_ids()
        if self.problems:
            return None
        return model.PipelineSpec(
            id=pid,
            sources=sources,
            destinations=destinations,
            processors=processors,
            dead_letter_queue=dlq,
            errors=errors,
            mode=mode,
            trigger_interval_seconds=trigger,
            batch_deadline_seconds=deadline,
            description=description,
            source_file=self.file,
            secret_keys=frozenset(self.secret_keys),
            secret_paths=tuple(self.secret_paths),
            version=version,
        )


def _validate_text(
    text: str, source_name: str, env: Mapping[str, str] | None, base_dir: str | None
) -> tuple[model.PipelineSpec | None, list[Problem]]:
    try:
        doc = load_yaml(text)
    except YamlSyntaxError as exc:
        return None, [Problem(source_name, format_key_path(exc.key_path), str(exc), exc.line)]
    validator = _Validator(
        source_name, doc, os.environ if env is None else env, os.path.abspath(base_dir or os.getcwd())
    )
    spec = validator.pipeline()
    # In file order, so the output reads top to bottom like the file (stable: same line keeps its order).
    return spec, sorted(validator.problems, key=lambda p: p.line or 0)


def _read(path: str | os.PathLike) -> tuple[str | None, list[Problem]]:
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            return handle.read(MAX_SPEC_CHARS + 1), []  # never more: load_yaml refuses what is over the limit
    except FileNotFoundError:
        return None, [Problem(name, "", "file not found")]
    except IsADirectoryError:
        return None, [Problem(name, "", "is a folder, expected a pipeline YAML file")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(name, "", f"cannot read the file: {exc}")]


def load_pipeline_from_string(
    text: str, source_name: str = "<string>", *, env: Mapping[str, str] | None = None, base_dir: str | None = None
) -> model.PipelineSpec:
    """Parse and validate spec text; raise SpecError with every problem.

    ``source_name`` names the text in problems; relative paths in settings are
    resolved against ``base_dir`` (default: the current directory); ``env``
    replaces ``os.environ`` for ``${VAR}`` references.
    """
    spec, problems = _validate_text(text, source_name, env, base_dir)
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def load_pipeline(path: str | os.PathLike, *, env: Mapping[str, str] | None = None) -> model.PipelineSpec:
    """Load and validate a spec file; relative paths in its settings are resolved against the file's folder."""
    text, problems = _read(path)
    if text is None:
        raise SpecError(problems)
    name = os.fspath(path)
    return load_pipeline_from_string(text, name, env=env, base_dir=os.path.dirname(os.path.abspath(name)))


def validate_file(path: str | os.PathLike, *, env: Mapping[str, str] | None = None) -> list[Problem]:
    """Every problem of a spec file (empty list: the file is valid)."""
    text, problems = _read(path)
    if text is None:
        return problems
    name = os.fspath(path)
    return _validate_text(text, name, env, os.path.dirname(os.path.abspath(name)))[1]
