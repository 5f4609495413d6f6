"""The error tree: every exception pagegate raises on purpose is in pagegate/errors.py,
named in its docstring, and classed the way retries and permits need."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil

import pytest

import pagegate
from pagegate import errors
from pagegate.admission.base import Outcome, outcome_for_exception


def _pagegate_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(pagegate.__path__, "pagegate."):
        if info.name.startswith("pagegate.sim"):
            continue  # the simulator's errors model vLLM's own, inside the stand-in server
        names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _pagegate_modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            private = obj.__name__.startswith("_")  # control flow that never leaves its module
            if issubclass(obj, BaseException) and obj.__module__.startswith("pagegate") and not private:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_pagegate_exception_lives_in_the_documented_tree() -> None:
    classes = _exception_classes()
    assert not issubclass(errors.RunInterrupted, Exception)
    assert errors.MetricsError in classes  # the walk reached the package's errors
    for cls in classes:
        # RunInterrupted alone stands outside: raised from a signal handler, it must
        # pass every `except Exception` on its way out (pagegate.cli.stopping).
        assert issubclass(cls, errors.PagegateError) or cls is errors.RunInterrupted, cls
        assert cls.__module__ == "pagegate.errors", f"{cls} is defined outside pagegate.errors"
        assert f" {cls.__name__} " in f" {errors.__doc__} ".replace("\n", " "), (
            f"{cls.__name__} is missing from the tree in errors.py's docstring"
        )


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (None, Outcome.OK),
        (asyncio.CancelledError(), Outcome.CANCELLED),
        (errors.GateClosedError("closed"), Outcome.CANCELLED),
        (errors.CapacityError("503"), Outcome.CAPACITY),
        (errors.ServerUnavailableError("gone"), Outcome.CAPACITY),
        (errors.ReplyParseError("bad front matter"), Outcome.CONTENT),
        (ValueError("a bug"), Outcome.CONTENT),
    ],
)
def test_outcome_of_a_permit_returned_without_finish(
    exc: BaseException | None, outcome: Outcome
) -> None:
    assert outcome_for_exception(exc) is outcome
