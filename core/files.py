"""Files a user names, read safely and written whole: one home for the checks every reader and writer needs.

A user-given path may be missing, a folder, a FIFO that never ends (`mkfifo`), a device that never
ends (`/dev/zero`), a file of gigabytes, or bytes that are not UTF-8. Each of these is refused with a
one-line `InvalidInputError` that names the file (never its contents) and says what to do:

- the path is opened without blocking (`O_NONBLOCK`: opening a FIFO with no writer would wait forever)
  and checked with `fstat` on the open descriptor (no race with a rename in between): only regular files
  are read;
- the size is checked against `max_bytes` before reading, and reading stops at `max_bytes + 1` bytes, so
  a file that grows while it is read is refused too;
- text is strict UTF-8 (no lone or encoded surrogates), and `check_text` refuses a string holding a lone
  surrogate (what JSON's `"\\ud800"` escape produces), which tokenizers and databases cannot take.

An output (`replacing`, `write_output`) is written to a temporary file beside its target and renamed over
it only when complete, so a failed write leaves nothing half-written. A target that is not a regular
file (a symbolic link, a FIFO, a device) is refused, never replaced or written through, and an existing
file is replaced only when the caller says so (`force`, the CLI's --force).
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from core.errors import InvalidInputError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# The longest prompt (context included) the workbench tokenizes, in characters. A tokenizer holds about
# 130 bytes per character while it works (a 100 MB prompt took 9.7 GB and then aborted); 4 Mi characters
# (about 500 MB there) is still several times the longest context of any model the workbench loads
# (128k tokens at about 4 characters a token), so a prompt this long could never fit a model anyway.
MAX_PROMPT_CHARS = 4 * MiB


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _open(path: str | Path, what: str, max_bytes: int) -> int:
    """A descriptor of the regular file at `path`, at most `max_bytes` long; anything else refused."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InvalidInputError(f"{what} {name}: not found; check the path") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{what} {name} is a folder: pass a file") from None
    except NotADirectoryError:
        raise InvalidInputError(f"{what} {name}: a part of the path is a file, not a folder; check the path") from None
    except PermissionError:
        raise InvalidInputError(f"{what} {name}: permission denied; make it readable or pass another file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        reason = getattr(e, "strerror", None) or type(e).__name__
        raise InvalidInputError(f"{what} {name}: cannot open it ({reason}); pass a readable file") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInputError(f"{what} {name} is a folder: pass a file")
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a FIFO (named pipe)"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket"
                if stat.S_ISSOCK(info.st_mode)
                else "not a regular file"
            )
            raise InvalidInputError(
                f"{what} {name} is {kind}, not a regular file: save the data to a file and pass that"
            )
        if info.st_size > max_bytes:
            raise InvalidInputError(
                f"{what} {name} is {_size(info.st_size)}, more than the {_size(max_bytes)} it may be: "
                f"pass a smaller file (split it, or take fewer items)"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _too_big(what: str, path: str | Path, max_bytes: int) -> InvalidInputError:
    return InvalidInputError(
        f"{what} {os.fspath(path)} grew past {_size(max_bytes)} while it was read: "
        f"pass a file that is not being written"
    )


def read_bytes(path: str | Path, *, what: str, max_bytes: int, gunzip: bool = False) -> bytes:
    """The bytes of the regular file at `path`; refused (InvalidInputError naming `what`) when it is missing,
    a folder, not a regular file, or longer than `max_bytes` (checked before reading, and while reading).
    `gunzip`: a gzip file (by its magic bytes) is decompressed, its content held to `max_bytes` as well."""
    fd = _open(path, what, max_bytes)
    parts, total = [], 0
    try:
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _too_big(what, path, max_bytes)
    except OSError as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)}: cannot read it ({e.strerror or type(e).__name__})"
        ) from None
    finally:
        os.close(fd)
    data = b"".join(parts)
    return _gunzip(data, what, path, max_bytes) if gunzip and data[:2] == b"\x1f\x8b" else data


