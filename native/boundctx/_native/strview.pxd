# A read-only view of a Python str's code points that nogil code can index: sections
# (the cut rule) and tokenmap (token offsets) walk text code point by code point with
# the GIL released.
#
# The view borrows the str's own buffer (PEP 393: 1, 2 or 4 bytes per code point, by
# `kind`). It stays valid while the str is alive and never changes, since a str is
# immutable: the caller keeps a reference for the whole call that uses the view.

from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND


cdef extern from "Python.h":
    # A macro over the buffer only: safe without the GIL, like the view itself.
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index) noexcept nogil


cdef struct Text:
    int kind         # PyUnicode_KIND: bytes per code point
    void *data       # PyUnicode_DATA
    Py_ssize_t n     # code points


cdef inline Text text_view(str s) noexcept:
    """The view of ``s``, which must not be None (callers declare ``not None``).
    Cannot fail: it only reads three fields of the str."""
    cdef Text t
    t.kind = PyUnicode_KIND(s)
    t.data = PyUnicode_DATA(s)
    t.n = PyUnicode_GET_LENGTH(s)
    return t


cdef inline Py_UCS4 text_at(const Text *t, Py_ssize_t i) noexcept nogil:
    """Code point ``i`` (0 <= i < t.n: not checked, the callers' loops keep to it)."""
    return PyUnicode_READ(t.kind, t.data, i)
