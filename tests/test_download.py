"""svbop.download: resumable, verified downloads against a local HTTP server (no network)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pytest

from svbop.download import ChecksumError, ContentError, DownloadError, fetch, file_digest, sniff, verify

DATA = bytes(range(256)) * 40 + b"the end\n"  # 10 248 bytes
SHA256 = hashlib.sha256(DATA).hexdigest()
MD5 = hashlib.md5(DATA).hexdigest()
BAD = b"X" + DATA[1:]  # same length, different content
BAD_SHA256 = hashlib.sha256(BAD).hexdigest()
WHERE = "datasets.toy.files.data.bin"

# short backoff, small chunks (several reads per transfer), no progress bar
get = functools.partial(fetch, backoff=0.01, timeout=5.0, chunk_size=1024, progress=False, where=WHERE)


@dataclass
class Route:
    """What the test server does for one path."""

    body: bytes
    ranges: bool = True  # honour Range requests (206); False: always answer 200 with everything
    truncate: int = 0  # number of responses still to cut off after half their bytes
    errors: list[int] = field(default_factory=list)  # statuses to answer first, one per request
    status: int | None = None  # always answer this error status
    stall: float = 0.0  # on the first response: send half the body, then go silent this many seconds
    content_type: str = "application/octet-stream"
    trickle: float = 0.0  # send one byte every this many seconds (a slow-loris server)
    redirect: str | None = None  # answer 302 to this path
    length: bool = True  # send Content-Length (False: the body's end is the connection's end)


class ServerState:
    def __init__(self, port: int):
        self.port = port
        self.routes: dict[str, Route] = {}
        self.requests: list[dict] = []

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> list[dict]:
        return [r for r in self.requests if r["path"] == path]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format, *args):  # keep the test output quiet
        pass

    def do_GET(self):
        state: ServerState = self.server.state
        state.requests.append(
            {"path": self.path, "range": self.headers.get("Range"), "user_agent": self.headers.get("User-Agent")}
        )
        route = state.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        if route.status is not None:
            self.send_error(route.status)
            return
        if route.errors:
            self.send_error(route.errors.pop(0))
            return
        if route.redirect is not None:
            self.send_response(302)
            self.send_header("Location", route.redirect)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, start = route.body, 0
        requested = self.headers.get("Range")
        if requested and route.ranges:
            start = int(re.fullmatch(r"bytes=(\d+)-", requested).group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        payload = body[start:]
        self.send_header("Content-Type", route.content_type)
        if route.length:
            self.send_header("Content-Length", str(len(payload)))
        else:
            self.close_connection = True
        self.end_headers()
        if route.trickle:
            try:
                for i in range(len(payload)):
                    self.wfile.write(payload[i:i + 1])
                    self.wfile.flush()
                    time.sleep(route.trickle)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if route.stall:
            stall, route.stall = route.stall, 0.0  # only the first response stalls
            self.wfile.write(payload[: len(payload) // 2])
            time.sleep(stall)  # the client's read times out meanwhile
            self.close_connection = True
            return
        if route.truncate:
            route.truncate -= 1
            self.wfile.write(payload[: len(payload) // 2])  # announced len(payload), then hang up
            self.close_connection = True
            return
        self.wfile.write(payload)


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.state = ServerState(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd.state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def leftovers(dest):
    return sorted(p.name for p in dest.parent.iterdir() if p.name != dest.name)


# ------------------------------------------------------------------------------------------
# downloads over HTTP
# ------------------------------------------------------------------------------------------


def test_good_file_with_sha256(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "sub" / "data.bin"  # parent folder is created
    assert get(dest, url=server.url("/data.bin"), sha256=SHA256.upper()) == dest
    assert dest.read_bytes() == DATA
    assert leftovers(dest) == []  # no .part, no sidecar when the digest is configured
    [hit] = server.requests
    assert hit["range"] is None and hit["user_agent"] == "svbop-downloader"


def test_md5_verification(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    get(dest, url=server.url("/data.bin"), md5=MD5)
    assert dest.read_bytes() == DATA

    server.routes["/bad.bin"] = Route(BAD)
    bad = tmp_path / "bad.bin"
    with pytest.raises(ChecksumError, match=f"md5 expected {MD5}, actual {hashlib.md5(BAD).hexdigest()}"):
        get(bad, url=server.url("/bad.bin"), md5=MD5)
    assert not bad.exists()


def test_corrupt_download_is_moved_aside_and_rerun_succeeds(server, tmp_path):
    server.routes["/data.bin"] = Route(BAD)
    dest = tmp_path / "data.bin"
    with pytest.raises(ChecksumError) as info:
        get(dest, url=server.url("/data.bin"), sha256=SHA256)
    message = str(info.value)
    corrupt = tmp_path / "data.bin.corrupt"
    assert SHA256 in message and BAD_SHA256 in message and "sha256" in message
    assert str(corrupt) in message and WHERE in message
    assert not dest.exists() and not (tmp_path / "data.bin.part").exists()
    assert corrupt.read_bytes() == BAD

    server.routes["/data.bin"] = Route(DATA)  # the server is fixed
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert dest.read_bytes() == DATA
    assert server.hits("/data.bin")[-1]["range"] is None  # the bad bytes were not resumed


def test_truncated_transfer_is_resumed_with_range(server, tmp_path, caplog):
    server.routes["/data.bin"] = Route(DATA, truncate=1)
    dest = tmp_path / "data.bin"
    with caplog.at_level(logging.INFO, logger="svbop.download"):
        get(dest, url=server.url("/data.bin"), sha256=SHA256, retries=2)
    assert dest.read_bytes() == DATA and not (tmp_path / "data.bin.part").exists()
    first, second = server.hits("/data.bin")
    assert first["range"] is None
    assert second["range"] == f"bytes={len(DATA) // 2}-"
    assert "transfer ended early" in caplog.text and "retry 1 of 2" in caplog.text
    assert f"sha256 {SHA256}" in caplog.text


def test_read_timeout_is_retried_and_resumed(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA, stall=0.5)
    dest = tmp_path / "data.bin"
    get(dest, url=server.url("/data.bin"), sha256=SHA256, timeout=0.2)
    assert dest.read_bytes() == DATA
    first, second = server.hits("/data.bin")
    assert first["range"] is None
    # resumed from what reached the .part before the timeout (whole chunks of the half sent)
    offset = int(re.fullmatch(r"bytes=(\d+)-", second["range"]).group(1))
    assert 0 < offset <= len(DATA) // 2


def test_server_without_range_support_starts_over(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA, ranges=False)
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(b"garbage from an earlier run")  # would break an append
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert dest.read_bytes() == DATA
    [hit] = server.hits("/data.bin")
    assert hit["range"] == "bytes=27-"  # it asked to resume, got 200, truncated the .part


def test_truncation_without_range_support_retries_from_start(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA, ranges=False, truncate=1)
    dest = tmp_path / "data.bin"
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert dest.read_bytes() == DATA
    assert [h["range"] for h in server.hits("/data.bin")] == [None, f"bytes={len(DATA) // 2}-"]


def test_404_is_not_retried_and_names_url_and_dest(server, tmp_path):
    dest = tmp_path / "data.bin"
    url = server.url("/gone.bin")
    with pytest.raises(DownloadError) as info:
        get(dest, url=url, sha256=SHA256, retries=3)
    message = str(info.value)
    assert url in message and "404" in message and str(dest) in message
    assert "path:" in message and WHERE in message and "\n" not in message  # one line
    assert len(server.requests) == 1
    assert not dest.exists()


def test_mirrors_first_404_then_good(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    get(dest, urls=[server.url("/missing.bin"), server.url("/data.bin")], sha256=SHA256)
    assert dest.read_bytes() == DATA
    assert [r["path"] for r in server.requests] == ["/missing.bin", "/data.bin"]


def test_server_errors_are_retried(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA, errors=[503, 429])
    dest = tmp_path / "data.bin"
    get(dest, url=server.url("/data.bin"), sha256=SHA256, retries=2)
    assert dest.read_bytes() == DATA
    assert len(server.requests) == 3


def test_gives_up_after_retries_and_keeps_the_part(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA, truncate=100)
    dest = tmp_path / "data.bin"
    url = server.url("/data.bin")
    with pytest.raises(DownloadError) as info:
        get(dest, url=url, sha256=SHA256, retries=2)
    assert url in str(info.value) and "ended early" in str(info.value)
    assert len(server.requests) == 3  # 1 + 2 retries, each resuming further
    assert [h["range"] is not None for h in server.requests] == [False, True, True]
    assert not dest.exists()
    part = tmp_path / "data.bin.part"
    assert DATA.startswith(part.read_bytes())

    server.routes["/data.bin"].truncate = 0  # a later run finishes the job from the .part
    get(dest, url=url, sha256=SHA256)
    assert dest.read_bytes() == DATA and not part.exists()
    assert server.requests[-1]["range"] == f"bytes={len(DATA) - len(DATA) // 8}-"


def test_existing_part_is_resumed(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    half = len(DATA) // 2
    (tmp_path / "data.bin.part").write_bytes(DATA[:half])
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert dest.read_bytes() == DATA
    [hit] = server.requests
    assert hit["range"] == f"bytes={half}-"


def test_complete_part_answered_416_counts_as_complete(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(DATA)
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert dest.read_bytes() == DATA
    assert [h["range"] for h in server.requests] == [f"bytes={len(DATA)}-"]


def test_existing_dest_is_verified_not_downloaded(server, tmp_path):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    dest.write_bytes(DATA)
    get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert server.requests == []
    dest.write_bytes(BAD)
    with pytest.raises(ChecksumError, match=BAD_SHA256):
        get(dest, url=server.url("/data.bin"), sha256=SHA256)
    assert not dest.exists() and (tmp_path / "data.bin.corrupt").read_bytes() == BAD


# ------------------------------------------------------------------------------------------
# recorded checksums (sidecar)
# ------------------------------------------------------------------------------------------


def test_no_checksum_records_sidecar_and_warns(server, tmp_path, caplog):
    server.routes["/data.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    with caplog.at_level(logging.WARNING, logger="svbop.download"):
        get(dest, url=server.url("/data.bin"))
    sidecar = tmp_path / "data.bin.sha256"
    assert sidecar.read_text() == f"{SHA256}  data.bin\n# source: url {server.url('/data.bin')}\n"
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"sha256: {SHA256}" in record.getMessage() and WHERE in record.getMessage()

    assert verify(dest) == SHA256  # checked against the sidecar
    dest.write_bytes(BAD)  # tampered
    with pytest.raises(ChecksumError) as info:
        verify(dest, where=WHERE)
    assert SHA256 in str(info.value) and BAD_SHA256 in str(info.value) and str(sidecar) in str(info.value)
    assert not dest.exists() and (tmp_path / "data.bin.corrupt").read_bytes() == BAD

    # a re-download is checked against the recorded digest too
    server.routes["/data.bin"] = Route(BAD)
    with pytest.raises(ChecksumError, match=BAD_SHA256):
        get(dest, url=server.url("/data.bin"))
    assert not dest.exists()


def test_recorded_checksum_is_keyed_to_the_source_not_only_the_name(server, tmp_path, caplog):
    """A digest recorded for one `path:` (or URL) says nothing about another: changing the source
    records the new file's digest (with a warning) instead of refusing it as corrupt."""
    old, new = tmp_path / "old.bin", tmp_path / "new.bin"
    old.write_bytes(DATA)
    new.write_bytes(BAD)
    dest = tmp_path / "raw" / "data.bin"
    get(dest, path=old)
    sidecar = tmp_path / "raw" / "data.bin.sha256"
    assert sidecar.read_text().splitlines() == [f"{SHA256}  data.bin", f"# source: path {old}"]
    dest.unlink()  # what Snakemake does before it reruns the fetch job for the changed `path:`
    with caplog.at_level(logging.WARNING, logger="svbop.download"):
        get(dest, path=new)
    assert dest.read_bytes() == BAD and f"is for another source (path {old}; now path {new})" in caplog.text
    assert sidecar.read_text().splitlines() == [f"{BAD_SHA256}  data.bin", f"# source: path {new}"]
    # the same source is still checked against its record: a changed file is refused
    new.write_bytes(DATA)
    with pytest.raises(ChecksumError, match=BAD_SHA256):
        get(dest, path=new)
    # likewise a URL: the digest recorded for the old URL does not judge the new one's file
    server.routes["/a.bin"], server.routes["/b.bin"] = Route(DATA), Route(BAD)
    dest2 = tmp_path / "raw" / "web.bin"
    get(dest2, url=server.url("/a.bin"))
    dest2.unlink()
    get(dest2, url=server.url("/b.bin"))
    assert dest2.read_bytes() == BAD
    # a sidecar of the older format (no source line) still verifies
    (tmp_path / "raw" / "web.bin.sha256").write_text(f"{SHA256}  web.bin\n")
    with pytest.raises(ChecksumError, match=SHA256):
        verify(dest2)


