"""Shared fixtures. Each fixture family lives in its own module under tests/fixtures/."""

import os

from hypothesis import settings

# Prefect's telemetry writes noise (and SQLite lock tracebacks) in offline test runs.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Property tests draw the same examples on every run, so CI's verdict depends on the code
# alone; HYPOTHESIS_PROFILE=explore draws fresh random ones (run it locally to hunt).
settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.s3_auth",
    "tests.fixtures.sim",
    "tests.fixtures.prefect",
    "tests.fixtures.prefect_ui",
    "tests.fixtures.browser",
    "tests.fixtures.s3_proxy",
    "tests.fixtures.vllm_cpu",
]
