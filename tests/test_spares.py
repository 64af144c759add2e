"""engram.index.state.spare_arrays: the memory of a patched view's arrays is written again only once nothing
reads it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from engram.index.state import spare_arrays as spares_module
from engram.index.state.spare_arrays import Spares


def test_arrays_have_the_asked_size_and_type_and_can_be_written() -> None:
    spares = Spares()
    for size, dtype in ((0, np.int32), (1, np.float64), (1000, np.int64)):
        array = spares.empty(size, dtype)
        assert array.shape == (size,) and array.dtype == dtype and array.flags.writeable
        array[:] = 7
        assert (array == 7).all()


def test_a_buffer_is_used_again_only_when_no_view_of_its_last_array_is_left() -> None:
    spares = Spares()
    first = spares.empty(1000, np.float64)
    first[:] = 1.0
    tail = first[500:]  # a view: holds the array, and so its buffer
    matrix = sp.csr_matrix((first[:3], np.arange(3, dtype=np.int32), np.arange(4, dtype=np.int32)), shape=(3, 3))
    del first
    second = spares.empty(1000, np.float64)
    assert not np.shares_memory(second, tail) and not np.shares_memory(second, matrix.data)
    second[:] = 2.0
    assert (tail == 1.0).all() and (matrix.data == 1.0).all()
    del tail
    third = spares.empty(1000, np.float64)
    assert not np.shares_memory(third, matrix.data)  # the matrix still holds the first array's memory
    del matrix
    fourth = spares.empty(990, np.float64)  # a little smaller: the first buffer serves it
    assert spares.held()[:2] == (3, 0)  # second, third and fourth in use: the first buffer was taken again
    assert not any(np.shares_memory(fourth, a) for a in (second, third))


def test_buffers_of_another_size_are_not_taken_and_free_ones_are_capped() -> None:
    spares = Spares()
    small = spares.empty(100, np.float64)
    del small
    large = spares.empty(1000, np.float64)  # too large for the free buffer: a new one
    del large
    tiny = spares.empty(10, np.float64)  # far smaller than either free buffer: a new one
    assert spares.held() == (1, 2, (800 + 800 // 64 + 8) + (8000 + 8000 // 64 + 8))
    del tiny
    arrays = [spares.empty(3000 * (i + 1), np.int32) for i in range(spares_module.KEEP_FREE + 5)]
    del arrays
    assert spares.held()[:2] == (0, spares_module.KEEP_FREE + 8)
    last = spares.empty(3000 * (spares_module.KEEP_FREE + 5), np.int32)  # the newest free buffer of its size
    assert spares.held()[:2] == (1, spares_module.KEEP_FREE)
    del last