def test_verify_and_file_digest(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(DATA)
    assert file_digest(f) == SHA256 and file_digest(f, "md5", chunk_size=7) == MD5
    assert verify(f, sha256=SHA256, md5=MD5, record=False) == SHA256
    assert verify(f, record=False) == SHA256 and not (tmp_path / "f.bin.sha256").exists()
    with pytest.raises(ValueError, match="64 hexadecimal digits"):
        verify(f, sha256="abc", where=WHERE)
    (tmp_path / "f.bin.corrupt").write_bytes(b"older")
    with pytest.raises(ChecksumError, match="sha256 expected"):
        verify(f, sha256=BAD_SHA256)
    assert (tmp_path / "f.bin.corrupt").read_bytes() == DATA and not f.exists()  # replaced the old one
    with pytest.raises(ValueError, match="no such file"):
        verify(f)


# ------------------------------------------------------------------------------------------
# other sources
# ------------------------------------------------------------------------------------------


def test_path_source_links_and_verifies(tmp_path):
    own = tmp_path / "mine" / "data.bin"
    own.parent.mkdir()
    own.write_bytes(DATA)
    dest = tmp_path / "raw" / "data.bin"
    assert get(dest, path=own, sha256=SHA256) == dest
    assert dest.is_symlink() and os.readlink(dest) == str(own.resolve())
    assert dest.read_bytes() == DATA
    get(dest, path=own, sha256=SHA256)  # idempotent

    other = tmp_path / "raw" / "other.bin"
    with pytest.raises(ChecksumError, match=BAD_SHA256):
        get(other, path=own, sha256=BAD_SHA256)
    assert own.read_bytes() == DATA  # the user's own file is not moved
    assert not other.exists() and not other.is_symlink()

    missing = tmp_path / "nowhere.bin"
    with pytest.raises(ValueError) as info:
        get(tmp_path / "raw" / "x.bin", path=missing)
    assert str(missing) in str(info.value) and WHERE in str(info.value)


def test_manual_source(tmp_path):
    manual = {"url": "https://example.org/login/data.bin", "note": "needs an account"}
    dest = tmp_path / "raw" / "data.bin"
    with pytest.raises(DownloadError) as info:
        get(dest, manual=manual, sha256=SHA256)
    message = str(info.value)
    assert manual["url"] in message and str(dest.absolute()) in message
    assert "path:" in message and WHERE in message and "needs an account" in message
    assert dest.parent.is_dir()  # ready for the user to drop the file in

    dest.write_bytes(DATA)
    assert get(dest, manual=manual, sha256=SHA256) == dest
    dest.write_bytes(BAD)
    with pytest.raises(ChecksumError):
        get(dest, manual=manual, sha256=SHA256)


def test_manual_message_has_absolute_path_for_relative_dest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DownloadError) as info:
        get("raw/data.bin", manual={"url": "https://example.org/x"})
    assert str(tmp_path / "raw" / "data.bin") in str(info.value)


