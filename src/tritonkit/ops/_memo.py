"""The host fast lane's memory: every memo an op keeps between calls, in one place that forgets.

An eager call's host time is mostly spent deciding what to launch (configs, launch plans, checked layouts, recorded
launches); each of those decisions is a pure function of the call's layout and of its op's config names, so the ops
keep them. Every such memo registers here: :func:`clear_caches` empties them all, and :func:`overrides` changes an
op's config names for a block, emptying them on the way in and on the way out, so a patched threshold holds from the
next call and nothing derived from it outlives the block.

A name rebound any other way (``setattr`` on a config module) is not seen until :func:`clear_caches` runs.
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref
from collections.abc import Callable

# the memos' emptying functions: lru_cache's cache_clear, a dict's clear
_CLEARS: list[Callable[[], None]] = []
# objects with a clear() that may die first (a test's own CheckedLayouts)
_OBJECTS: weakref.WeakSet = weakref.WeakSet()


def register(memo):
    """Register ``memo`` (a dict or any object with ``clear()``, held weakly; or a function that empties a memo)
    with :func:`clear_caches`; returns it."""
    if isinstance(memo, dict):
        _CLEARS.append(memo.clear)
    elif callable(getattr(memo, "clear", None)):
        _OBJECTS.add(memo)
    elif callable(memo):
        _CLEARS.append(memo)
    else:
        raise TypeError(f"a memo must have clear() or be a function that empties one, got {type(memo).__name__}")
    return memo


def memoized(maxsize: int | None = 256):
    """``functools.lru_cache(maxsize)`` whose cache :func:`clear_caches` empties."""

    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _CLEARS.append(cached.cache_clear)
        return cached

    return wrap


def clear_caches() -> None:
    """Forget every decision the ops memoized: configs, launch plans, checked layouts and their recorded launches,
    tuned tables read so far, device facts. The next call of each op decides again (and pays for it once)."""
    for clear in _CLEARS:
        clear()
    for memo in list(_OBJECTS):
        memo.clear()


@contextlib.contextmanager
def overrides(module: types.ModuleType, **values):
    """Within the block, ``module``'s names (an op's config constant, or a function such as
    ``paged_attention.config.num_sms``) hold ``values``; every memo is emptied when the block starts and when it
    ends, where the old values come back. A name the module does not have is refused (AttributeError naming it)
    before anything changes. ``with overrides(paged_attention.config, MIN_KEYS_PER_SPLIT=128): ...``"""
    if not isinstance(module, types.ModuleType):
        raise TypeError(f"module must be a module (an op's config), got {type(module).__name__}")
    missing = [name for name in values if not hasattr(module, name)]
    if missing:
        raise AttributeError(f"{module.__name__} has no {', '.join(missing)}: overrides only replaces existing names")
    old = {name: getattr(module, name) for name in values}
    try:
        for name, value in values.items():
            setattr(module, name, value)
        clear_caches()
        yield module
    finally:
        for name, value in old.items():
            setattr(module, name, value)
        clear_caches()
