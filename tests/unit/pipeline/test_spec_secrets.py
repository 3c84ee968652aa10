"""Secrets come from the environment and never show in str/repr, redacted output, JSON or error messages."""

from __future__ import annotations

import json
import pickle

import pytest

from airflow_conduit.pipeline import Secret, SpecError, load_pipeline_from_string, redact, redacted_dict, reveal
from airflow_conduit.pipeline.secrets import MASK, is_secret_key, mask_url_credentials

PASSWORD = "s3cr3t-Pa55"
TOKEN = "tok-98765"

SPEC = """\
version: "1"
pipeline:
  id: orders
  sources:
    - id: in
      plugin: file
      settings: {path: /data/in, format: parquet}
  destinations:
    - id: db
      plugin: jdbc
      settings:
        url: jdbc:postgresql://${DB_HOST}:5432/orders
        table: orders
        user: conduit
        password: ${DB_PASSWORD}
        key: [id]
  dead-letter-queue:
    plugin: jdbc
    settings:
      url: jdbc:postgresql://localhost/dlq
      table: dlq
      password: "literal-${DLQ_TOKEN}"
"""

ENV = {"DB_HOST": "db.internal", "DB_PASSWORD": PASSWORD, "DLQ_TOKEN": TOKEN}


@pytest.fixture
def spec():
    return load_pipeline_from_string(SPEC, "secrets.yaml", env=ENV)


def test_secret_settings_are_resolved_from_the_environment_and_wrapped(spec):
    password = spec.destinations[0].settings["password"]
    assert isinstance(password, Secret)
    assert password.get_secret_value() == PASSWORD
    assert spec.dead_letter_queue.settings["password"].get_secret_value() == f"literal-{TOKEN}"
    assert spec.destinations[0].settings["url"] == "jdbc:postgresql://db.internal:5432/orders"  # not a secret
    assert spec.destinations[0].settings["key"] == ["id"]  # 'key' (upsert columns) is not a secret
    assert spec.secret_keys == frozenset({"password"})
    assert spec.secret_paths == (
        "pipeline.destinations[0].settings.password",
        "pipeline.dead-letter-queue.settings.password",
    )


def test_secrets_never_appear_in_str_or_repr(spec):
    for text in (str(spec), repr(spec), repr(spec.destinations[0]), str(spec.destinations[0].settings),
                 f"{spec.destinations[0].settings['password']}", repr(spec.dead_letter_queue)):
        assert PASSWORD not in text and TOKEN not in text
    assert "'password': ***" in repr(spec.destinations[0].settings)


def test_redacted_outputs_hold_no_secret(spec):
    full = json.dumps(redacted_dict(spec))
    assert PASSWORD not in full and TOKEN not in full
    assert redacted_dict(spec)["pipeline"]["destinations"][0]["settings"]["password"] == MASK
    assert redact(spec.destinations[0].settings) == {
        "url": "jdbc:postgresql://db.internal:5432/orders",
        "table": "orders",
        "user": "conduit",
        "password": MASK,
        "key": ["id"],
        "driver": "org.postgresql.Driver",
    }


def test_redacted_dict_round_trips_to_an_equivalent_spec(spec):
    """The redacted dict uses the YAML's own keys: loading it back gives the same pipeline (secrets aside)."""
    import yaml

    data = redacted_dict(spec)
    again = load_pipeline_from_string(yaml.safe_dump(data), "again.yaml", env={})
    assert again.destinations[0].settings["password"].get_secret_value() == MASK
    assert again.sources == spec.sources and again.processors == spec.processors
    assert again.errors == spec.errors and again.mode == spec.mode


def test_settings_with_secrets_cannot_be_dumped_to_json_by_mistake(spec):
    with pytest.raises(TypeError):
        json.dumps(spec.destinations[0].settings)


def test_reveal_gives_the_real_values_for_the_connector(spec):
    settings = reveal(spec.destinations[0].settings)
    assert settings["password"] == PASSWORD and isinstance(settings["password"], str)
    assert spec.destinations[0].settings["password"] != PASSWORD  # the spec itself is unchanged


def test_secret_survives_pickling_for_spark_executors():
    secret = pickle.loads(pickle.dumps(Secret(PASSWORD)))
    assert secret.get_secret_value() == PASSWORD and repr(secret) == MASK
    assert secret == Secret(PASSWORD) and hash(secret) == hash(Secret(PASSWORD)) and secret != PASSWORD


def test_redact_masks_secret_named_keys_even_when_not_wrapped_and_urls():
    settings = {
        "api-key": "abc",
        "nested": {"client_secret": "def", "ssl-key-file": "/k.pem", "items": [{"token": "ghi"}]},
        "url": "jdbc:postgresql://user:pw@host/db?sslpassword=zz&x=1",
        "plain": "visible",
        "password": None,
    }
    out = json.dumps(redact(settings))
    for value in ("abc", "def", "/k.pem", "ghi", ":pw@", "zz"):
        assert value not in out
    assert "visible" in out and "x=1" in out


@pytest.mark.parametrize(
    "key,secret",
    [
        ("password", True), ("db-password", True), ("sslpassword", True), ("clientsecret", True), ("auth_token", True), ("token", True),
        ("client.secret", True), ("secret-key", True), ("key-file", True), ("ssl-key-file", True), ("keyfile", True),
        ("api-key", True), ("private_key", True), ("key", False), ("keys", False), ("user", False), ("path", False),
        ("tokenizer", False), ("max-files-per-trigger", False),
    ],
)
def test_secret_key_names(key, secret):
    assert is_secret_key(key) is secret


