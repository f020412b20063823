"""The hooks' one channel to tune, and the rules that keep it off the script's own files.

tune hands the job the write end of a pipe (TUNE_BRIDGE_FD, identified by
TUNE_BRIDGE_INO). A number is all a process has of it, and the script can close that
number, dup2 a file onto it, or have it reused by the next file or pipe it opens; the
hooks must then never write there again (issue #27: a script's file got tune's step
lines; a DataLoader's pipe got them and the job deadlocked). So:

- The pipe is moved to a number of its own above the ones scripts use, and the one tune
  passed is closed: the script's descriptor table is what it would be without tune, plus
  that one number. Children find it through TUNE_BRIDGE_FD/TUNE_BRIDGE_HOLDER.
- Before every write, fstat says whether that number is still this pipe (FIFO, same inode
  and device); os.close, os.closerange and os.dup2 on it are seen before they happen and
  reported while the pipe is still ours. On any doubt the hooks stop writing, for good,
  and say so on stderr; they never close a number they are not sure is theirs.
- Writes are non-blocking and whole lines of at most PIPE_BUF bytes (atomic, so ranks
  sharing the pipe never interleave). A full pipe (tune not reading) holds a step for at
  most FULL_WAIT_S, then reporting stops: training is never held up indefinitely.
- A forked child (a DataLoader worker) closes its copy and never writes.
"""

import fcntl
import functools
import json
import os
import select
import stat
import sys
import threading
import time

# POSIX: a write of at most PIPE_BUF bytes to a pipe is atomic, all or nothing, even
# non-blocking. Linux's is 4096.
PIPE_BUF = getattr(select, "PIPE_BUF", 512)
# Longest a line may wait for room in a full pipe. tune reads on a thread of its own, so
# a pipe that stays full this long means tune is stopped or gone, not slow.
FULL_WAIT_S = 2.0
# Lowest number the pipe is moved to (fcntl F_DUPFD): above the descriptors scripts open
# or dup2 onto themselves; lower ones are tried where the file limit is below it.
_HIGH = (1000, 256, 64, 10)

_lock = threading.RLock()
_fd = None  # the pipe's number in this process, while the hooks may write to it
_id = None  # (st_dev, st_ino) of the pipe
_pid = None  # the process that opened it; its forks never write
_last_step = 0
_said_stop = False


