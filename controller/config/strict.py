"""The one strict reader of untrusted JSON and YAML values.

Everything the controller reads from outside (the config file, instance and
plan files, job and plan bodies of the REST API) goes through a `Reader`: an
unknown key, a missing key, a value of the wrong type or out of range is an
`InputError` (a `ConfigError` for the config) whose one-line message starts with
the key path of the value, for example
``topology.links[2].capacity: expected a number, got a string``. Key paths are
built with `key` and `item`; the empty path is ``top level``.

Two readers, one per vocabulary, word the same checks differently (their
messages are part of the formats' documentation and tests):

- `JSON`, for the instance and plan formats (`instance`): JSON's terms ("an
  object", "an array", "unknown field 'x'" at the object) and bounds in words
  ("must be a positive number");
- `CONFIG`, for the controller config (`load`): YAML's terms ("a mapping",
  "a list", "unknown key" at the key's own path, with the allowed keys) and
  bounds as relations ("must be > 0", "must be within [1, 65535]"); a string
  given for a number is quoted, with a hint where YAML read a number as a string.

Also here: the text parsers that refuse duplicate keys (`parse_config_text`,
`parse_json`) and `read_text`, all raising the same errors. Imports nothing from
the controller.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class InputError(Exception):
    """Bad input; the message is one line that names the place of the problem."""


class ConfigError(InputError):
    """A bad configuration; the message is one line that starts with the key path."""


def key(where: str, name: str) -> str:
    """The path of key `name` of the mapping at `where`."""
    return f"{where}.{name}" if where else name


def item(where: str, i: int) -> str:
    """The path of item `i` of the list at `where`."""
    return f"{where}[{i}]"


@dataclass(frozen=True)
class Reader:
    """Typed, checked reads of parsed JSON/YAML values; every failure raises
    `error` with a message that starts with the value's key path.

    `json`: word messages in JSON's terms (see the module docstring), else in the
    config's.
    """

    error: type[InputError]
    json: bool

    def fail(self, where: str, message: str) -> InputError:
        """The error to raise for the value at `where` (the top level when empty)."""
        return self.error(f"{where or 'top level'}: {message}")

    def type_name(self, value: Any) -> str:
        """What `value` is, as a message says it: "a string", "an object", ..."""
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "a boolean"
        if isinstance(value, (int, float)):
            return "a number"
        if isinstance(value, str):
            return "a string"
        if isinstance(value, list):
            return "an array" if self.json else "a list"
        if isinstance(value, dict):
            return "an object" if self.json else "a mapping"
        return type(value).__name__

    def mapping(self, value: Any, where: str, required: Iterable[str] = (), optional: Iterable[str] = ()) -> dict:
        """`value` as a mapping with string keys: every key of `required` and
        perhaps some of `optional`, no other."""
        required = tuple(required)
        allowed = required + tuple(optional)
        if not isinstance(value, dict):
            raise self.fail(where, f"expected {self.type_name({})}, got {self.type_name(value)}")
        for k in value:
            if not isinstance(k, str) and not self.json:  # (JSON's keys are strings)
                raise self.fail(where, f"keys must be strings, got {self.type_name(k)} {k!r}")
            if k not in allowed:
                if self.json:
                    raise self.fail(where, f"unknown field {k!r}")
                raise self.fail(key(where, k), f"unknown key (allowed: {', '.join(allowed)})")
        for k in required:
            if k not in value:
                raise self.fail(where, f"missing field {k!r}") if self.json else self.fail(key(where, k), "missing required key")
        return value

    def array(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            raise self.fail(where, f"expected {self.type_name([])}, got {self.type_name(value)}")
        return value

    def string(self, value: Any, where: str) -> str:
        """A non-empty string."""
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {self.type_name(value)}")
        if not value:
            raise self.fail(where, "must not be empty")
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected a boolean, got {self.type_name(value)}")
        return value

    def integer(self, value: Any, where: str, minimum: int = 0, maximum: int | None = None) -> int:
        """An integer in [`minimum`, `maximum`] (no upper bound when None). Booleans
        are not integers."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {self.type_name(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            if self.json and maximum is None and minimum in (0, 1):
                bound = "a positive integer" if minimum == 1 else "a non-negative integer"
            else:
                bound = f">= {minimum}" if maximum is None else f"within [{minimum}, {maximum}]"
            raise self.fail(where, f"must be {bound}, got {value}")
        return value

    def number(self, value: Any, where: str, *, positive: bool = True) -> float:
        """A finite number, > 0 when `positive`, else >= 0. Booleans are not numbers."""
        if isinstance(value, str) and not self.json:
            hint = ""
            try:
                float(value)
                hint = " (YAML reads 10e9 as a string: write 1.0e+10 or 10000000000)"
            except ValueError:
                pass
            raise self.fail(where, f"expected a number, got a string {value!r}{hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {self.type_name(value)}")
        x = float(value)
        if not math.isfinite(x):
            raise self.fail(where, f"must be {'a finite number' if self.json else 'finite'}, got {value}")
        if positive and x <= 0:
            raise self.fail(where, f"must be {'a positive number' if self.json else '> 0'}, got {value}")
        if not positive and x < 0:
            raise self.fail(where, f"must be {'a non-negative number' if self.json else '>= 0'}, got {value}")
        return x


JSON = Reader(InputError, json=True)
CONFIG = Reader(ConfigError, json=False)


# -- text ------------------------------------------------------------------------------


def read_text(path: str | Path, error: type[InputError] = InputError) -> str:
    """The UTF-8 text of the file at `path`; `error` naming the path otherwise."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None


def parse_json(text: str, error: type[InputError] = InputError, *, unique_keys: bool = True) -> Any:
    """Parse JSON `text`; with `unique_keys` a key given twice in an object is an error."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                raise error(f"duplicate key {k!r}")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates if unique_keys else None)
    except json.JSONDecodeError as e:
        raise error(f"not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys (PyYAML keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        k = loader.construct_object(key_node, deep=deep)
        try:
            hash(k)
        except TypeError:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: unhashable key") from None
        if k in out:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {k!r}")
        out[k] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_config_text(text: str, fmt: str) -> Any:
    """Parse `text` as 'yaml' or 'json' (duplicate keys are an error): a `ConfigError`."""
    if fmt == "json":
        return parse_json(text, ConfigError)
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"not YAML: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
