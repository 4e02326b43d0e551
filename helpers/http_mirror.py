"""The data mirror over HTTP, for a classroom: fetching from one, and serving one.

On bad Wi-Fi, 30 laptops downloading MNIST from the internet at once is the
slowest part of a workshop. Instead one machine serves the course's data on
the LAN (``make serve-mirror``) and every learner sets::

    export COURSE_DATA_MIRROR=http://192.168.1.20:8765/

:func:`helpers.data.ensure` then fetches each missing file from that URL
with :func:`fetch`. The URL is laid out like the folder mirror
(``../shared/datasets``: ``MNIST/raw/train-images-idx3-ubyte.gz``, ...), or
like a filled ``data/`` folder (the same files, already decompressed);
``ensure`` asks for the mirror's name first and the ``data/`` name after a
404.

A download:

- streams into a temporary file beside the target, with a socket timeout
  (:data:`TIMEOUT_S` seconds without data ends an attempt);
- retries after a dropped connection, a timeout, a 5xx, 408 or 429 answer, waiting
  :data:`BACKOFF_S`, then twice as long each time (:data:`RETRIES` retries);
- resumes where it stopped when the server honours ``Range`` requests (an
  answer of 206), and starts again from byte 0 when it does not (200);
- decompresses a ``.gz`` name, checks the md5 of the result, and only then
  renames it over the target (:func:`helpers.paths.atomic_write`).

Anything else fails at once with a :class:`MirrorDownloadError` that names
the file, the URL and what happened; the data folder is left as it was: no
partial, truncated or corrupt file remains in it.

Serving uses only the standard library: :class:`RangeRequestHandler` is
``http.server.SimpleHTTPRequestHandler`` plus single-range ``Range``
support (RFC 9110, section 14), so a learner's interrupted download resumes.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import http.server
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path

from .paths import ROOT, _is_url, atomic_write

__all__ = [
    "BACKOFF_S",
    "DEFAULT_PORT",
    "RETRIES",
    "TIMEOUT_S",
    "MirrorDownloadError",
    "RangeRequestHandler",
    "download",
    "fetch",
    "is_url",
    "lan_address",
    "make_server",
    "url_for",
]

DEFAULT_PORT = 8765
"""The port ``make serve-mirror`` listens on unless ``PORT=`` says otherwise."""
TIMEOUT_S = 30.0
"""Seconds without a byte from the server before an attempt is given up (``socket`` timeout)."""
RETRIES = 4
"""Further attempts after the first fails for a reason that may pass (a dropped connection, a timeout, a 5xx)."""
BACKOFF_S = 0.5
"""The wait before the first retry; each later wait doubles (0.5, 1, 2, 4 s: 7.5 s in all)."""

_CHUNK = 1 << 16
#: Answers worth asking again (besides every 5xx): timeout, too many requests.
_TRANSIENT = {408, 429}
#: Names for the answers that will not change if asked again (every other 4xx fails at once too).
_PERMANENT = {400: "bad request", 401: "authentication required", 403: "forbidden", 404: "no such file on the mirror",
              405: "method not allowed", 410: "gone"}


class MirrorDownloadError(RuntimeError):
    """A file could not be fetched from an HTTP mirror.

    Attributes:
        name: the file, as the course names it (e.g. ``MNIST/raw/t10k-labels-idx1-ubyte``).
        url: the address that was asked.
        what: what happened, in words.
        status: the HTTP status of the last answer, or ``None`` (no answer: a
            refused connection, a timeout, a dropped connection, bad content).
        unreachable: True when no attempt reached the server at all (refused,
            no route, no answer in time): the other files will fare no better.
    """

    def __init__(self, name: str, url: str, what: str, status: int | None = None, *, unreachable: bool = False):
        self.name, self.url, self.what, self.status, self.unreachable = name, url, what, status, unreachable
        super().__init__(f"{name}: {url}: {what}")


class _Retry(Exception):
    """One attempt failed for a reason that may pass; ``offset`` bytes are on disk.

    ``unreachable``: no connection could be made at all (refused, no route, no answer).
    """

    def __init__(self, what: str, offset: int, status: int | None = None, *, unreachable: bool = False):
        super().__init__(what)
        self.what, self.offset, self.status, self.unreachable = what, offset, status, unreachable


def is_url(value: str) -> bool:
    """True for an ``http://`` or ``https://`` address (how ``$COURSE_DATA_MIRROR`` names an HTTP mirror)."""
    return _is_url(value.strip())


def url_for(base_url: str, relpath: str) -> str:
    """The address of ``relpath`` (a ``/``-separated path) under ``base_url``, each part percent-encoded."""
    return base_url.rstrip("/") + "/" + "/".join(urllib.parse.quote(part) for part in relpath.split("/"))


