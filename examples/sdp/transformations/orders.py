"""Orders: JSON lines checked by expectations into `orders` and `orders_quarantine`, totals per customer."""

import os

from pyspark import pipelines as dp
from pyspark.sql import functions as F

from airflow_conduit.spark.sdp.expectations import expect, permissive, quarantined_table

SCHEMA = "id INT, customer STRING, amount DOUBLE"
INPUT = os.path.abspath(spark.conf.get("orders.input"))  # noqa: F821 - SDP injects `spark`; imported in the project folder


def raw_orders(path=INPUT):  # path=: replayable, a replay's records are read with this same parse (docs/sdp.md)
    reader = spark.readStream.format("json").option("maxFilesPerTrigger", 1)  # noqa: F821
    return permissive(reader, SCHEMA).load(path)


quarantined_table("orders", raw_orders, [
    expect("id_present", "id IS NOT NULL", "quarantine"),
    expect("amount_positive", "amount > 0", "drop"),
    expect("customer_named", "customer IS NOT NULL", "warn"),
    expect("amount_below_limit", "amount < 1000000", "fail"),
], schema=SCHEMA)


@dp.materialized_view(name="customer_totals")
def customer_totals():
    orders = spark.read.table("orders")  # noqa: F821
    return orders.groupBy("customer").agg(F.sum("amount").alias("total"), F.count(F.lit(1)).alias("orders"))