def test_url_credentials_are_masked():
    assert mask_url_credentials("jdbc:postgresql://u:p@h:5432/db") == "jdbc:postgresql://u:***@h:5432/db"
    assert mask_url_credentials("jdbc:postgresql://h/db?user=u&password=p") == "jdbc:postgresql://h/db?user=u&password=***"
    assert mask_url_credentials("jdbc:postgresql://h/db") == "jdbc:postgresql://h/db"


def test_a_missing_secret_variable_is_a_problem_that_does_not_leak_other_secrets():
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(SPEC, "secrets.yaml", env={"DB_HOST": "h", "DLQ_TOKEN": TOKEN})
    (problem,) = info.value.problems
    assert problem.key_path == "pipeline.destinations[0].settings.password"
    assert "'DB_PASSWORD' is not set" in problem.message
    assert TOKEN not in str(info.value)


def test_a_wrongly_typed_secret_is_not_echoed_in_the_problem():
    text = SPEC.replace("password: ${DB_PASSWORD}", "password: 918273645")
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(text, "secrets.yaml", env=ENV)
    (problem,) = info.value.problems
    assert problem.key_path == "pipeline.destinations[0].settings.password"
    assert "918273645" not in str(info.value) and "expected string" in problem.message


INLINE_PASSWORD_URLS = [
    "jdbc:oracle:thin:scott/Tiger-9x@db.internal:1521/svc",
    "jdbc:oracle:thin:scott/Tiger-9x@//db.internal:1521/svc",
    "JDBC:Oracle:OCI:scott/Tiger-9x@tns_alias",
    "jdbc:postgresql://conduit:Tiger-9x@db.internal/orders",
    "jdbc:postgresql://conduit:Tig@r-9x@db.internal/orders",
    "jdbc:postgresql://db.internal/orders?user=conduit&password=Tiger-9x",
    "jdbc:postgresql://db.internal/orders?user=conduit&PassWord=Tiger-9x",
    "jdbc:postgresql://db.internal/orders?sslpassword=Tiger-9x",
    "jdbc:sqlserver://db.internal:1433;databaseName=orders;user=sa;password=Tiger-9x",
    "jdbc:sqlserver://db.internal;user=sa;Password={Tiger;-9x}",
    "jdbc:sqlserver://db.internal;user=sa;PWD=Tiger-9x",
    "jdbc:db2://db.internal:50000/orders:user=conduit;password=Tiger-9x;",
    "jdbc:h2:tcp://db.internal/orders;USER=sa;PASSWORD=Tiger-9x",
    "jdbc:mysql://(host=db.internal,user=conduit,password=Tiger-9x)/orders",
    "oracle:thin:scott/Tiger-9x@db.internal:1521/svc",  # not even a JDBC URL: still never echoed
]


@pytest.mark.parametrize("url", INLINE_PASSWORD_URLS)
def test_every_inline_password_form_in_a_jdbc_url_is_refused_naming_key_and_file(url):
    text = SPEC.replace("jdbc:postgresql://${DB_HOST}:5432/orders", url)
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(text, "secrets.yaml", env=ENV)
    (problem,) = info.value.problems
    assert problem.file == "secrets.yaml" and problem.key_path == "pipeline.destinations[0].settings.url"
    assert "contains a password" in problem.message and "settings.password" in problem.message
    for part in ("Tiger", "9x"):
        assert part not in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "jdbc:oracle:thin:@db.internal:1521/svc",
        "jdbc:oracle:thin:@//db.internal:1521/svc",
        "jdbc:oracle:thin:/@wallet_alias",  # Oracle wallet: no password in the URL
        "jdbc:postgresql://conduit@db.internal/orders",  # a user alone is not a secret
        "jdbc:postgresql://db.internal/orders?user=conduit&sslmode=require",
        "jdbc:sqlserver://db.internal:1433;databaseName=orders;encrypt=true",
        "jdbc:mysql://db.internal/orders?bypassCache=true",
    ],
)
def test_urls_without_a_password_are_accepted(url):
    spec = load_pipeline_from_string(SPEC.replace("jdbc:postgresql://${DB_HOST}:5432/orders", url), "s.yaml", env=ENV)
    assert spec.destinations[0].settings["url"] == url


def test_a_password_in_a_path_uri_is_refused_but_a_partition_directory_is_not():
    text = SPEC.replace("path: /data/in", "path: s3a://AKIAEXAMPLE:Tiger-9x@bucket/in")
    with pytest.raises(SpecError) as info:
        load_pipeline_from_string(text, "secrets.yaml", env=ENV)
    (problem,) = info.value.problems
    assert problem.key_path == "pipeline.sources[0].settings.path" and "contains a password" in problem.message
    assert "Tiger" not in str(info.value)
    spec = load_pipeline_from_string(SPEC.replace("path: /data/in", "path: /data/in/pwd=3"), "s.yaml", env=ENV)
    assert spec.sources[0].settings["path"] == "/data/in/pwd=3"


@pytest.mark.parametrize("url", INLINE_PASSWORD_URLS)
def test_redaction_masks_every_inline_password_form(url):
    masked = mask_url_credentials(url)
    assert "Tiger" not in masked and "9x" not in masked and MASK in masked
