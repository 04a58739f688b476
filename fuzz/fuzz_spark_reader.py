"""atheris harness: the Spark source's partition-file reader (kafkalog.spark.logfiles), no JVM. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("spark_logfiles")
