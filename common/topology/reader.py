"""The only door through which discovery touches the filesystem.

All paths are relative to the discovery root (the folder that contains `sys/`), written with
forward slashes and no leading slash, e.g. "sys/devices/system/cpu/cpu0/online". Keeping every
access here lets `capture` record exactly what discovery looked at, and keeps warnings naming
paths the way a user sees them in a captured tree.

A root other than "/" is someone else's tree (`topodra inspect --sysfs-root` on a capture), and
its links are theirs: a link to /etc/shadow or ../../../home must not make discovery read, list
or even open anything outside the root (opening a device node can act: a watchdog starts). So
under such a root every path is resolved by the kernel as if the root were "/" (openat2 with
RESOLVE_IN_ROOT: `..` stops at the root, absolute link targets start at the root, which is also
what they mean in a capture) and /proc-style magic links are refused. Where openat2 is missing
(kernels before 5.6, or a seccomp profile that refuses it) the same resolution is done here, one
component at a time with O_NOFOLLOW. On "/" itself, the machine's own sysfs, paths are opened
as they are.

Warnings name paths and quote what files hold; both come from the tree, so neither reaches a
terminal with control characters, and a file is quoted by a short prefix only (`shown`).
"""

from __future__ import annotations

import errno
import os

from topodra.common.topology.model import DiscoveryWarning

TYPE_CHECKING = False  # not typing's: importing typing costs milliseconds on the inspect path
if TYPE_CHECKING:  # and collections.abc's: ~0.2 ms of it
    from collections.abc import Callable
    from typing import Protocol, TypeVar

    _T = TypeVar("_T")

    class Entry(Protocol):
        """What discovery uses of a folder entry (os.DirEntry has it; so do confined entries)."""

        @property
        def name(self) -> str: ...

        def is_dir(self, *, follow_symlinks: bool = True) -> bool: ...

        def is_symlink(self) -> bool: ...


# sysfs attributes are at most a page; a few odd ones (distance rows on big machines) can be longer.
_MAX_READ = 1 << 16
_QUOTE = 16  # characters of a file's content a warning may show
_MAX_MESSAGE = 300  # a warning's message (what the tree's names and links can make long)
_MAX_LINKS = 40  # links followed while resolving one path (the kernel's limit)
_OPEN_DIRS = 64  # folders kept open under a foreign root
_SPECIAL = ("", ".", "..")
_READ_NOFOLLOW = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_RACE_TRIES = 8  # openat2 retries after EAGAIN before the walk does it

# openat2's number: the same on every architecture that uses the generic syscall table
_OPENAT2_MACHINES = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
_O_PATH = getattr(os, "O_PATH", 0)


def _name(entry: Entry) -> str:
    return entry.name


def shown(text: str) -> str:
    """A file's content as a warning may quote it: a short prefix, printable ASCII only."""
    head = "".join(c if c.isascii() and c.isprintable() else "?" for c in text[:_QUOTE])
    more = f"... ({len(text)} characters)" if len(text) > _QUOTE else ""
    return f"'{head}'{more}"


def _printable(text: str, limit: int) -> str:
    out = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return out + ("..." if len(text) > limit else "")


