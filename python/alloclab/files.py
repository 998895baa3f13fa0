"""The files alloclab reads and writes, judged before they are touched.

Every command and object that takes a path goes through here, so that the
rules hold everywhere:

- an input must be a regular file (a symlink is followed and its target
  judged); a directory, a named pipe, a device or a socket is refused at
  once, without opening it (an open of a FIFO with no writer would block, a
  read of /dev/zero would never end);
- an output is never renamed over something that is not a regular file: a
  regular file (or a new one) is written through a temporary file beside it
  and renamed over it once complete, so a failed write leaves the old one; a
  character device (/dev/null, a terminal) is written in place; a named pipe
  is written in place when it has a reader and refused when it has none; a
  directory, a socket or a block device is refused before anything runs;
- an output that names one of this process's own descriptors (/dev/stdout,
  /dev/stderr, /dev/fd/N, /proc/self/fd/N, or a symlink to one) is written
  through that descriptor, where its offset stands, never renamed over the
  file behind it: `--json /dev/stdout >> log` appends to the log after what
  the command printed, as a shell user expects.

Errors are InvalidArgument (a path that cannot be used) naming the path and
what it is; ``what`` names the file in the caller's words ("--json file",
"trace", "result file").
"""

import errno
import fcntl
import os
import re
import stat
import sys

from . import errors

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))

REPLACE = "replace"
"""An output written to a temporary file and renamed over the path."""
IN_PLACE = "in place"
"""An output written into the path as it is (a character device, a pipe)."""


_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"^/proc/(\d+)(?:/task/\d+)?/fd/(\d+)$")


def descriptor(path):
    """The descriptor of this process that ``path`` names (/dev/stdout,
    /dev/fd/N, /proc/self/fd/N, directly or through symlinks), or None."""
    p = os.path.abspath(os.fspath(path))
    for _ in range(40):  # the kernel's own limit on links followed
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        if p in _STD_NAMES:
            return _STD_NAMES[p]
        m = _FD_PATH.match(p)
        if m:
            return int(m.group(2)) if int(m.group(1)) == os.getpid() else None
        try:
            p = os.path.join(os.path.dirname(p), os.readlink(p))
        except OSError:
            return None
    return None


def _check_descriptor(fd, what, path):
    """InvalidArgument unless this process's descriptor fd is open for writing."""
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise _refuse(what, path, "it names descriptor %d of this process, which is not "
                      "open" % fd) from None
    if mode not in (os.O_WRONLY, os.O_RDWR):
        raise _refuse(what, path, "it names descriptor %d of this process, which is not "
                      "open for writing" % fd)