def test_file_url(tmp_path):
    source = tmp_path / "src dir" / "data.bin"  # a space, to exercise URL quoting
    source.parent.mkdir()
    source.write_bytes(DATA)
    dest = tmp_path / "data.bin"
    get(dest, url=source.as_uri(), sha256=SHA256, progress=True)  # tqdm bar code path (off: not a TTY)
    assert dest.read_bytes() == DATA and leftovers(dest) == ["src dir"]

    missing = (tmp_path / "missing.bin").as_uri()
    with pytest.raises(DownloadError, match="missing.bin") as info:
        get(tmp_path / "out.bin", url=missing, retries=3, backoff=10.0)  # not retried: no 10 s sleep
    assert str(tmp_path / "out.bin") in str(info.value)


def test_source_settings_are_checked(tmp_path):
    dest = tmp_path / "data.bin"
    with pytest.raises(ValueError, match="exactly one kind of source"):
        get(dest)
    with pytest.raises(ValueError, match="exactly one kind of source"):
        get(dest, url="http://127.0.0.1/x", path=dest)
    with pytest.raises(ValueError, match="not both"):
        get(dest, url="http://127.0.0.1/x", urls=["http://127.0.0.1/y"])
    with pytest.raises(ValueError, match="unsupported URL"):
        get(dest, url="ftp://example.org/x")
    with pytest.raises(ValueError, match="manual"):
        get(dest, manual={"note": "no url"})