def _identity(fd):
    """(st_dev, st_ino) of `fd` when it is a FIFO, else None."""
    try:
        st = os.fstat(fd)
    except (OSError, ValueError, TypeError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISFIFO(st.st_mode) else None


def _is_pipe(fd, ino):
    ident = _identity(fd)
    return ident is not None and (ino is None or ident[1] == ino)


def _reopen(holder, fd, ino):
    """The pipe through the holder's /proc entry (a launcher's ranks lack the number)."""
    try:
        # Non-blocking: with tune gone (no reader) the open fails instead of waiting.
        new = os.open("/proc/%s/fd/%d" % (holder, fd), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None
    if not _is_pipe(new, ino):
        os.close(new)
        return None
    return new


def _move_high(fd):
    """`fd` moved to a number of its own (high, inheritable); the old number closed."""
    for low in _HIGH:
        try:
            new = fcntl.fcntl(fd, fcntl.F_DUPFD, low)
            break
        except OSError:
            continue
    else:
        return fd
    os.close(fd)
    return new


def open_pipe():
    """Finds the event pipe (inherited, or reopened through TUNE_BRIDGE_HOLDER), makes it
    this process's own and guarded; False when there is none."""
    global _fd, _id, _pid
    try:
        fd = int(os.environ["TUNE_BRIDGE_FD"])
    except (KeyError, ValueError):
        return False
    try:
        ino = int(os.environ["TUNE_BRIDGE_INO"])
    except (KeyError, ValueError):
        ino = None
    if not _is_pipe(fd, ino):
        holder = os.environ.get("TUNE_BRIDGE_HOLDER")
        if not holder or ino is None:
            return False
        fd = _reopen(holder, fd, ino)
        if fd is None:
            return False
    fd = _move_high(fd)
    os.set_blocking(fd, False)
    # Inheritable, as tune passed it: a process this one execs keeps it; one started with
    # close_fds (torchrun's ranks) reopens it from here.
    os.set_inheritable(fd, True)
    _fd, _id, _pid = fd, _identity(fd), os.getpid()
    os.environ["TUNE_BRIDGE_FD"] = str(fd)
    os.environ["TUNE_BRIDGE_HOLDER"] = str(_pid)
    os.register_at_fork(after_in_child=_forked)
    _guard_os()
    return True


def active():
    return _fd is not None and os.getpid() == _pid


def _ours():
    return _fd is not None and _identity(_fd) == _id


def _say(message):
    try:
        sys.stderr.write("tune: %s\n" % message)
        sys.stderr.flush()
    except Exception:  # a closed stderr is the script's business
        pass


def _stop(why, tell_tune):
    """Stops reporting for good. `tell_tune`: the pipe is still ours, so a last notice
    can reach the report. The number is never closed here: it may be the script's."""
    global _fd, _said_stop
    with _lock:
        if _fd is None:
            return
        message = (
            "reporting stopped after %d measured step%s: %s; later steps are not measured "
            "and the script runs on" % (_last_step, "" if _last_step == 1 else "s", why)
        )
        if tell_tune:
            _write(_line({"ev": "notice", "message": message}))
        _fd = None
        if not _said_stop:
            _said_stop = True
            _say(message)


def _line(obj):
    try:
        data = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
    except (TypeError, ValueError):
        return None
    # Longer lines could be split by a full pipe or interleaved with another rank's.
    return data if len(data) <= PIPE_BUF else None


def _write(data):
    """Writes one line whole; None, or why it could not be written."""
    if data is None:
        return None
    deadline = None
    while True:
        try:
            os.write(_fd, data)
            return None
        except BlockingIOError:
            now = time.monotonic()
            deadline = deadline or now + FULL_WAIT_S
            if now >= deadline:
                return "tune read nothing for %.0f s (its event pipe is full)" % FULL_WAIT_S
            try:
                p = select.poll()
                p.register(_fd, select.POLLOUT)
                p.poll(1000.0 * (deadline - now))
            except (OSError, ValueError):
                time.sleep(0.01)
        except InterruptedError:
            continue
        except OSError:
            return "gone"


def emit(obj):
    """Sends one event line to tune, if this process may and the pipe is still tune's."""
    global _last_step, _fd
    if _fd is None or os.getpid() != _pid:
        return
    with _lock:
        if _fd is None:
            return
        if not _ours():
            _stop(
                "tune's event descriptor was closed or replaced outside Python (by C code)",
                False,
            )
            return
        why = _write(_line(obj))
        if why == "gone":
            _fd = None  # tune went away: keep the script running, stop reporting
        elif why is not None:
            _stop(why, False)
        elif obj.get("ev") == "step":
            _last_step = obj.get("step", _last_step)


def _forked():
    """In a forked child (a DataLoader worker): its copy of the pipe is closed, so a
    worker that outlives the job does not hold tune's stream open, and it never writes."""
    global _fd, _lock
    _lock = threading.RLock()
    fd, _fd = _fd, None
    if fd is not None and _identity(fd) == _id:
        try:
            _os_close(fd)
        except OSError:
            pass


_os_close = os.close


def _guard_os():
    """os.close, os.closerange and os.dup2 on the pipe's number stop the reporting first,
    with a notice that still reaches tune; then they do what the script asked."""
    close, closerange, dup2 = os.close, os.closerange, os.dup2

    def lose(how):
        try:
            if _fd is not None and os.getpid() == _pid and _ours():
                _stop("the script %s tune's event descriptor (%s)" % how, True)
        except Exception:
            pass

    @functools.wraps(close)
    def close_(fd):
        if fd == _fd:
            lose(("closed", "os.close"))
        return close(fd)

    @functools.wraps(closerange)
    def closerange_(fd_low, fd_high):
        try:
            hit = _fd is not None and fd_low <= _fd < fd_high
        except TypeError:
            hit = False
        if hit:
            lose(("closed", "os.closerange"))
        return closerange(fd_low, fd_high)

    @functools.wraps(dup2)
    def dup2_(fd, fd2, inheritable=True):
        if fd2 == _fd and fd != _fd:
            lose(("put another file on", "os.dup2"))
        return dup2(fd, fd2, inheritable)

    os.close, os.closerange, os.dup2 = close_, closerange_, dup2_
