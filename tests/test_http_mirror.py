"""helpers.http_mirror against real HTTP servers on 127.0.0.1: the course's own, and one that misbehaves on purpose."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import data
from helpers.http_mirror import MirrorDownloadError, download, fetch, main, make_server, url_for

CONTENT = bytes(range(256)) * 400 + b"the end"  # 102,407 bytes
MD5 = hashlib.md5(CONTENT).hexdigest()
PACKED = gzip.compress(CONTENT, mtime=0)


def _no_wait(seconds):
    pass


def _files(folder: Path) -> list[str]:
    """Every file under folder, hidden temporaries included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def course_server(tmp_path):
    """The course's own server (make serve-mirror), serving tmp_path/served on a free port."""
    served = tmp_path / "served"
    (served / "sub dir").mkdir(parents=True)
    (served / "sub dir" / "blob.bin").write_bytes(CONTENT)
    (served / "blob.bin.gz").write_bytes(PACKED)
    server = make_server(served, "127.0.0.1", 0, quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _Faulty(http.server.BaseHTTPRequestHandler):
    """Serves CONTENT (or PACKED for a name ending in .gz) at /<mode>/<name>, misbehaving as <mode> says."""

    def log_message(self, *args):
        pass

    def _partial(self, body, start, part):
        """A 206 that says it holds ``part``, from byte ``start`` of ``body``."""
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)

    def do_GET(self):  # noqa: N802 (the base class's name)
        mode, _, name = self.path.strip("/").partition("/")
        body = PACKED if name.endswith(".gz") else CONTENT
        server = self.server
        with server.lock:
            server.requests.append((mode, self.headers.get("Range")))
            seen = sum(1 for m, _ in server.requests if m == mode)
        start = 0
        if self.headers.get("Range") and mode in ("drop", "flaky", "short206", "wrongstart"):
            start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
        if mode == "missing":
            self.send_error(404)
            return
        if mode == "flaky" and seen == 1:
            self.send_error(503, "busy")
            return
        if mode == "hang":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            server.stop.wait(10)
            return
        if mode == "truncated":
            body = body[: len(body) // 2]
        if mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
        if mode == "wrongstart" and seen == 2:  # a 206 for another range than the one asked for
            self._partial(body, 0, body)
            return
        if mode == "short206" and seen == 2:  # a complete-looking 206 that holds only part of the range
            self._partial(body, start, body[start:start + 1000])
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if mode in ("drop", "drop-norange", "short206", "wrongstart") and seen == 1:  # half the file, then the connection goes
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])


@pytest.fixture
def faulty_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Faulty)
    server.daemon_threads = True
    server.requests, server.lock, server.stop = [], threading.Lock(), threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.base = f"http://127.0.0.1:{server.server_address[1]}/"
    yield server
    server.stop.set()
    server.shutdown()
    server.server_close()


def test_the_course_server_answers_ranges(course_server):
    url = url_for(course_server, "sub dir/blob.bin")
    assert "%20" in url
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=100-"})) as answer:
        assert answer.status == 206 and answer.read() == CONTENT[100:]
        assert answer.headers["Content-Range"] == f"bytes 100-{len(CONTENT) - 1}/{len(CONTENT)}"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=10-19"})) as answer:
        assert answer.read() == CONTENT[10:20]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={len(CONTENT)}-"}))
    assert err.value.code == 416
    with urllib.request.urlopen(url) as answer:
        assert answer.status == 200 and answer.read() == CONTENT and answer.headers["Accept-Ranges"] == "bytes"


def test_fetch_decompresses_checks_and_leaves_only_the_file(course_server, tmp_path):
    dest = tmp_path / "data" / "blob.bin"
    fetch(url_for(course_server, "blob.bin.gz"), dest, MD5, gunzip=True)
    assert dest.read_bytes() == CONTENT
    assert _files(tmp_path / "data") == ["blob.bin"], "a temporary file was left behind"


