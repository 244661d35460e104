"""The serving engine's schema, pure: which exposition families an engine speaks and how they
become one snapshot per route (vllm), and the engine's own speculative controls — vLLM's
--speculative-config and its batch schedule, read and written in one place (vllm_schedule)."""