# ------------------------------------------------------------------------------------------
# answers that are not the file: each mirror judged on its own, nothing recorded for them
# ------------------------------------------------------------------------------------------

HTML_PAGE = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Log in to continue</body></html>\n"


def test_checksum_mismatch_on_one_mirror_moves_on_to_the_next(server, tmp_path):
    """Mirror 1 answers 200 with an error page: mirror 2 must still be tried (it was not)."""
    server.routes["/a.bin"] = Route(BAD)
    server.routes["/b.bin"] = Route(DATA)
    dest = tmp_path / "data.bin"
    get(dest, urls=[server.url("/a.bin"), server.url("/b.bin")], sha256=SHA256)
    assert dest.read_bytes() == DATA
    assert [r["path"] for r in server.requests] == ["/a.bin", "/b.bin"]
    assert (tmp_path / "data.bin.corrupt").read_bytes() == BAD  # the bad copy is kept aside


def test_every_mirror_with_a_bad_checksum_names_each(server, tmp_path):
    server.routes["/a.bin"] = Route(BAD)
    server.routes["/b.bin"] = Route(BAD)
    dest = tmp_path / "data.bin"
    with pytest.raises(ChecksumError) as info:
        get(dest, urls=[server.url("/a.bin"), server.url("/b.bin")], sha256=SHA256)
    message = str(info.value)
    assert server.url("/a.bin") in message and server.url("/b.bin") in message and WHERE in message
    assert not dest.exists()


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "application/octet-stream"])
def test_html_page_without_checksum_is_refused_and_never_recorded(server, tmp_path, content_type):
    """With no digest configured, an HTML landing page used to become "the file" (its digest
    recorded, every rerun verifying the bad file): now it is refused by Content-Type or by its
    first bytes, set aside, and the next mirror is tried."""
    server.routes["/landing"] = Route(HTML_PAGE, content_type=content_type)
    server.routes["/data.tar.bz2"] = Route(b"BZh91AY&SY" + DATA)
    dest = tmp_path / "data.tar.bz2"
    get(dest, urls=[server.url("/landing"), server.url("/data.tar.bz2")])
    assert dest.read_bytes() == b"BZh91AY&SY" + DATA
    assert server.url("/data.tar.bz2") in (tmp_path / "data.tar.bz2.sha256").read_text()

    alone = tmp_path / "alone.csv"
    with pytest.raises(ContentError) as info:
        get(alone, url=server.url("/landing"))
    message = str(info.value)
    assert "HTML" in message and server.url("/landing") in message and str(alone) in message and WHERE in message
    assert not alone.exists() and not (tmp_path / "alone.csv.sha256").exists()