def _gunzip(data: bytes, what: str, path: str | Path, max_bytes: int) -> bytes:
    """gzip's content, at most `max_bytes` of it (a small file can decompress to gigabytes)."""
    out, rest = [], data
    try:
        while rest:  # a .gz file may hold several members one after the other
            unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out.append(unzip.decompress(rest, max_bytes + 1 - sum(map(len, out))))
            if sum(map(len, out)) > max_bytes or unzip.unconsumed_tail:
                raise InvalidInputError(
                    f"{what} {os.fspath(path)} decompresses to more than {_size(max_bytes)}: pass a smaller file"
                )
            if not unzip.eof:
                raise zlib.error("truncated")
            rest = unzip.unused_data.lstrip(b"\0")
    except zlib.error as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)} is not a readable gzip file ({e}): fetch or write it again"
        ) from None
    return b"".join(out)


def read_head(path: str | Path, size: int, *, what: str) -> bytes:
    """The first `size` bytes of the regular file at `path` (a model's header), however long the file is;
    the same refusals as `read_bytes` for anything that is not a regular file."""
    fd = _open(path, what, max_bytes=1 << 62)
    try:
        return os.read(fd, size)
    except OSError as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)}: cannot read it ({e.strerror or type(e).__name__})"
        ) from None
    finally:
        os.close(fd)


class _Capped(io.RawIOBase):
    """A read-only stream over a descriptor that refuses to go past `max_bytes` (a file growing while read)."""

    def __init__(self, fd: int, what: str, path: str | Path, max_bytes: int):
        self.fd, self.what, self.path, self.max_bytes, self.total = fd, what, path, max_bytes, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = os.read(self.fd, min(len(buffer), self.max_bytes + 1 - self.total))
        self.total += len(data)
        if self.total > self.max_bytes:
            raise _too_big(self.what, self.path, self.max_bytes)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def open_text(path: str | Path, *, what: str, max_bytes: int, newline: str | None = None) -> IO[str]:
    """A UTF-8 text stream of the regular file at `path` for readers that stream (csv.reader), with `read_bytes`'s
    refusals up front and its cap while reading; a byte that is not UTF-8 raises UnicodeDecodeError as it is met."""
    return io.TextIOWrapper(
        io.BufferedReader(_Capped(_open(path, what, max_bytes), what, path, max_bytes)),
        encoding="utf-8",
        errors="strict",
        newline=newline,
    )


def _not_utf8(what: str, path: str | Path, where: str, e: UnicodeDecodeError) -> InvalidInputError:
    return InvalidInputError(f"{what} {os.fspath(path)} is not UTF-8 text ({where}byte {e.start}): save it as UTF-8")


def read_text(path: str | Path, *, what: str, max_bytes: int, gunzip: bool = False) -> str:
    """`read_bytes` decoded as strict UTF-8 (a byte-order mark is dropped); bad bytes are refused with their offset."""
    data = read_bytes(path, what=what, max_bytes=max_bytes, gunzip=gunzip)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _not_utf8(what, path, "", e) from None


