"""Exceptions: one per kind of Go error (internal/errs), each also a
subclass of the built-in exception of the same meaning, so that
``except FileNotFoundError`` works as well as ``except shoal.NotFound``."""


class ShoalError(Exception):
    """An error from Shoal. ``kind`` is the Go error's kind (not_found,
    corrupt, permission, exists, invalid, no_space, unavailable, canceled,
    error); ``info`` the details libshoal sent."""

    kind = "error"

    def __init__(self, message, info=None):
        super().__init__(message)
        self.info = info or {}


class NotFound(ShoalError, FileNotFoundError):
    """No such job, step, shard or tensor."""
    kind = "not_found"


class CorruptError(ShoalError):
    """Bytes that do not match the manifest. ``shard``, ``tensor``,
    ``want`` and ``got`` (digests) say where."""
    kind = "corrupt"

    @property
    def shard(self):
        return self.info.get("shard", "")

    @property
    def tensor(self):
        return self.info.get("tensor", "")

    @property
    def want(self):
        return self.info.get("want", "")

    @property
    def got(self):
        return self.info.get("got", "")


class PermissionDenied(ShoalError, PermissionError):
    """The cluster refused the caller (certificate, mode bits)."""
    kind = "permission"


class Exists(ShoalError, FileExistsError):
    """The step is already committed."""
    kind = "exists"


class InvalidArgument(ShoalError, ValueError):
    """A bad argument: a name, a dtype, a shape, a buffer."""
    kind = "invalid"


class NoSpace(ShoalError, OSError):
    kind = "no_space"


class Unavailable(ShoalError, ConnectionError):
    """Too few servers reachable."""
    kind = "unavailable"


class Canceled(ShoalError):
    kind = "canceled"


_KINDS = {c.kind: c for c in (NotFound, CorruptError, PermissionDenied, Exists,
                              InvalidArgument, NoSpace, Unavailable, Canceled)}


def from_json(info):
    """The exception for libshoal's error object."""
    cls = _KINDS.get(info.get("kind"), ShoalError)
    return cls(info.get("message", "unknown error"), info)
