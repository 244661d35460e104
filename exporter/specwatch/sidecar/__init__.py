"""The sidecar's source: scrape one vLLM's /metrics (scrape), turn polls into windows and
evaluations (pipeline) and an immutable State (state); record polls to a file and replay them
through the same pipeline (record, replay). Knows nothing of fleet mode."""
