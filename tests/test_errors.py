"""The error tree drawn in arenad/errors.py is complete and true."""

from __future__ import annotations

import importlib
import pkgutil
import re

import arenad
from arenad import errors
from arenad.errors import ArenadError


def _all_modules() -> None:
    for info in pkgutil.walk_packages(arenad.__path__, "arenad."):
        importlib.import_module(info.name)


def _subclasses(cls: type[BaseException]) -> set[type[BaseException]]:
    out: set[type[BaseException]] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def _drawn() -> dict[str, str]:
    """class name -> its parent's name, read off the docstring's tree."""
    assert errors.__doc__ is not None
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^(\s*)(?:[│ ]*[├└]── )?(\w+)(?:\s|$)", line)
        if m is None or not line.startswith("    ") or not m.group(2)[0].isupper():
            continue
        depth = (len(line) - len(line.lstrip(" │├└─"))) // 4
        name = m.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def test_every_arenad_error_is_drawn_under_its_parent() -> None:
    _all_modules()
    drawn = _drawn()
    for cls in _subclasses(ArenadError):
        if cls.__module__.startswith("tests."):
            continue
        parent = next(b for b in cls.__mro__[1:] if issubclass(b, ArenadError))
        assert drawn.get(cls.__name__) == parent.__name__, (cls, drawn.get(cls.__name__))


def test_nothing_is_drawn_that_does_not_exist() -> None:
    _all_modules()
    names = {cls.__name__ for cls in _subclasses(ArenadError)}
    assert set(_drawn()) <= names
