"""Running and supervising the vLLM server ourselves: launch settings, launcher, watchdog."""