def test_a_dropped_connection_resumes_from_where_it_stopped(faulty_server, tmp_path):
    dest = tmp_path / "blob.bin"
    fetch(faulty_server.base + "drop/blob.bin", dest, MD5, sleep=_no_wait)
    assert dest.read_bytes() == CONTENT
    assert faulty_server.requests == [("drop", None), ("drop", f"bytes={len(CONTENT) // 2}-")]


def test_a_wrong_or_short_partial_answer_is_not_taken_for_the_rest(faulty_server, tmp_path):
    half = len(CONTENT) // 2
    fetch(faulty_server.base + "wrongstart/blob.bin", tmp_path / "a.bin", MD5, sleep=_no_wait)
    assert (tmp_path / "a.bin").read_bytes() == CONTENT
    assert [r for _, r in faulty_server.requests] == [None, f"bytes={half}-", None]  # then from byte 0
    faulty_server.requests.clear()
    fetch(faulty_server.base + "short206/blob.bin", tmp_path / "b.bin", MD5, sleep=_no_wait)
    assert (tmp_path / "b.bin").read_bytes() == CONTENT
    assert [r for _, r in faulty_server.requests] == [None, f"bytes={half}-", f"bytes={half + 1000}-"]


def test_download_overwrites_an_existing_file_even_after_a_failed_attempt(faulty_server, tmp_path):
    old = tmp_path / "blob.bin"
    old.write_bytes(b"stale content from an earlier run")
    download(faulty_server.base + "flaky/blob.bin", old, sleep=_no_wait)  # 503 first: nothing written yet
    assert old.read_bytes() == CONTENT, "the retry resumed onto the old file's bytes"


def test_a_server_without_ranges_is_read_again_from_the_start(faulty_server, tmp_path):
    dest = tmp_path / "blob.bin"
    fetch(faulty_server.base + "drop-norange/blob.bin", dest, MD5, sleep=_no_wait)
    assert dest.read_bytes() == CONTENT and len(faulty_server.requests) == 2


def test_a_busy_server_is_retried_after_a_backoff(faulty_server, tmp_path):
    waits = []
    fetch(faulty_server.base + "flaky/blob.bin", tmp_path / "blob.bin", MD5, sleep=waits.append, backoff=0.25)
    assert waits == [0.25] and (tmp_path / "blob.bin").read_bytes() == CONTENT


@pytest.mark.parametrize(
    "mode, name, gunzip, says",
    [
        ("truncated", "blob.bin.gz", True, "not a complete gzip file"),
        ("truncated", "blob.bin", False, "md5"),
        ("corrupt", "blob.bin", False, "md5"),
        ("missing", "blob.bin", False, "HTTP 404 (no such file on the mirror)"),
    ],
)
def test_a_bad_file_is_one_clear_error_and_leaves_the_folder_unchanged(faulty_server, tmp_path, mode, name, gunzip, says):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "other.txt").write_text("kept")
    url = faulty_server.base + f"{mode}/{name}"
    waits = []
    with pytest.raises(MirrorDownloadError) as err:
        fetch(url, folder / "blob.bin", MD5, name="MNIST/raw/blob.bin", gunzip=gunzip, sleep=waits.append)
    message = str(err.value)
    assert message.startswith(f"MNIST/raw/blob.bin: {url}: ") and says in message, message
    assert _files(folder) == ["other.txt"], "a partial or corrupt file was left in the data folder"
    assert waits == [], "a permanent failure must not be retried"


def test_a_hanging_server_times_out_and_gives_up(faulty_server, tmp_path):
    waits = []
    with pytest.raises(MirrorDownloadError, match=r"timed out\); gave up after 2 attempts") as err:
        fetch(faulty_server.base + "hang/blob.bin", tmp_path / "blob.bin", MD5, timeout=0.3, retries=1, sleep=waits.append)
    assert err.value.name == "blob.bin" and len(waits) == 1 and _files(tmp_path) == []


def test_no_server_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MirrorDownloadError, match="cannot connect .*gave up after 3 attempts") as err:
        download(f"http://127.0.0.1:{port}/x", tmp_path / "x", retries=2, sleep=_no_wait)
    assert err.value.unreachable and err.value.name == "x"
    with pytest.raises(ValueError, match="not an http"):
        download("ftp://example.org/x", tmp_path / "x")