class SysfsReader:
    """Reads small text files, links and listings under a root; optionally remembers them."""

    def __init__(self, root: str | os.PathLike[str], record: bool = False) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._prefix = self.root.rstrip("/") + "/"
        # another tree than the machine's own: every path resolved beneath it (module doc)
        self._in_root: _InRoot | None = _InRoot(self.root) if self.root != "/" else None
        self.warnings: list[DiscoveryWarning] = []
        # parsed CPU masks by text, for this discovery only
        self.memo: dict[str, frozenset[int] | None] = {}
        self._record = record
        # what capture must reproduce: files read (with the bytes seen), links read, folders
        # listed or probed
        self.files: dict[str, bytes] = {}
        self.links: set[str] = set()
        self.listed: set[str] = set()  # folders whose entry names discovery used
        self.dirs: set[str] = set()  # folders whose existence discovery checked

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(DiscoveryWarning(_printable(path, 4096), _printable(message, _MAX_MESSAGE)))

    def abspath(self, rel: str) -> str:
        return self._prefix + rel

    def read(self, rel: str, *, quiet_errors: tuple[int, ...] = ()) -> str | None:
        """Text of a file with trailing NULs and whitespace removed; None when it cannot be read.

        A missing file is not a warning here (many files are optional); any other error is,
        except the errno values in `quiet_errors` (e.g. EINVAL from `speed` of a down link).
        """
        try:
            # O_NONBLOCK: a FIFO planted in a captured tree must not hang discovery
            in_root = self._in_root
            if in_root is None:
                fd = os.open(self._prefix + rel, os.O_RDONLY | os.O_NONBLOCK)
            else:  # in_root.open, its common case inlined: discovery's hot loop
                parent, _, name = rel.rpartition("/")
                dfd = in_root.dirs.get(parent)
                if dfd is None or name in _SPECIAL:
                    fd = in_root.open(rel, os.O_RDONLY | os.O_NONBLOCK)
                else:
                    try:
                        fd = os.open(name, _READ_NOFOLLOW, dir_fd=dfd)
                    except OSError as e:
                        if e.errno != errno.ELOOP:
                            raise
                        fd = in_root.resolve(rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR) and e.errno not in quiet_errors:
                self.warn(rel, f"unreadable: {e.strerror}")
            return None
        try:
            data = os.read(fd, _MAX_READ)
        except OSError as e:
            if e.errno not in quiet_errors:
                self.warn(rel, f"unreadable: {e.strerror}")
            return None
        finally:
            os.close(fd)
        if self._record:
            self.files[rel] = data
        # Some kernels pad values with NULs after the newline: padding, not content. A NUL inside
        # the text stays, so parsers reject it as garbage.
        return data.decode("utf-8", "replace").rstrip("\x00 \t\r\n")

    def readlink(self, rel: str) -> str | None:
        try:
            in_root = self._in_root
            target = os.readlink(self._prefix + rel) if in_root is None else in_root.readlink(rel)
        except OSError:
            return None
        if self._record:
            self.links.add(rel)
        return target

    def resolve_link(self, rel: str) -> str | None:
        """Where a link points, as a clean root-relative path (trailing slashes dropped).

        Absolute targets are taken relative to the root: a captured tree has no other meaning for
        them. Targets escaping the root give None.
        """
        target = self.readlink(rel)
        if target is None:
            return None
        joined = target.lstrip("/") if target.startswith("/") else os.path.dirname(rel) + "/" + target
        clean = os.path.normpath(joined)
        if clean.startswith("..") or clean.startswith("/") or clean == ".":
            return None
        return clean

    def scandir(self, rel: str) -> list[Entry]:
        """Entries of a folder by name (empty when it is absent); a listing counts as reading it.

        Sorted, so reads and warnings come in the same order on the machine and in its capture.
        """

        def listing() -> list[Entry]:
            if self._in_root is None:
                with os.scandir(self._prefix + rel) as it:
                    return sorted(it, key=_name)
            return sorted(self._in_root.scandir(rel, self.is_dir), key=_name)

        return self._listed(rel, listing)

    def listdir(self, rel: str) -> list[str]:
        return [e.name for e in self.scandir(rel)]

    def names(self, rel: str) -> list[str]:
        """The entry names of a folder, sorted, without their kinds: cheaper than `scandir` where
        only names matter (a network interface's links, on machines with hundreds of them)."""

        def listing() -> list[str]:
            if self._in_root is None:
                return sorted(os.listdir(self._prefix + rel))
            dfd = self._in_root.open(rel, os.O_RDONLY | os.O_DIRECTORY)
            try:
                return sorted(os.listdir(dfd))
            finally:
                os.close(dfd)

        return self._listed(rel, listing)

    def _listed(self, rel: str, listing: Callable[[], list[_T]]) -> list[_T]:
        """`listing()`, recorded as a listing of `rel`; empty when the folder is absent (other
        errors are warnings)."""
        try:
            found = listing()
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                self.warn(rel, f"unlistable: {e.strerror}")
            return []
        if self._record:
            self.listed.add(rel)
        return found

    def is_dir(self, rel: str) -> bool:
        if self._in_root is None:
            ok = os.path.isdir(self._prefix + rel)
        else:
            try:
                os.close(self._in_root.open(rel, _O_PATH | os.O_DIRECTORY))
                ok = True
            except OSError:
                ok = False
        if ok and self._record:
            self.dirs.add(rel)
        return ok


def is_dir(entry: Entry, *, follow: bool = True) -> bool:
    """DirEntry.is_dir without its OSError (a racing or unreadable entry is simply not a folder)."""
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


