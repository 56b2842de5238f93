"""Settings as frozen dataclasses, overridden from YAML files and ``--set KEY=VALUE``, with clear errors.

A field declares its valid values next to its docstring with ``setting``: ``gamma: float = setting(0.99, at_least=0,
at_most=1)``, ``activation: str = setting("tanh", choices=("tanh", "relu"))``; ``check_settings`` refuses a value
outside them, naming the field, the value and the range, before anything is built (``Agent.__init__``, ``RunConfig``),
and the documentation's reference shows them (``describe_limits``). A subclass that redeclares a field to change its
default keeps the base's limits (``field_limits``)."""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
import types
import typing
from typing import Any

import yaml


class ConfigError(ValueError):
    """A setting that does not exist or does not parse."""


LIMITS = "limits"  # the key of a field's metadata that ``setting`` writes


def setting(
    default: Any,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    choices: tuple | None = None,
) -> Any:
    """A dataclass field with ``default`` and the values it accepts: bounds on a number (or on each number of a
    tuple), or a tuple of ``choices``. ``None``, where the field's type allows it, passes."""
    limits = {
        name: value
        for name, value in (("at_least", at_least), ("above", above), ("at_most", at_most), ("below", below),
                            ("choices", choices))
        if value is not None
    }  # fmt: skip
    return dataclasses.field(default=default, metadata={LIMITS: limits})


def field_limits(config_class: type, name: str) -> dict[str, Any]:
    """The valid values that field ``name`` of a config dataclass declares (``setting``), or that the nearest base
    class declares for it, where a subclass redeclares the field only to change its default; ``{}`` if none."""
    for cls in config_class.__mro__:
        field = getattr(cls, "__dataclass_fields__", {}).get(name)
        if field is not None and LIMITS in field.metadata:
            return field.metadata[LIMITS]
    return {}


def describe_limits(limits: dict[str, Any]) -> str:
    """Valid values in words (``">= 0, <= 1"``, ``"one of 'tanh', 'relu'"``), or ``""`` where there are none."""
    words = {"at_least": ">=", "above": ">", "at_most": "<=", "below": "<"}
    parts = [f"{words[name]} {value:g}" for name, value in limits.items() if name in words]
    if "choices" in limits:
        parts.append("one of " + ", ".join(repr(choice) for choice in limits["choices"]))
    return ", ".join(parts)


def _within(value: Any, limits: dict[str, Any]) -> bool:
    if "choices" in limits:
        return value in limits["choices"]
    if isinstance(value, (tuple, list)):
        return all(_within(item, limits) for item in value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True  # the type is coerce's to check
    return (
        ("at_least" not in limits or value >= limits["at_least"])
        and ("above" not in limits or value > limits["above"])
        and ("at_most" not in limits or value <= limits["at_most"])
        and ("below" not in limits or value < limits["below"])
        and value == value  # not NaN
    )


def check_settings(config, who: str) -> None:
    """Refuse a config whose fields hold values outside those they declare (``setting``), naming each such field,
    its value and its range: ``"ppo: gamma=1.5 is out of range (>= 0, <= 1)"``."""
    problems = []
    for field in dataclasses.fields(config):
        limits, value = field_limits(type(config), field.name), getattr(config, field.name)
        if limits and value is not None and not _within(value, limits):
            problems.append(f"{field.name}={value!r} is out of range ({describe_limits(limits)})")
    if problems:
        raise ConfigError(f"{who}: " + "; ".join(problems))


def field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["lr=1e-3", "hidden=[64, 64]"]`` -> ``{"lr": "1e-3", "hidden": [64, 64]}`` (values parsed as YAML)."""
    parsed = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            parsed[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ConfigError(f"cannot parse the value of {key.strip()!r}: {value!r}") from error
    return parsed


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Convert ``value`` to the annotated type: int, float, bool, str, tuples, ``X | None`` and dicts."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], key)
    try:
        if annotation is bool:
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            if isinstance(value, (bool, int)):
                return bool(value)
            raise ValueError
        if annotation is int:
            number = float(value)
            if not number.is_integer() or isinstance(value, bool):
                raise ValueError
            return int(number)
        if annotation is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if annotation is str:
            return str(value)
        if origin is tuple:
            return tuple(coerce(v, args[0], key) for v in (value if isinstance(value, (list, tuple)) else [value]))
        if origin is dict or annotation is dict:
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
    except (TypeError, ValueError):
        name = getattr(annotation, "__name__", str(annotation))
        raise ConfigError(f"setting {key!r} expects {name}, got {value!r}") from None
    return value


def split_overrides(overrides: dict[str, Any], *classes) -> list[dict[str, Any]]:
    """Share ``overrides`` out between the dataclasses ``classes`` by field name; an unknown key is an error that
    suggests close matches."""
    shares = [{} for _ in classes]
    known = [field_types(cls) for cls in classes]
    for key, value in overrides.items():
        for share, types_ in zip(shares, known, strict=True):
            if key in types_:
                share[key] = coerce(value, types_[key], key)
                break
        else:
            names = sorted(set().union(*known))
            close = difflib.get_close_matches(key, names, n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"unknown setting {key!r}.{hint} Settings: {', '.join(names)}")
    return shares


def to_plain(config) -> dict[str, Any]:
    """A dataclass as YAML- and checkpoint-safe plain data (tuples become lists)."""

    def plain(value):
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


def from_plain(cls, data: dict[str, Any]):
    """The dataclass ``cls`` from plain data written by ``to_plain``."""
    (values,) = split_overrides(data, cls)
    return cls(**values)


def read_yaml(path) -> dict[str, Any]:
    """The mapping in the YAML file ``path``, read with ``yaml.safe_load``: plain data only, so a ``!!python`` tag
    is an error here, never an object (a run directory may come from a stranger)."""
    try:
        data = yaml.safe_load(pathlib.Path(path).read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not plain YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a mapping of settings")
    return data