def _write_descriptor(fd, parts):
    """Write parts through descriptor fd, after what Python's own streams
    hold, at the descriptor's offset."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    for p in parts:
        view = memoryview(p)
        while view:
            view = view[os.write(fd, view):]


def kind(mode):
    """What a file of st_mode ``mode`` is, in words ("a named pipe")."""
    return next((k for test, k in _KINDS if test(mode)), "not a file")


def _refuse(what, path, why):
    return errors.InvalidArgument("%s %s: %s" % (what, _shown(path), why), value=path, why=why)


def _refuse_read(what, path, why):
    return errors.InvalidArgument("cannot read %s %s: %s" % (what, _shown(path), why),
                                  value=path)


def _shown(path):
    """The path as the messages show it: quoted when empty or odd."""
    return repr(path) if not path or path != path.strip() or "\n" in path else path


def check_input(path, what="input file"):
    """The os.stat_result of ``path``, or InvalidArgument when it is empty,
    missing, not a regular file, or unreadable. Nothing is opened."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise errors.ParameterTypeError("%s must be a path, not %s" % (what, type(path).__name__),
                                        value=path)
    path = os.fspath(path)
    if path in ("", b""):
        raise _refuse_read(what, path, "the name is empty")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        why = ("a symlink whose target does not exist" if os.path.islink(path)
               else "no such file")
        raise _refuse_read(what, path, why) from None
    except OSError as e:
        raise _refuse_read(what, path, e.strerror or str(e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse_read(what, path, "it is %s, not a regular file" % kind(st.st_mode))
    if not os.access(path, os.R_OK):
        raise _refuse_read(what, path, os.strerror(errno.EACCES))
    return st


def open_input(path, what="input file", mode="rb", encoding=None):
    """``path`` opened for reading after check_input, with O_NONBLOCK so that
    a file swapped for a FIFO between the check and the open cannot block,
    and checked again on the open descriptor."""
    check_input(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _refuse_read(what, path, e.strerror or str(e)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refuse_read(what, path, "it is %s, not a regular file" % kind(st.st_mode))
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode, encoding=encoding)


def read_bytes(path, what="input file", limit=None):
    """The bytes of a regular file; with ``limit``, a larger file is refused
    by its size before anything is read (a huge sparse file)."""
    with open_input(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if limit is not None and size > limit:
            raise _refuse_read(what, path, "it is %d bytes, more than the %d this reads"
                          % (size, limit))
        return f.read() if limit is None else f.read(limit + 1)


def _first_non_dir(path):
    """The first component of ``path`` (a parent, or the path itself when
    a "/" follows it) that exists and is not a directory."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        p = os.sep.join(parts[:i])
        if os.path.exists(p) and not os.path.isdir(p):
            return p
    return os.path.dirname(os.path.abspath(path))


def _names_directory(path):
    """Why ``path`` names a directory by its spelling (a trailing "/", a
    last component "." or ".."), or None. Such a path is never written as
    a file: "out/" would otherwise create a file named "out". An existing
    directory is left to check_output, which names it as one."""
    text = os.fsdecode(path)
    if os.path.isdir(text):
        return None
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        why = "it ends in %r, so it names a directory; give a file name" % os.sep
    elif os.path.basename(text) in (".", ".."):
        why = "it ends in %r, so it names a directory; give a file name" % (
            os.path.basename(text))
    else:
        return None
    base = text.rstrip(os.sep + (os.altsep or ""))
    if base and os.path.lexists(base) and not os.path.isdir(base):
        st = os.lstat(base)
        why += " (%s is %s)" % (base, "a symlink" if stat.S_ISLNK(st.st_mode) else
                                kind(st.st_mode))
    return why


def check_output(path, what="output file"):
    """How ``path`` will be written (REPLACE or IN_PLACE), or InvalidArgument
    saying why it cannot be. Checked without changing a byte: a new file is
    created and removed again, an existing one opened for appending."""
    if not isinstance(path, (str, os.PathLike)):
        raise errors.ParameterTypeError("%s must be a path, not %s" % (what, type(path).__name__),
                                        value=path)
    path = os.fspath(path)
    if path == "":
        raise _refuse(what, path, "the name is empty")
    why = _names_directory(path)
    if why:
        raise _refuse(what, path, why)
    fd = descriptor(path)
    if fd is not None:
        _check_descriptor(fd, what, path)
        return IN_PLACE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:  # a parent on the way is a file
        raise _refuse(what, path, "%s is not a directory" % _first_non_dir(path)) from None
    except OSError as e:
        raise _refuse(what, path, e.strerror or str(e)) from None
    if st is None:
        target = os.path.realpath(path)  # a dangling symlink's target is what gets made
        d = os.path.dirname(target) or "."
        if not os.path.isdir(d):
            raise _refuse(what, path, "directory %s does not exist" % d)
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
            os.unlink(target)
        except OSError as e:
            raise errors.InvalidArgument("%s %s cannot be written: %s" % (
                what, _shown(path), e.strerror or str(e)), value=path) from None
        return REPLACE
    m = st.st_mode
    if stat.S_ISREG(m) or stat.S_ISCHR(m) or stat.S_ISFIFO(m):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError as e:
            why = ("it is a named pipe with no reader" if e.errno == errno.ENXIO
                   else e.strerror or str(e))
            raise _refuse(what, path, why) from None
        if stat.S_ISREG(m):
            d = os.path.dirname(os.path.realpath(path)) or "."
            if not os.access(d, os.W_OK | os.X_OK):
                raise _refuse(what, path, "its directory %s cannot be written, so the file "
                              "cannot be replaced whole" % d)
            return REPLACE
        return IN_PLACE
    raise _refuse(what, path, "it is %s; give a file name" % kind(m))


def write_parts(path, parts, what="output file"):
    """Write the byte strings ``parts`` to ``path`` as check_output says:
    through a temporary file renamed over a regular file (or a new one),
    in place into a character device or a pipe with a reader. OSError from
    the write itself (a full disk) propagates; the old file is then kept."""
    how = check_output(path, what)
    fd = descriptor(path) if how == IN_PLACE else None
    if fd is not None:
        _write_descriptor(fd, parts)
        return
    if how == IN_PLACE:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as f:
            for p in parts:
                f.write(p)
        return
    _replace(path, parts, what)


def _replace(path, parts, what):
    """Write parts to a temporary file beside ``path``'s target and rename
    it over the target. The replacement keeps an existing file's permission
    bits (a read-only 0444 file stays 0444, as writing into it would keep
    them); a new file gets 0666 less the umask, as open() gives it."""
    target = os.path.realpath(path)  # a symlink stays a symlink; its target is replaced
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    tmp = os.path.join(os.path.dirname(target), ".%s.%d.%s.tmp" % (
        os.path.basename(target), os.getpid(), os.urandom(4).hex()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None and stat.S_ISREG(old.st_mode):
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode) & 0o777)
            for p in parts:
                f.write(p)
        # Between the check and here the path may have become something else.
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _refuse(what, path, "it became %s while it was written; left as it is"
                          % kind(st.st_mode))
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text(path, text, what="output file"):
    """write_parts for one str, as UTF-8."""
    write_parts(path, [text.encode("utf-8")], what)