def test_body_that_does_not_match_its_name_is_refused(server, tmp_path):
    server.routes["/x"] = Route(b"PK\x03\x04 a zip where a bzip2 tar was promised")
    dest = tmp_path / "LSHTC1.tar.bz2"
    with pytest.raises(ContentError, match="does not start like a bzip2 file"):
        get(dest, url=server.url("/x"))
    assert not dest.exists() and not (tmp_path / "LSHTC1.tar.bz2.sha256").exists()
    assert (tmp_path / "LSHTC1.tar.bz2.corrupt").exists()


def test_recorded_html_page_is_set_aside_so_a_rerun_downloads_again(server, tmp_path):
    """The state an older version left: an HTML page as the file, its digest recorded."""
    dest = tmp_path / "Dmoz.tar.bz2"
    dest.write_bytes(HTML_PAGE)
    (tmp_path / "Dmoz.tar.bz2.sha256").write_text(
        f"{hashlib.sha256(HTML_PAGE).hexdigest()}  Dmoz.tar.bz2\n# source: url {server.url('/dmoz')}\n")
    with pytest.raises(ContentError, match="Rerun to download it again"):
        verify(dest, where=WHERE)  # what the unpack job does before it unpacks
    assert not dest.exists() and not (tmp_path / "Dmoz.tar.bz2.sha256").exists()

    dest.write_bytes(HTML_PAGE)  # and fetch() itself downloads again instead of verifying it
    server.routes["/dmoz"] = Route(b"BZh9" + DATA)
    get(dest, url=server.url("/dmoz"))
    assert dest.read_bytes() == b"BZh9" + DATA


