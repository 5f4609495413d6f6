"""A page's way through the model: admission, render, request, retries, fallback; a PDF and a
group end to end; the live objects and counters of one run."""
