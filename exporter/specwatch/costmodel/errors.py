"""The one error the cost model raises for inputs it cannot use."""

from __future__ import annotations


class CostModelError(ValueError):
    """A cost-model input that cannot be used; ``key`` is the config key at fault.

    ``str(error)`` is the human message (unchanged wording, some already start with the key);
    ``detail`` is that message without a leading ``"<key>: "`` so callers can print
    ``f"{error.key}: {error.detail}"`` without naming the key twice.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message

    @property
    def detail(self) -> str:
        prefix = f"{self.key}: "
        return self.message.removeprefix(prefix)