def iter_lines(path: str | Path, *, what: str, max_bytes: int, gunzip: bool = False) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without its line ending) per line of a UTF-8 file, read as it goes (a
    JSON Lines file of many rows is never held whole; a gzip file with `gunzip` is); the same refusals as
    `read_text`, a line that is not UTF-8 named by its number. Lines end at "\\n" only (JSON Lines), a
    trailing "\\r" is dropped."""
    if gunzip:
        data = read_bytes(path, what=what, max_bytes=max_bytes, gunzip=True)
        yield from _decoded_lines(iter(io.BytesIO(data)), what, path)
        return
    fd = _open(path, what, max_bytes)
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            total = 0

            def raw_lines() -> Iterator[bytes]:
                nonlocal total
                while raw := fh.readline(max_bytes + 1 - total):
                    total += len(raw)
                    if total > max_bytes:
                        raise _too_big(what, path, max_bytes)
                    yield raw

            yield from _decoded_lines(raw_lines(), what, path)
    except OSError as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)}: cannot read it ({e.strerror or type(e).__name__})"
        ) from None


def _decoded_lines(raw_lines: Iterator[bytes], what: str, path: str | Path) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(raw_lines, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _not_utf8(what, path, f"line {number}, ", e) from None
        yield number, line.removesuffix("\n").removesuffix("\r")


def parse_json(text: str | bytes, *, where: str):
    """`json.loads(text)`, with what can go wrong as one InvalidInputError line naming `where`: not JSON, nested
    too deeply (Python's recursion limit), or an integer too long to read (more than 4,300 digits)."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInputError(f"{where}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise InvalidInputError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise InvalidInputError(f"{where}: not usable JSON ({str(e)[:120]})") from None


def check_text(text: str, *, what: str, max_chars: int | None = None) -> str:
    """`text` when it is valid Unicode (encodable as UTF-8) and at most `max_chars` long. A lone surrogate
    (JSON's "\\ud800", or bytes a file system could not decode) is refused with its position: tokenizers
    and databases cannot take it."""
    if max_chars is not None and len(text) > max_chars:
        raise InvalidInputError(f"{what} has {len(text):,} characters, more than the {max_chars:,} allowed: shorten it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(
            f"{what} holds a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start}, "
            f"which is not valid Unicode text: fix the text (or the file's encoding)"
        ) from None
    return text


# ---- writing ---------------------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_output(path: str | Path, *, what: str, force: bool = False) -> Path:
    """`path` as a place to write a new file: refused (InvalidInputError naming `what`) when it is a folder,
    a symbolic link, a FIFO or a device, lies under a file, or already exists and `force` is not given.
    Its folder need not exist yet. Nothing is created."""
    p = Path(path)
    name = os.fspath(path)
    try:
        info = os.lstat(p)
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        raise InvalidInputError(
            f"{what} {name}: a part of the path is a file, not a folder; pass another path"
        ) from None
    except (OSError, ValueError) as e:
        raise InvalidInputError(
            f"{what} {name}: cannot use it ({getattr(e, 'strerror', None) or type(e).__name__})"
        ) from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInputError(f"{what} {name} is a folder: pass a file name")
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInputError(
                f"{what} {name} is {_kind_of(info.st_mode)}, not a regular file: it is left as it is; pass another path"
            )
        if not force:
            raise InvalidInputError(f"{what} {name} already exists: pass --force to replace it, or another path")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:  # the nearest folder that exists must be a writable folder
        folder = folder.parent
    if not folder.is_dir():
        raise InvalidInputError(f"{what} {name}: {folder} is a file, not a folder; pass another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInputError(f"{what} {name}: the folder {folder} is not writable; pass another path")
    return p


@contextmanager
def replacing(path: str | Path, *, what: str, force: bool = False, binary: bool = False) -> Iterator[IO]:
    """`with replacing(path, what="--out") as fh: fh.write(...)`: written to a temporary file beside `path`,
    renamed over it when the block ends without an exception (checked with `check_output` first and again
    before the rename), deleted otherwise."""
    p = check_output(path, what=what, force=force)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".part", dir=p.parent)
    except OSError as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)}: cannot write there ({e.strerror or type(e).__name__})"
        ) from None
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600, widened to what a plain open would have made
        check_output(p, what=what, force=force)  # nothing else took the name meanwhile
        os.replace(tmp, p)
    except OSError as e:
        raise InvalidInputError(
            f"{what} {os.fspath(path)}: cannot write it ({e.strerror or type(e).__name__}); nothing was written"
        ) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_output(path: str | Path, data: str | bytes, *, what: str, force: bool = False) -> None:
    """`data` written to `path` whole or not at all (see `replacing`)."""
    with replacing(path, what=what, force=force, binary=isinstance(data, bytes)) as fh:
        fh.write(data)
