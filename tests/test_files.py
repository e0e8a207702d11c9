"""core.files: the one safe reader of user-given files. Every refusal is one InvalidInputError line
naming the file, and nothing that never ends (a FIFO, /dev/zero) is read."""

from __future__ import annotations

import os
import threading
import time

import pytest

from core.errors import InvalidInputError
from core.files import check_text, iter_lines, read_bytes, read_text

READERS = {"read_bytes": read_bytes, "read_text": read_text, "iter_lines": lambda *a, **k: list(iter_lines(*a, **k))}


def refused(reader, path, max_bytes=1 << 20, match=None):
    with pytest.raises(InvalidInputError, match=match) as e:
        READERS[reader](path, what="--data", max_bytes=max_bytes)
    message = str(e.value)
    assert "\n" not in message and message.startswith("--data ")
    return message


@pytest.mark.parametrize("reader", sorted(READERS))
def test_missing_folder_and_path_through_a_file(reader, tmp_path):
    refused(reader, tmp_path / "absent.jsonl", match="not found")
    refused(reader, tmp_path, match="is a folder")
    (tmp_path / "f").write_text("x")
    refused(reader, tmp_path / "f" / "inside", match="is a file, not a folder")


@pytest.mark.parametrize("reader", sorted(READERS))
def test_devices_and_fifos_are_refused_without_reading(reader, tmp_path):
    start = time.monotonic()
    refused(reader, "/dev/zero", match="is a device, not a regular file")
    refused(reader, "/dev/null", match="is a device")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    refused(reader, fifo, match="is a FIFO")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_size_cap_is_checked_before_reading(reader, tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"a\n" * 600)
    message = refused(reader, big, max_bytes=1000, match="more than the 1000 bytes it may be")
    assert "1.17 KiB" in message
    assert READERS[reader](big, what="--data", max_bytes=1200)


def test_reading_stops_at_the_cap_when_the_file_grows(tmp_path, monkeypatch):
    """A file that passed the size check but grows while it is read is cut off at the cap, not read whole."""
    growing = tmp_path / "growing"
    growing.write_bytes(b"x\n" * 10)
    real_fstat = os.fstat

    def stale_fstat(fd):  # the size as it was when checked; then the file grows
        info = real_fstat(fd)
        with open(growing, "ab") as fh:
            fh.write(b"y\n" * 5000)
        return info

    monkeypatch.setattr(os, "fstat", stale_fstat)
    for reader in READERS:
        growing.write_bytes(b"x\n" * 10)
        refused(reader, growing, max_bytes=1000, match="grew past 1000 bytes")


@pytest.mark.parametrize("reader", ["read_text", "iter_lines"])
def test_bad_utf8_and_encoded_surrogates(reader, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    message = refused(reader, bad, match="is not UTF-8 text")
    assert "\xff" not in message
    if reader == "iter_lines":
        assert "line 2, byte 7" in message
    bad.write_bytes(b'"\xed\xa0\x80"\n')  # U+D800 encoded as if it were a character (CESU-8)
    refused(reader, bad, match="is not UTF-8")


def test_lines_bom_and_line_endings(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbffirst\r\nsecond \xe2\x80\xa8 same line\n\nlast")
    assert list(iter_lines(path, what="f", max_bytes=100)) == [
        (1, "first"),
        (2, "second \u2028 same line"),
        (3, ""),
        (4, "last"),
    ]
    assert read_text(path, what="f", max_bytes=100).startswith("first\r\n")


def test_a_fifo_with_a_writer_is_still_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    stop = threading.Event()

    def write():  # a writer that would feed the reader forever
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            while not stop.is_set():
                try:
                    os.write(fd, b"x" * 4096)
                except BlockingIOError:
                    time.sleep(0.01)
                except BrokenPipeError:
                    return
        finally:
            os.close(fd)

    reader_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer open
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        refused("read_bytes", fifo, match="is a FIFO")
    finally:
        stop.set()
        os.close(reader_fd)
        thread.join(timeout=5)


def test_check_text_refuses_lone_surrogates_with_their_position():
    assert check_text("fine ✓", what="input") == "fine ✓"
    with pytest.raises(InvalidInputError, match=r"input holds a lone surrogate \(U\+D800\) at character 3"):
        check_text("abc\ud800def", what="input")


def test_open_text_streams_with_the_same_refusals(tmp_path):
    from core.files import open_text

    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with open_text(path, what="runs.csv", max_bytes=100, newline="") as fh:
        assert fh.read() == "a,b\n1,2\n"
    refused("read_text", "/dev/zero")  # the same checks up front...
    with pytest.raises(InvalidInputError, match="is a device"):
        open_text("/dev/zero", what="--data", max_bytes=100)
    path.write_bytes(b"x" * 50)
    with pytest.raises(InvalidInputError, match="more than the 40 bytes"):
        open_text(path, what="--data", max_bytes=40)


def test_gzip_content_is_capped_too(tmp_path):
    import gzip

    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(b"0" * 100_000))  # about 100 bytes on disk
    assert len(read_bytes(path, what="--data", max_bytes=200_000, gunzip=True)) == 100_000
    with pytest.raises(InvalidInputError, match="decompresses to more than"):
        read_bytes(path, what="--data", max_bytes=50_000, gunzip=True)
    assert [line for _, line in iter_lines(path, what="f", max_bytes=200_000, gunzip=True)] == ["0" * 100_000]
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(b"abc")[:-4])
    with pytest.raises(InvalidInputError, match="not a readable gzip file"):
        read_bytes(cut, what="--data", max_bytes=1000, gunzip=True)
