"""The pipeline spec as a JSON Schema (draft 2020-12), derived from the loader's own tables.

Editors validate and complete pipeline YAML with it (``# yaml-language-server: $schema=...``).
Everything comes from ``settings_schema`` (every plugin's settings: kinds, defaults, required, docs)
and from the loader's structure (its key lists, id pattern, modes, DLQ and retry defaults), so a
plugin added to the tables appears here without another edit. The loader stays the authority: it
checks what a schema cannot (``${ENV}`` values, DDL, duplicate ids) and names file, line and key.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from airflow_conduit.pipeline import loader, model
from airflow_conduit.pipeline.kafka_settings import ClientProperties, ConnectionId, KafkaServers, StartingOffsets
from airflow_conduit.pipeline.settings_schema import (
    RULE_ACTIONS,
    SCHEMAS_BY_ROLE,
    Boolean,
    Choice,
    Expression,
    ExpressionList,
    FunctionRef,
    Integer,
    JdbcUrl,
    Kind,
    Number,
    PluginSchema,
    RuleList,
    Setting,
    String,
    StringList,
    StringMap,
    TypeMap,
    _RULE_NAME,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ENV_REFERENCE = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*\}",
                 "description": "a ${ENV_VAR} reference, resolved when the spec is loaded"}
_NUMBER = r"\+?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?"  # no minus: a spec's durations are never negative
_DURATION_TEXT = rf"^\s*({_NUMBER}s?|\+?((\d+(\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s))+)\s*$"


def ecma_pattern(pattern: re.Pattern[str]) -> str:
    """A Python pattern used with ``match`` (anchored at the start, ``\\Z`` at the end) as an ECMA-262 regex."""
    return "^" + pattern.pattern.replace(r"\Z", "$")


def any_case(words: tuple[str, ...]) -> dict[str, Any]:
    """Exactly these words, in any letter case (the loader lower-cases choices); completion offers them as written."""
    spelled = ("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word) for word in words)
    return {"anyOf": [{"enum": list(words)}, {"type": "string", "pattern": f"^({'|'.join(spelled)})$"}]}


def duration(description: str, default: float | None = None, *, positive: bool = False) -> dict[str, Any]:
    """A duration as the spec accepts it: ``"5s"``, ``"1m30s"``, ``"500ms"`` or a number."""
    number: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0} if positive else {"type": "number", "minimum": 0}
    schema: dict[str, Any] = {"description": description, "anyOf": [number, {"type": "string", "pattern": _DURATION_TEXT}]}
    if default is not None:
        schema["default"] = default
    return schema


def _non_empty_string() -> dict[str, Any]:
    return {"type": "string", "pattern": r"\S"}


def _expression() -> dict[str, Any]:
    return {"anyOf": [_non_empty_string(), {"type": "number"}, {"type": "boolean"}]}


def _string_list(kind: StringList) -> dict[str, Any]:
    listed = {"type": "array", "minItems": 1, "uniqueItems": True, "items": _non_empty_string()}
    return {"anyOf": [_non_empty_string(), listed]} if kind.allow_single else listed


def _rules() -> dict[str, Any]:
    rule = {
        "type": "object",
        "required": ["name", "condition"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": ecma_pattern(_RULE_NAME)},
            "condition": {**_expression(), "description": "Spark SQL boolean expression"},
            "action": {**any_case(RULE_ACTIONS), "default": "warn"},
        },
    }
    return {"type": "array", "minItems": 1, "items": rule}


def _bounded(kind: Integer | Number, json_type: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": json_type}
    if kind.minimum is not None:
        schema["minimum"] = kind.minimum
    if kind.maximum is not None:
        schema["maximum"] = kind.maximum
    return schema


# Most specific kinds first: a kind subclassing one of these (a new ``String`` kind) gets its parent's schema.
KIND_SCHEMAS: tuple[tuple[type, Any], ...] = (
    (KafkaServers, lambda kind: {"anyOf": [
        {"type": "string", "pattern": r"^\s*[^,\s]+:\d+(\s*,\s*[^,\s]+:\d+)*\s*$"},
        {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": r"^\s*[^,\s]+:\d+\s*$"}},
    ]}),
    (ConnectionId, lambda kind: {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,249}$"}),
    (ClientProperties, lambda kind: {"type": "object", "minProperties": 1,
                                     "additionalProperties": {"type": ["string", "number", "boolean"]}}),
    (StartingOffsets, lambda kind: {"anyOf": [
        any_case(("earliest", "latest")),
        {"type": "string", "pattern": r"^\s*\{"},  # per-partition offsets as JSON text
        {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "minProperties": 1, "additionalProperties": {"type": "integer", "minimum": -2}}},
    ]}),
    (JdbcUrl, lambda kind: {"type": "string", "pattern": "^jdbc:[a-z0-9]+:"}),
    (FunctionRef, lambda kind: {"type": "string", "pattern": ecma_pattern(FunctionRef._PATTERN)}),
    (String, lambda kind: _non_empty_string()),  # also paths and DDL column lists
    (Integer, lambda kind: _bounded(kind, "integer")),
    (Number, lambda kind: _bounded(kind, "number")),
    (Boolean, lambda kind: {"type": "boolean"}),
    (Choice, lambda kind: any_case(kind.choices)),
    (TypeMap, lambda kind: {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}),
    (StringMap, lambda kind: {"type": "object", "minProperties": 1, "additionalProperties": _non_empty_string()}),
    (StringList, _string_list),
    (Expression, lambda kind: _expression()),
    (ExpressionList, lambda kind: {"type": "array", "minItems": 1, "items": _expression()}),
    (RuleList, lambda kind: _rules()),
)


def has_json_schema(kind_type: type[Kind]) -> bool:
    return any(issubclass(kind_type, cls) for cls, _ in KIND_SCHEMAS)


def kind_schema(kind: Kind) -> dict[str, Any] | None:
    """The JSON Schema of one kind of value, or None for a kind this module does not know (any value then)."""
    for cls, build in KIND_SCHEMAS:
        if isinstance(kind, cls):
            return build(kind)
    return None


def setting_schema(setting: Setting) -> dict[str, Any]:
    """One setting: its kind (or a ``${ENV_VAR}`` reference), its doc and its default."""
    schema: dict[str, Any] = {"description": f"{setting.doc} ({setting.kind.doc})"}
    typed = kind_schema(setting.kind)
    if typed is not None:
        schema["anyOf"] = [typed, ENV_REFERENCE]
    if setting.has_default:
        schema["default"] = setting.default
    return schema


def _condition_holds(plugin: PluginSchema, condition: tuple[str, tuple[Any, ...]]) -> dict[str, Any]:
    """``other`` (after its default) is one of ``values``, as a schema of the settings object."""
    other, values = condition
    allowed = any_case(tuple(values)) if all(isinstance(v, str) for v in values) else {"enum": list(values)}
    holds: dict[str, Any] = {"properties": {other: allowed}}
    other_setting = plugin.settings.get(other)
    if not (other_setting is not None and other_setting.has_default and other_setting.default in values):
        holds["required"] = [other]  # absent, the other key does not satisfy the condition
    return holds


def settings_schema(plugin: PluginSchema) -> dict[str, Any]:
    """A plugin's ``settings`` mapping: known keys only, required ones, conditions and one-of groups."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": plugin.doc,
        "additionalProperties": False,
        "properties": {key: setting_schema(setting) for key, setting in plugin.settings.items()},
    }
    required = [key for key, setting in plugin.settings.items() if setting.required]
    if required:
        schema["required"] = required
    rules: list[dict[str, Any]] = []
    for key, setting in plugin.settings.items():
        if setting.required_when is not None:
            rules.append({"if": _condition_holds(plugin, setting.required_when), "then": {"required": [key]}})
        if setting.only_when is not None:
            rules.append({"if": _condition_holds(plugin, setting.only_when), "else": {"properties": {key: False}}})
    for group in plugin.one_of:
        rules.append({"oneOf": [{"required": [key]} for key in group]})
    if rules:
        schema["allOf"] = rules
    return schema


