"""Shared fixtures. Each fixture family lives in its own module under tests/fixtures/."""

import os

# Prefect's telemetry writes noise (and SQLite lock tracebacks) in offline test runs.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.sim",
    "tests.fixtures.prefect",
    "tests.fixtures.s3_proxy",
    "tests.fixtures.vllm_cpu",
]
