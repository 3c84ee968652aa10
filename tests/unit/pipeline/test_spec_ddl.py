"""The pure-Python DDL reader accepts Spark's schema strings and refuses typos before Spark starts."""

from __future__ import annotations

import pytest

from airflow_conduit.pipeline.ddl import Column, DDLError, parse_ddl, parse_type


def test_columns_types_nullability_and_comments():
    columns = parse_ddl(
        "id INT NOT NULL, customer string, amount DECIMAL(10, 2), ts TIMESTAMP, "
        "tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>, `odd name` STRUCT<a: INT, b STRING NOT NULL> COMMENT 'nested'"
    )
    assert columns == [
        Column("id", "INT", nullable=False),
        Column("customer", "STRING"),
        Column("amount", "DECIMAL(10,2)"),
        Column("ts", "TIMESTAMP"),
        Column("tags", "ARRAY<STRING>"),
        Column("attrs", "MAP<STRING,BIGINT>"),
        Column("odd name", "STRUCT<a:INT,b:STRING NOT NULL>", comment="nested"),
    ]


def test_normalized_struct_types_quote_names_that_need_it():
    assert parse_type("STRUCT<`odd name`: INT, plain: STRING>") == "STRUCT<`odd name`:INT,plain:STRING>"
    assert parse_type(parse_type("STRUCT<`odd name`: INT>")) == "STRUCT<`odd name`:INT>"  # reads back the same


@pytest.mark.parametrize(
    "alias,normal",
    [("integer", "INT"), ("long", "BIGINT"), ("short", "SMALLINT"), ("byte", "TINYINT"), ("real", "FLOAT"),
     ("dec", "DECIMAL(10,0)"), ("numeric(5)", "DECIMAL(5,0)"), ("varchar(20)", "VARCHAR(20)"), ("timestamp_ntz", "TIMESTAMP_NTZ")],
)
def test_type_aliases_are_normalized(alias, normal):
    assert parse_type(alias) == normal


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "expected a DDL column list"),
        ("id INTT", "unknown type 'INTT' for column 'id' (did you mean INT?)"),
        ("id INT,", "unexpected end of schema, expected a column name"),
        ("id INT name STRING", "expected ',' or the end of the schema after column 'id'"),
        ("id INT, ID STRING", "column 'ID' is declared twice"),
        ("x DECIMAL(40, 2)", "need 1 <= precision <= 38"),
        ("x ARRAY<INT", "expected '>'"),
        ("s STRUCT<a: FOO>", "unknown type 'FOO' for column 's.a'"),
        ("id", "expected a type for column 'id'"),
        ("id INT NOT", "expected NULL after NOT"),
        ("id INT; DROP TABLE x", "unexpected character ';'"),
        ("v VARCHAR", "expected '('"),
    ],
)
def test_bad_schemas_say_what_is_wrong(text, fragment):
    with pytest.raises(DDLError) as info:
        parse_ddl(text)
    assert fragment in str(info.value)


def test_parse_type_refuses_trailing_text():
    with pytest.raises(DDLError, match="unexpected 'STRING'"):
        parse_type("INT STRING")
