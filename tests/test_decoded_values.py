"""The cache of whole tensors a capture decoded lately (tracer.captures._stream.DecodedValues)."""

from __future__ import annotations

import numpy as np

from tracer.captures._stream import DecodedValues


def _bytes(n: int) -> np.ndarray:
    return np.zeros(n, np.uint8)


def test_the_oldest_go_first_until_the_new_tensor_fits_and_the_bytes_are_counted_as_they_go() -> None:
    cache = DecodedValues(100)
    for name in "abcd":
        cache.make_room(25, set())
        cache.put(name, _bytes(25))
    assert cache.nbytes == 100
    assert cache.get("a") is not None  # now the most recently used: b goes first
    cache.make_room(40, set())
    assert ("b" in cache, "c" in cache, "d" in cache, "a" in cache) == (False, False, True, True)
    assert cache.nbytes == 50
    cache.put("d", _bytes(10))  # replaced: its old bytes are no longer counted
    assert cache.nbytes == 35


def test_a_new_tensors_inputs_stay_where_they_are_while_they_fit() -> None:
    cache = DecodedValues(100)
    for name in "abcd":
        cache.put(name, _bytes(25))
    cache.make_room(50, {"a"})  # a is read by the tensor decoded next: b and c go, a stays the oldest
    assert [n for n in "abcd" if n in cache] == ["a", "d"] and cache.nbytes == 50
    cache.make_room(75, set())
    assert [n for n in "abcd" if n in cache] == ["d"]
    big = DecodedValues(100)
    big.put("x", _bytes(70))
    big.put("y", _bytes(40))
    big.make_room(50, {"x", "y"})  # inputs over the limit in all are read again chunk by chunk: not kept
    assert "x" not in big and "y" in big and big.nbytes == 40


def test_nothing_goes_when_the_new_tensor_fits_and_clear_forgets_everything() -> None:
    cache = DecodedValues(100)
    cache.put("a", _bytes(30))
    cache.make_room(70, set())
    assert "a" in cache
    cache.clear()
    assert "a" not in cache and cache.nbytes == 0 and cache.get("a") is None
