"""specwatch: is vLLM's speculative decoding paying for itself at the live batch size?"""

__version__ = "0.1.0"
