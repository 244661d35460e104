"""The serving engines' schemas, pure: which exposition families each engine speaks (an
EngineSchema per engine: vllm, ray_serve, lmdeploy, llamacpp; listed in registry) and how they
become one snapshot per route (grouping, over the engine-neutral values of series), and vLLM's
own speculative controls — its --speculative-config and batch schedule, read and written in one
place (vllm_schedule)."""