def test_thirty_clients_fetch_the_same_file_at_once(course_server, tmp_path):
    def client(i):
        dest = tmp_path / f"learner{i}" / "blob.bin"
        fetch(url_for(course_server, "blob.bin.gz"), dest, MD5, gunzip=True, sleep=_no_wait)
        return hashlib.md5(dest.read_bytes()).hexdigest()

    with ThreadPoolExecutor(max_workers=30) as pool:
        digests = list(pool.map(client, range(30)))
    assert digests == [MD5] * 30


@pytest.fixture
def tiny_dataset(monkeypatch, tmp_path):
    """A registry entry shaped like MNIST's (a .gz name on the mirror) and one plain file, with data/ in tmp_path."""
    spec = data.DatasetSpec(
        name="tiny-test",
        description="two test files",
        files=(
            data.FileSpec(path="Tiny/raw/blob.bin", md5=MD5, mirror="Tiny/raw/blob.bin.gz"),
            data.FileSpec(path="Tiny/notes.txt", md5=hashlib.md5(b"notes\n").hexdigest(), mirror="Tiny/notes.txt"),
        ),
    )
    monkeypatch.setitem(data.REGISTRY, "tiny-test", spec)
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    return spec


def _serve(folder, monkeypatch):
    server = make_server(folder, "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("COURSE_DATA_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    return server


@pytest.mark.parametrize("layout", ["mirror", "data folder"])
def test_ensure_fetches_from_an_http_mirror_in_either_layout(tiny_dataset, tmp_path, monkeypatch, layout):
    served = tmp_path / "served" / "Tiny"
    (served / "raw").mkdir(parents=True)
    (served / "notes.txt").write_bytes(b"notes\n")
    if layout == "mirror":
        (served / "raw" / "blob.bin.gz").write_bytes(PACKED)
    else:  # a teacher serving their own data/: the files already decompressed
        (served / "raw" / "blob.bin").write_bytes(CONTENT)
    server = _serve(served.parent, monkeypatch)
    try:
        assert data.status("tiny-test") == "mirror"
        root = data.ensure("tiny-test")
    finally:
        server.shutdown()
        server.server_close()
    assert (root / "Tiny/raw/blob.bin").read_bytes() == CONTENT and (root / "Tiny/notes.txt").read_bytes() == b"notes\n"
    assert _files(root) == ["Tiny/notes.txt", "Tiny/raw/blob.bin"]


def test_ensure_names_the_file_the_url_and_the_fault(tiny_dataset, tmp_path, monkeypatch):
    served = tmp_path / "served" / "Tiny"
    (served / "raw").mkdir(parents=True)
    (served / "notes.txt").write_bytes(b"notes\n")
    (served / "raw" / "blob.bin.gz").write_bytes(PACKED[: len(PACKED) // 2])  # a truncated copy on the server
    server = _serve(served.parent, monkeypatch)
    try:
        with pytest.raises(data.DataUnavailableError) as err:
            data.ensure("tiny-test")
    finally:
        server.shutdown()
        server.server_close()
    message = str(err.value)
    assert f"HTTP mirror: Tiny/raw/blob.bin: {os.environ['COURSE_DATA_MIRROR']}/Tiny/raw/blob.bin.gz: not a complete gzip" in message
    root = tmp_path / "data"
    assert _files(root) == ["Tiny/notes.txt"], "only the good file may be in data/"


def test_an_unreachable_mirror_is_tried_for_one_file_only(tiny_dataset, tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("COURSE_DATA_MIRROR", f"http://127.0.0.1:{port}/")
    monkeypatch.setattr("helpers.http_mirror.BACKOFF_S", 0.0)
    with pytest.raises(data.DataUnavailableError) as err:
        data.ensure("tiny-test")
    message = str(err.value)
    assert "cannot connect" in message and "1 more file(s) not tried" in message and "make serve-mirror" in message


def test_serve_refuses_a_missing_folder(tmp_path, capsys):
    assert main(["serve", "--dir", str(tmp_path / "nope"), "--port", "0"]) == 1
    assert "is not a folder" in capsys.readouterr().err
