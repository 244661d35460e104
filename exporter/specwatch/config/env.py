"""Environment overrides, derived from the schema: SPECWATCH_<KEY>, nested keys joined by a
double underscore (SPECWATCH_POLL_INTERVAL=2s, SPECWATCH_DECISION__MIN_DRAFTS=1000,
SPECWATCH_HARDWARE=h200, SPECWATCH_WINDOWS=1m,5m), plus keys of the first list item that name
their own variable (SPECWATCH_TARGET_URL), and aliases kept from earlier releases
(SPECWATCH_ALERT_WINDOW for SPECWATCH_ALERTING__WINDOW).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from specwatch.config import kinds
from specwatch.config.kinds import ConfigError, Context, Kind
from specwatch.config.nodes import ENV_PREFIX, Items, Key, Section
from specwatch.config.result import SCHEMA


@dataclass(frozen=True)
class EnvBinding:
    """One variable: the key path it sets (an int step is a list index) and how its text parses."""

    name: str
    path: tuple[str | int, ...]
    kind: Kind | None  # None: a section's shorthand (a bare string)


def _bindings(section: Section, path: tuple[str | int, ...]) -> Iterator[EnvBinding]:
    for node in section.keys:
        here = (*path, node.name)
        if isinstance(node, Key):
            if node.env is not None:
                # Aliases first: apply_env writes in order, so the main name wins when both are set.
                for alias in node.env_aliases:
                    yield EnvBinding(alias, here, node.kind)
                yield EnvBinding(node.env or derived_name(here), here, node.kind)
        elif isinstance(node, Section):
            if node.shorthand:
                yield EnvBinding(derived_name(here), here, None)
            yield from _bindings(node, here)
        elif isinstance(node, Items):
            for key in node.item.keys:
                if isinstance(key, Key) and key.env:
                    yield EnvBinding(key.env, (*here, 0, key.name), key.kind)


def derived_name(path: tuple[str | int, ...]) -> str:
    return ENV_PREFIX + "__".join(str(step) for step in path).upper()


ENV_BINDINGS: tuple[EnvBinding, ...] = tuple(_bindings(SCHEMA, ()))

#: SPECWATCH_* variables that are not config keys (read by the CLI itself).
OTHER_VARIABLES = frozenset({"SPECWATCH_MODE"})
KNOWN_VARIABLES = frozenset(b.name for b in ENV_BINDINGS) | OTHER_VARIABLES


def _dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")


#: SPECWATCH_<KEY> of a config key that has no variable (a list of sections: routes, targets):
#: an error, not silently ignored.
UNSETTABLE = {
    derived_name((node.name,)): node.name
    for node in SCHEMA.keys
    if derived_name((node.name,)) not in {b.name for b in ENV_BINDINGS}
}
#: The values SPECWATCH_MODE takes (read by the CLI).
MODES = ("sidecar", "standalone", "fleet")


def check_misspelled(environ: Mapping[str, str]) -> None:
    """A SPECWATCH_* variable that is one typo away from a known one is an error, as an unknown
    YAML key is, and so is one named after a key that cannot be set from the environment.
    Variables far from every name are left alone: tools of their own (test harnesses, wrappers)
    share the prefix."""
    mode = environ.get("SPECWATCH_MODE")
    if mode is not None and mode.strip().lower() not in ("", *MODES):
        raise ConfigError("environment variable SPECWATCH_MODE", f"{mode!r} is not one of {', '.join(MODES)}")
    for name in environ:
        if name in UNSETTABLE:
            raise ConfigError(
                f"environment variable {name}",
                f"{UNSETTABLE[name]} cannot be set from the environment; set it in the config file",
            )
        if not name.startswith(ENV_PREFIX) or name in KNOWN_VARIABLES:
            continue
        import difflib  # only to name a near variable in the error

        near = difflib.get_close_matches(name, sorted(KNOWN_VARIABLES), n=1, cutoff=0.85)
        if near:
            raise ConfigError(f"environment variable {name}", f"not a specwatch variable; did you mean {near[0]}?")


def _checked(binding: EnvBinding, value: object, environ: Mapping[str, str]) -> None:
    """Parse a variable's value on its own, so a bad one is reported under the variable's name
    (the user never wrote the key it sets). Kinds that read files are checked later, where the
    config file's directory is known."""
    if binding.kind is None or type(binding.kind).__module__ != kinds.__name__:
        return
    try:
        binding.kind.parse(value, binding.name, Context(environ=environ))
    except ConfigError as exc:
        raise ConfigError(
            f"environment variable {binding.name}", f"{exc.reason} (it sets {_dotted(binding.path)})"
        ) from None


def apply_env(raw: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """A copy of raw with every SPECWATCH_* variable that is set written into it."""
    check_misspelled(environ)
    result = dict(raw)
    for binding in ENV_BINDINGS:
        if binding.name in environ:
            text = environ[binding.name]
            try:
                value = binding.kind.from_env(text) if binding.kind else text
            except ConfigError as exc:
                raise ConfigError(
                    f"environment variable {binding.name}", f"{exc.reason} (it sets {_dotted(binding.path)})"
                ) from None
            _checked(binding, value, environ)
            _set(result, binding.path, value)
    return result


def _set(tree: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Write value at path, copying every container on the way so the caller's data is untouched.
    A container of the wrong type is left alone: validation reports it with its key."""
    step, rest = path[0], path[1:]
    if not rest:
        tree[str(step)] = value
        return
    current = tree.get(str(step))
    if isinstance(rest[0], int):  # a list of sections: write into item rest[0]
        if current is not None and not isinstance(current, list):
            return
        items = list(current or []) or [{}]
        index = rest[0]
        items.extend({} for _ in range(index + 1 - len(items)))
        item = items[index] if items[index] is not None else {}
        if not isinstance(item, Mapping):
            return
        item = dict(item)
        _set(item, rest[1:], value)
        items[index] = item
        tree[str(step)] = items
        return
    section = _section_at(path[: len(path) - len(rest)])
    if current is None:
        current = {}
    elif isinstance(current, str) and section is not None and section.shorthand:
        current = {section.shorthand: current}  # hardware: h100-sxm plus SPECWATCH_HARDWARE__MBU
    if not isinstance(current, Mapping):
        return
    child = dict(current)
    _set(child, rest, value)
    tree[str(step)] = child


def _section_at(path: tuple[str | int, ...]) -> Section | None:
    section: Section | None = SCHEMA
    for step in path:
        if section is None or isinstance(step, int):
            return None
        found = next((n for n in section.keys if n.name == step), None)
        section = found if isinstance(found, Section) else found.item if isinstance(found, Items) else None
    return section


def named_by_environment(exc: ConfigError, environ: Mapping[str, str], overrides: Mapping[str, Any]) -> ConfigError:
    """``exc`` reported under the SPECWATCH_* variable that set its key, when one did (and no flag
    overrode it): the user never wrote the key. Else ``exc`` itself."""
    if exc.key.startswith("environment variable "):
        return exc
    for binding in reversed(ENV_BINDINGS):  # the main name after its aliases: it wins when both are set
        if binding.name not in environ or str(binding.path[0]) in overrides:
            continue
        path = _dotted(binding.path)
        if exc.key == path or exc.key.startswith((path + ".", path + "[")):
            return ConfigError(f"environment variable {binding.name}", f"{exc.reason} (it sets {exc.key})")
    return exc
