"""The vLLM server: its /metrics contract, which server a run uses, and launching and
supervising one ourselves (settings, launcher, watchdog, reaper)."""