def is_link(entry: Entry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return False


class _Confined:
    """An entry of a folder under a foreign root: its kind as listed (never following a link
    by itself), and a link's target kind through the reader, beneath the root."""

    __slots__ = ("_is_dir", "_link", "_rel", "_resolve", "name")

    def __init__(self, name: str, rel: str, link: bool, is_dir: bool, resolve: Callable[[str], bool]) -> None:
        self.name = name
        self._rel = rel
        self._link = link
        self._is_dir = is_dir
        self._resolve = resolve

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        if self._link:
            return follow_symlinks and self._resolve(self._rel)
        return self._is_dir

    def is_symlink(self) -> bool:
        return self._link


class _InRoot:
    """Opens paths beneath one folder, as if it were "/" (module doc).

    A path is opened one name at a time from its folder, never following a link (O_NOFOLLOW):
    that alone cannot leave the root. Folders stay open, a few dozen at a time, so a read costs
    one openat of one name and a new folder one more. Only a name that is a link is resolved
    (openat2 RESOLVE_IN_ROOT, else the walk), and `..` too, so ctypes is not even imported for a
    tree whose reads meet no link.
    """

    def __init__(self, root: str) -> None:
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dirs: dict[str, int] = {}  # folder -> an O_PATH descriptor of it, beneath the root
        self._openat2: Callable[[int, str, int], int] | None = None
        self._probed = False

    def __del__(self) -> None:
        # the descriptors go with the reader (not weakref.finalize: importing weakref is most of
        # a millisecond of `topodra inspect`, and nothing here forms a cycle)
        fd = getattr(self, "fd", None)  # absent when opening the root failed
        if fd is not None:
            _close_all(fd, self.dirs)

    def resolve(self, rel: str, flags: int) -> int:
        if not self._probed:
            self._openat2 = _openat2(self.fd)
            self._probed = True
        if self._openat2 is not None:
            for _ in range(_RACE_TRIES):
                try:
                    return self._openat2(self.fd, rel or ".", flags | os.O_CLOEXEC)
                except BlockingIOError:
                    # EAGAIN: a rename or mount anywhere on the machine while the kernel walked a
                    # `..` (a link's target), so it could not prove the walk stayed in the root;
                    # it asks for a retry. Seen as "unreadable" warnings (a NIC's uverbs node)
                    # while other processes renamed files.
                    continue
            # still racing: the walk resolves the same way, by hand, needing no such proof
        return self._walk(rel, flags | os.O_CLOEXEC)

    def _dir(self, rel: str) -> int:
        fd = self.dirs.get(rel)
        if fd is not None:
            return fd
        if not rel:
            return self.fd
        parent, _, name = rel.rpartition("/")
        flags = _O_PATH | os.O_DIRECTORY
        if name in (".", ".."):
            fd = self.resolve(rel, flags)
        else:
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir(parent))
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                fd = self.resolve(rel, flags)  # a link: resolved beneath the root
        if len(self.dirs) >= _OPEN_DIRS:  # before adding: the one returned stays open
            _close_dirs(self.dirs)
        self.dirs[rel] = fd
        return fd

    def open(self, rel: str, flags: int) -> int:
        parent, _, name = rel.rpartition("/")
        if name in _SPECIAL:
            return self.resolve(rel, flags)
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir(parent))
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        return self.resolve(rel, flags)  # a link (or not a folder): resolved beneath the root

    def readlink(self, rel: str) -> str:
        parent, _, name = rel.rpartition("/")
        if name in ("", ".", ".."):
            raise OSError(errno.EINVAL, "not a link", rel)
        return os.readlink(name, dir_fd=self._dir(parent))

    def scandir(self, rel: str, resolve: Callable[[str], bool]) -> list[_Confined]:
        dfd = self.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            out = []
            with os.scandir(dfd) as it:  # kinds are read while the folder is open
                for e in it:
                    link = e.is_symlink()
                    kind = not link and e.is_dir(follow_symlinks=False)
                    out.append(_Confined(e.name, f"{rel}/{e.name}" if rel else e.name, link, kind, resolve))
            return out
        finally:
            os.close(dfd)

    def _walk(self, rel: str, flags: int) -> int:
        """openat2(RESOLVE_IN_ROOT) done by hand: one component at a time, never following a link
        the kernel would follow by itself; `..` stops at the root, absolute targets start there."""
        todo = [p for p in rel.split("/") if p and p != "."]
        stack = [os.dup(self.fd)]
        links = 0
        try:
            while todo:
                name = todo.pop(0)
                if name == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                last = not todo
                try:
                    fd = os.open(
                        name,
                        (flags if last else _O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=stack[-1],
                    )
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    try:
                        target = os.readlink(name, dir_fd=stack[-1])
                    except OSError:
                        raise e from None
                    links += 1
                    if links > _MAX_LINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel) from None
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                    todo[:0] = [p for p in target.split("/") if p and p != "."]
                    continue
                if last:
                    return fd
                stack.append(fd)
            # the path named the root itself (or ended in ..)
            return os.open(".", flags | os.O_CLOEXEC, dir_fd=stack[-1])
        finally:
            for fd in stack:
                os.close(fd)


def _close_dirs(dirs: dict[str, int]) -> None:
    for fd in dirs.values():
        os.close(fd)
    dirs.clear()


def _close_all(root_fd: int, dirs: dict[str, int]) -> None:
    _close_dirs(dirs)
    os.close(root_fd)


def _openat2(root_fd: int) -> Callable[[int, str, int], int] | None:
    """openat2(dirfd, path, flags) resolving in the root, or None where the kernel has none."""
    number = _OPENAT2_MACHINES.get(os.uname().machine)
    if number is None:
        return None
    import ctypes  # only for foreign roots: a few ms of import that discovery of "/" does not pay

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    hows: dict[int, tuple[object, int]] = {}
    size = ctypes.c_long(ctypes.sizeof(OpenHow))
    call = ctypes.c_long(number)

    def openat2(dirfd: int, path: str, flags: int) -> int:
        got = hows.get(flags)
        if got is None:
            how = OpenHow(flags, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
            got = hows[flags] = (how, ctypes.addressof(how))
        fd = int(syscall(call, ctypes.c_long(dirfd), os.fsencode(path), ctypes.c_void_p(got[1]), size))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return fd

    try:
        os.close(openat2(root_fd, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError as e:
        if e.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
            return None  # no openat2 here: the walk does the same
        raise
    return openat2