def test_sniff():
    assert sniff(b"\x1f\x8b\x08", "a.tar.gz") is None and sniff(b"BZh9", "a.bz2") is None
    assert sniff(b"\xfd7zXZ\x00", "a.txz") is None and sniff(b"PK\x03\x04", "a.ZIP") is None
    assert "gzip" in sniff(b"BZh9", "a.gz")
    assert sniff(HTML_PAGE, "page.html") is None  # an HTML file may be HTML
    assert "HTML" in sniff(b"\xef\xbb\xbf  <html lang=en>", "train.csv")
    assert "HTML" in sniff(b"a,b\n", "train.csv", "text/html")
    assert sniff(b"a,b\n1,2\n", "train.csv", "text/plain") is None
    assert sniff(b"", "x.txt") == "it is empty"


# ------------------------------------------------------------------------------------------
# bounds: bytes and time
# ------------------------------------------------------------------------------------------


def test_announced_size_above_the_bound_is_refused_before_writing(server, tmp_path):
    server.routes["/big"] = Route(DATA)
    dest = tmp_path / "data.bin"
    with pytest.raises(ContentError, match="more than the 0 MB this file may have"):
        get(dest, url=server.url("/big"), max_mb=0.005)  # 5,243 bytes < 10,248
    assert leftovers(dest) == []  # nothing written, nothing kept


def test_unannounced_body_is_cut_at_the_bound(server, tmp_path):
    server.routes["/stream"] = Route(DATA * 20, length=False)  # 205 KB, no Content-Length
    dest = tmp_path / "data.bin"
    with pytest.raises(ContentError, match="max_mb"):
        get(dest, url=server.url("/stream"), size_mb=0.0001, max_mb=0.05)
    assert leftovers(dest) == []