def _attempt(url: str, path: Path, offset: int, timeout: float) -> int:
    """One GET of ``url`` appended to ``path`` (which holds ``offset`` bytes already); returns the new size.

    Raises :class:`_Retry` (with the bytes now on disk) for what may pass and
    :class:`MirrorDownloadError` for what will not.
    """
    headers = {"User-Agent": "pytorch-course-data", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    done = offset  # bytes of the file on disk: what a retry resumes from
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            total = None
            if offset and answer.status == 200:  # the server ignored Range: start again from byte 0
                offset = 0
            elif offset:
                m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", answer.headers.get("Content-Range", "").strip())
                if answer.status != 206 or not m or int(m[1]) != offset:
                    raise _Retry(f"the server answered a resume request with {answer.status} "
                                 f"{answer.headers.get('Content-Range', '(no Content-Range)')}: starting again", 0)
                total = int(m[3]) if m[3] != "*" else int(m[2]) + 1
            length = answer.headers.get("Content-Length")
            if total is None and length and length.isdigit():
                total = offset + int(length)
            with open(path, "r+b" if offset else "wb") as out:
                done = offset
                out.seek(offset)
                out.truncate()
                while chunk := answer.read(_CHUNK):
                    out.write(chunk)
                    done += len(chunk)
            if total is not None and done < total:
                raise _Retry(f"the connection closed after {done:,} of {total:,} bytes", done)
            return done
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and offset:  # our partial copy is not a prefix the server recognises
            raise _Retry("the server refused to resume (416): starting again", 0, 416) from err
        if err.code in _TRANSIENT or err.code >= 500:
            raise _Retry(f"HTTP {err.code} {err.reason}", done, err.code) from err
        what = _PERMANENT.get(err.code, err.reason)
        raise MirrorDownloadError("", url, f"HTTP {err.code} ({what})", err.code) from err
    except http.client.IncompleteRead as err:
        raise _Retry(f"the connection closed early ({err})", done) from err
    except TimeoutError as err:
        raise _Retry(f"no data for {timeout:g} s (timed out)", done) from err
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            raise _Retry(f"no answer within {timeout:g} s (timed out)", done, unreachable=True) from err
        raise _Retry(f"cannot connect ({err.reason})", done, unreachable=True) from err
    except (OSError, http.client.HTTPException) as err:  # a reset, a network gone mid-file, TLS errors
        raise _Retry(f"the connection broke ({type(err).__name__}: {err})", done) from err


def download(
    url: str,
    path: Path | str,
    *,
    name: str | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    sleep: Callable[[float], None] | None = None,
) -> int:
    """Stream ``url`` into ``path`` (created or overwritten), resuming and retrying as the module says.

    Args:
        url: an ``http://`` or ``https://`` address.
        path: the file to write; it holds a prefix of the content after a
            failure, so callers write to a temporary file (as :func:`fetch` does).
        name: the file's name for error messages (default: the URL's last part).
        timeout: seconds without data before an attempt is given up
            (default :data:`TIMEOUT_S`).
        retries: further attempts after a failure that may pass, >= 0
            (default :data:`RETRIES`).
        backoff: seconds before the first retry; each later wait doubles
            (default :data:`BACKOFF_S`).
        sleep: the waiting function (default ``time.sleep``; tests pass a fake one).

    Returns:
        The number of bytes written.

    Raises:
        MirrorDownloadError: a permanent answer (404, 403, ...), or every
            attempt failed; the message names the file, the URL, the last
            failure and the number of attempts.
        ValueError: ``url`` is not http(s), or ``retries`` < 0.
    """
    timeout = TIMEOUT_S if timeout is None else timeout
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF_S if backoff is None else backoff
    sleep = time.sleep if sleep is None else sleep
    if not is_url(url):
        raise ValueError(f"not an http:// or https:// address: {url!r}")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    name = name or urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
    path = Path(path)
    offset = 0
    for attempt in range(retries + 1):
        try:
            return _attempt(url, path, offset, timeout)
        except MirrorDownloadError as err:
            raise MirrorDownloadError(name, url, err.what, err.status) from err
        except _Retry as err:
            offset, last = err.offset, err
            if attempt < retries:
                sleep(backoff * 2**attempt)
    tries = f"{retries + 1} attempt{'s' if retries else ''}"
    raise MirrorDownloadError(name, url, f"{last.what}; gave up after {tries}", last.status, unreachable=last.unreachable)


def fetch(
    url: str,
    dest: Path | str,
    md5: str,
    *,
    name: str | None = None,
    gunzip: bool = False,
    **download_options,
) -> None:
    """Fetch ``url`` into ``dest``: download, decompress if ``gunzip``, check ``md5``, rename atomically.

    Args:
        url: the file's address on the mirror.
        dest: where the checked file goes (its folder is created).
        md5: hex md5 of the final (decompressed) file.
        name: the file's name in messages (default: ``dest``'s name).
        gunzip: the server sends gzip; ``dest`` gets the decompressed bytes.
        download_options: ``timeout``, ``retries``, ``backoff``, ``sleep``
            for :func:`download`.

    Raises:
        MirrorDownloadError: the download failed, the gzip stream is broken
            (a truncated or corrupt copy on the server), or the md5 is wrong.
            ``dest`` is then untouched, and no temporary file remains.
    """
    from .data import md5sum  # helpers.data imports this module lazily too

    dest = Path(dest)
    name = name or dest.name

    def fill(tmp: Path) -> None:
        if not gunzip:
            download(url, tmp, name=name, **download_options)
            return
        packed = tmp.with_name(tmp.name + ".gz")
        try:
            download(url, packed, name=name, **download_options)
            try:
                with gzip.open(packed, "rb") as fin, open(tmp, "wb") as fout:
                    shutil.copyfileobj(fin, fout, length=1 << 20)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise MirrorDownloadError(name, url, f"not a complete gzip file ({exc}): the server's copy "
                                          "is truncated or corrupt; replace it on the serving machine") from exc
        finally:
            packed.unlink(missing_ok=True)

    def verify(tmp: Path) -> None:
        got = md5sum(tmp)
        if got != md5:
            raise MirrorDownloadError(name, url, f"md5 {got}, expected {md5}: the server's copy is corrupt or "
                                      "truncated; replace it on the serving machine (nothing was written here)")

    atomic_write(dest, fill, verify)


# --------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------


class _Slice:
    """A file object that reads at most ``length`` bytes from ``fh``'s current position."""

    def __init__(self, fh, length: int):
        self.fh, self.left = fh, length

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        block = self.fh.read(n) if n else b""
        self.left -= len(block)
        return block

    def close(self) -> None:
        self.fh.close()


class RangeRequestHandler(http.server.SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` that honours one ``Range: bytes=a-b`` (or ``a-``) per request.

    Answers 206 with ``Content-Range`` for a satisfiable range, 416 for a
    start beyond the end, and the usual 200 for anything else. Every answer
    says ``Accept-Ranges: bytes``. Request lines are logged unless the server
    has ``quiet = True``.
    """

    def end_headers(self) -> None:
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_head(self):
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "").strip())
        path = self.translate_path(self.path)
        if match is None or not os.path.isfile(path):
            return super().send_head()
        try:
            fh = open(path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(fh.fileno()).st_size
        start = int(match[1])
        end = min(int(match[2]), size - 1) if match[2] else size - 1
        if start >= size or end < start:
            fh.close()
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        fh.seek(start)
        return _Slice(fh, end - start + 1)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        if not getattr(self.server, "quiet", False):
            super().log_message(format, *args)


def make_server(folder: Path | str, host: str = "0.0.0.0", port: int = DEFAULT_PORT, *,
                quiet: bool = False) -> http.server.ThreadingHTTPServer:
    """A threading HTTP server for ``folder`` (one thread per client); call ``serve_forever()`` on it.

    ``port=0`` picks a free port (read it from ``server.server_address[1]``).

    Raises:
        FileNotFoundError: ``folder`` is not a directory.
        OSError: the port is taken (choose another with ``PORT=``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"nothing to serve: {folder} is not a folder (run `make data` first, or give DIR=)")

    class Handler(RangeRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.quiet = quiet
    return server


def lan_address() -> str:
    """This machine's address on its LAN, as the learners' machines would reach it ("127.0.0.1" if none).

    Found by opening a UDP socket towards a private address, which sends
    nothing and only asks the OS which interface it would use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _default_folder() -> Path:
    """The folder mirror if ``$COURSE_DATA_MIRROR`` names one, else ``data/``."""
    from .paths import data_dir, mirror_dir

    mirror = mirror_dir()
    return mirror if mirror is not None and mirror.is_dir() else data_dir()


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.http_mirror serve [--dir DIR] [--port N]`` (what ``make serve-mirror`` runs)."""
    parser = argparse.ArgumentParser(prog="python -m helpers.http_mirror", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a data folder or mirror folder on the LAN")
    serve.add_argument("--dir", type=Path, default=None, help="folder to serve (default: the folder mirror, else data/)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--bind", default="0.0.0.0", help="address to listen on (default: every interface)")
    args = parser.parse_args(argv)
    folder = (args.dir if args.dir is not None else _default_folder()).resolve()
    try:
        server = make_server(folder, args.bind, args.port)
    except (FileNotFoundError, OSError) as err:
        print(f"cannot serve: {err}", file=sys.stderr)
        return 1
    host = lan_address() if args.bind in ("0.0.0.0", "") else args.bind
    port = server.server_address[1]
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    print(f"serving {shown} on port {port}. On each learner's machine:\n"
          f"    export COURSE_DATA_MIRROR=http://{host}:{port}/\n"
          "then `make data` (or just open a notebook). Ctrl-C stops the server.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