def _needs_settings(plugin: PluginSchema) -> bool:
    return bool(plugin.one_of) or any(s.required or s.required_when is not None for s in plugin.settings.values())


def plugin_names(role: str) -> list[str]:
    names = list(SCHEMAS_BY_ROLE[role])
    return names + [loader.BUILTIN_PREFIX + name for name in names]


def plugin_choice(role: str, default: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": plugin_names(role), "description": f"the {role} plugin ('builtin:' prefix optional)"}
    if default is not None:
        schema["default"] = default
    return schema


def settings_by_plugin(role: str) -> list[dict[str, Any]]:
    """One ``if plugin is P then settings follow P's table`` rule per plugin of ``role``."""
    rules = []
    for name, plugin in SCHEMAS_BY_ROLE[role].items():
        then: dict[str, Any] = {"properties": {"settings": settings_schema(plugin)}}
        if _needs_settings(plugin):
            then["required"] = ["settings"]
        else:
            then["properties"]["settings"] = {"anyOf": [settings_schema(plugin), {"type": "null"}]}
        named = {"required": ["plugin"], "properties": {"plugin": {"enum": [name, loader.BUILTIN_PREFIX + name]}}}
        rules.append({"if": named, "then": then})
    return rules


def component_id(what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": ecma_pattern(loader.ID_PATTERN),
        "not": {"const": model.DEAD_LETTER_QUEUE_ID},
        "description": f"the {what}'s id, unique in the pipeline (names folders in the state directory)",
    }


def component(role: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A source, destination or processor entry: id, plugin, settings (and, for connectors, its processors)."""
    properties: dict[str, Any] = {
        "id": component_id(role),
        "plugin": plugin_choice(role),
        "settings": {"type": ["object", "null"]},
        "processors": {"$ref": "#/$defs/processors"},
    }
    return {
        "type": "object",
        "required": ["id", "plugin"],
        "additionalProperties": False,
        "properties": {key: properties[key] for key in keys},
        "allOf": settings_by_plugin(role),
    }


def dead_letter_queue() -> dict[str, Any]:
    defaults = model.DeadLetterQueueSpec()
    properties = {
        "plugin": plugin_choice("destination", default=defaults.plugin),
        "settings": {"type": ["object", "null"]},
        "window-size": {"type": "integer", "minimum": 0, "default": defaults.window_size,
                        "description": "how many of the last records the nack window looks at; 0 = no limit"},
        "window-nack-threshold": {"type": "integer", "minimum": 0, "default": defaults.window_nack_threshold,
                                  "description": "nacks tolerated within the window before the pipeline stops"},
        "include-messages": {"type": "boolean", "default": defaults.include_messages,
                             "description": "keep the record itself in its DLQ record"},
        "include-configs": {"type": "boolean", "default": defaults.include_configs,
                            "description": "keep the pipeline's configuration (secrets redacted) in each DLQ record"},
    }
    return {
        "type": ["object", "null"],
        "description": "where nacked records go, and how many the pipeline tolerates",
        "additionalProperties": False,
        "properties": {key: properties[key] for key in loader.DLQ_KEYS},
        # the plugin defaults to log: an absent plugin takes the log destination's settings
        "allOf": [{"if": {"not": {"required": ["plugin"]}}, "then": {"properties": {"settings": {
            "anyOf": [settings_schema(SCHEMAS_BY_ROLE["destination"][defaults.plugin]), {"type": "null"}]}}}},
            *settings_by_plugin("destination")],
    }


def errors() -> dict[str, Any]:
    defaults = model.RetrySpec()
    retry = {
        "timeout": duration("how long one record is retried after a transient error (errors.retry.timeout)",
                            defaults.timeout_seconds),
        "delay.max": duration("the longest wait between two retries of one record (errors.retry.delay.max)",
                              defaults.delay_max_seconds, positive=True),
    }
    return {
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {"retry": {"type": ["object", "null"], "additionalProperties": False,
                                 "properties": {key: retry[key] for key in loader.RETRY_KEYS}}},
    }


def _spec_default(field_name: str) -> Any:
    return next(f.default for f in dataclasses.fields(model.PipelineSpec) if f.name == field_name)


def pipeline_json_schema() -> dict[str, Any]:
    """The whole spec file: ``version`` and one ``pipeline``."""
    pipeline = {
        "id": {"type": "string", "pattern": ecma_pattern(loader.ID_PATTERN), "description": "the pipeline's id"},
        "description": {"type": "string"},
        "mode": {"enum": list(model.MODES), "default": _spec_default("mode"),
                 "description": "available-now: process what is there, then stop; continuous: run until stopped"},
        "trigger-interval": duration("time between two micro-batches (continuous mode)",
                                     _spec_default("trigger_interval_seconds"), positive=True),
        "batch-deadline": duration("the longest a micro-batch may run; one that runs longer ends the run (transient 1220)",
                                   _spec_default("batch_deadline_seconds"), positive=True),
        "sources": {"type": "array", "minItems": 1, "items": component("source", loader.CONNECTOR_KEYS)},
        "processors": {"$ref": "#/$defs/processors"},
        "destinations": {"type": "array", "minItems": 1, "items": component("destination", loader.CONNECTOR_KEYS)},
        "dead-letter-queue": dead_letter_queue(),
        "errors": errors(),
    }
    versions = list(model.SPEC_VERSIONS)
    return {
        "$schema": DRAFT,
        "title": "airflow-conduit pipeline",
        "description": "A Conduit-style pipeline spec (docs/spec.md). Generated by `airflow-conduit schema`.",
        "type": "object",
        "required": ["pipeline"],
        "additionalProperties": False,
        "properties": {
            "version": {"enum": versions + [int(v) for v in versions if v.isdigit()], "default": versions[-1]},
            "pipeline": {
                "type": "object",
                "required": ["id", "sources", "destinations"],
                "additionalProperties": False,
                "properties": {key: pipeline[key] for key in loader.PIPELINE_KEYS},
            },
        },
        "$defs": {"processors": {"type": ["array", "null"], "items": component("processor", loader.PROCESSOR_KEYS)}},
    }