def test_size_mb_bounds_the_bytes_when_max_mb_is_not_given(tmp_path):
    """`url: file:///dev/zero` used to fill the disk: size_mb now bounds what is written."""
    dest = tmp_path / "zeros.bin"
    started = time.monotonic()
    with pytest.raises(ContentError) as info:
        get(dest, url="file:///dev/zero", size_mb=0.5)  # bound 1.5 * 0.5 + 64 MB
    assert "more than the 65 MB" in str(info.value) and "file:///dev/zero" in str(info.value)
    assert leftovers(dest) == [] and time.monotonic() - started < 60


def test_trickling_server_is_abandoned_at_the_deadline_and_the_next_mirror_used(server, tmp_path):
    """One byte every 0.1 s keeps every read under the 5 s timeout: only an overall deadline ends it."""
    server.routes["/slow"] = Route(DATA, trickle=0.1)
    server.routes["/fast"] = Route(DATA)
    dest = tmp_path / "data.bin"
    started = time.monotonic()
    get(dest, urls=[server.url("/slow"), server.url("/fast")], sha256=SHA256, deadline=1.0)
    assert time.monotonic() - started < 10
    assert dest.read_bytes() == DATA

    other = tmp_path / "other.bin"
    with pytest.raises(DownloadError, match="deadline") as info:
        get(other, url=server.url("/slow"), sha256=SHA256, deadline=0.5)
    assert "kept and resumed" in str(info.value)
    part = tmp_path / "other.bin.part"
    assert 0 < part.stat().st_size < len(DATA) and DATA.startswith(part.read_bytes())


def test_redirect_loop_is_not_retried(server, tmp_path):
    server.routes["/loop"] = Route(b"", redirect="/loop")
    with pytest.raises(DownloadError, match="redirect"):
        get(tmp_path / "data.bin", url=server.url("/loop"), retries=3)
    assert len(server.hits("/loop")) <= 11  # one redirect chain, not four


def test_bounds_are_checked(tmp_path):
    with pytest.raises(ValueError, match="max_mb"):
        get(tmp_path / "x", url="http://127.0.0.1/x", max_mb=0)
    with pytest.raises(ValueError, match="size_mb"):
        get(tmp_path / "x", url="http://127.0.0.1/x", size_mb="big")
    with pytest.raises(ValueError, match="deadline"):
        get(tmp_path / "x", url="http://127.0.0.1/x", deadline=0)


def test_git_blob_pins_a_file_by_gits_object_id(server, tmp_path):
    """The id git lists for a file in a commit's tree: sha1 of b"blob <size>\\0" + content."""
    blob = hashlib.sha1(b"blob %d\0" % len(DATA) + DATA).hexdigest()
    server.routes["/a.csv"], server.routes["/b.csv"] = Route(BAD), Route(DATA)
    dest = tmp_path / "TEST.csv"
    get(dest, urls=[server.url("/a.csv"), server.url("/b.csv")], git_blob=blob)  # the first is refused
    assert dest.read_bytes() == DATA and not (tmp_path / "TEST.csv.sha256").exists()
    assert file_digest(dest, "git_blob") == blob
    if shutil.which("git"):  # the same id git itself computes
        assert subprocess.run(["git", "hash-object", str(dest)], capture_output=True, text=True).stdout.strip() == blob
    other = hashlib.sha1(b"blob %d\0" % (len(DATA) + 1) + DATA).hexdigest()  # same bytes, another size
    with pytest.raises(ChecksumError, match=f"git_blob expected {other}, actual {blob}"):
        verify(dest, git_blob=other)
    with pytest.raises(ValueError, match="40 hexadecimal digits"):
        verify(tmp_path / "TEST.csv.corrupt", git_blob="abc")
