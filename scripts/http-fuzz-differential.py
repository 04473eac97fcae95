#!/usr/bin/env python3
"""Random differential test of `duality http` against nginx.

Where tests/http_interop.rs checks chosen cases, this generates requests at
random (seeded, so a divergence can be replayed) and sends each to nginx and
to `duality http` serving the same directory with the same gzip settings
(nginx: `gzip on`, `gzip_static on`, `gzip_vary on`, `gzip_min_length 256`,
duality's gzip types; duality: `--gzip on`): GET and HEAD (now and then
another method) of files, directories, missing names, percent-encoded and
doubled-slash paths, queries, HTTP/1.0 and 1.1, `Connection: close`,
single and multiple byte ranges (suffix, open, past the end, spelled
with white space or another case), the
preconditions (`If-None-Match`, `If-Modified-Since`, `If-Match`,
`If-Unmodified-Since`, `If-Range`, each server's own ETag or date, or
another), `Accept-Encoding` in several forms, absolute-form targets, no
`Host`, long fields, request bodies framed by length or chunks, and
pipelines of up to three requests in one write. The directory holds text, HTML, CSS, JSON,
SVG and PNG files from 0 bytes to 100 KB (past the page cache's 64 KiB),
a fresh `.gz` beside one file, a stale one beside another, a `.gz`
alone, a directory with an index and one without, a hidden file, a name
with a space and one in UTF-8, and links inside the root (to a file of
another type, to a directory, to nothing).

Responses are compared after the differences that are not the request's:
`Server`, `Date`, the ETag's spelling (each server's own tags are sent
back to it), a `charset` parameter, an absolute or relative `Location`,
an error page's body, `Vary` on a 304, 412 or 416 (duality's RFC 9110
§15.4.5; nginx's gzip filter never sees them), `Accept-Ranges` on a 206,
and how a gzip body is framed and compressed (both are decompressed and
compared with the file). Left out, since the README
documents them as deviations and they would be found at once: `Range` on
HEAD, unparsable ranges, overlapping or touching ranges (duality
coalesces them), ranges adding up to more than the file (nginx sends it
whole), `..` in a path, invalid dates, `If-Modified-Since` beside
`If-None-Match`, JavaScript's, BMP's and MP4's types, a `.gz` beside a
file of a type not compressed or too small (nginx sends it). Counted and not
reported (documented): a `Range` that a gzip response answers (nginx: the
whole compressed body with 200; duality: the identity range with 206),
`Accept-Encoding: *`, `x-gzip` and a q-value preferring identity
(duality follows RFC 9110; nginx looks for `gzip` only), a validator of one
variant sent for the other (nginx's gzip tag is the identity's made weak,
duality's its own), a range of an empty file (nginx: 416 past byte 0),
a stale `FILE.gz` (nginx serves it, and varies on it; duality compresses
the newer file or, with `--gzip static`, sends it alone), nginx closing
the connection after its 405 to a TRACE, and nginx 1.22 closing a
connection it kept alive after a 412 (the requests behind it are sent to
nginx again on a new connection).

Loopback only; both servers are stopped by their PIDs. Exit status 1 if
any seed diverged.

    scripts/http-fuzz-differential.py target/release/duality \
        [--seeds 1-20] [--count 2000] [--parallel N] [--nginx nginx] [--gzip on|off|static] \
        [-- DUALITY_HTTP_ARGS...]

e.g. `-- --model amped:1` or `-- --io epoll --sendfile-learn 0`.
"""

import argparse
import concurrent.futures
import gzip
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from email.utils import formatdate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback import free_port, wait_listening  # noqa: E402

TIMEOUT = 3.0  # seconds a response may take before it counts as missing
COUNTS_LOCK = threading.Lock()
MTIME = 1767225600  # 2026-01-01: the files' time (a past, fixed date)

# duality's flags for each --gzip mode (nginx: `gzip` and `gzip_static`).
GZIP_ARGS = {
    "on": ["--gzip", "on"],
    "off": ["--gzip", "off"],
    "static": ["--gzip", "off", "--gzip-static", "on"],
}

# nginx's gzip_types for duality's compressed types among these files.
GZIP_TYPES = "text/plain text/css application/json image/svg+xml text/xml application/xml"


def text(r, n):
    words = [b"duality", b"threads", b"events", b"cache", b"nginx", b"gzip", b"\n", b" "]
    out = bytearray()
    while len(out) < n:
        out += r.choice(words) + b" "
    return bytes(out[:n])


def make_root(base):
    """The served directory: name -> bytes of each file (as asked for)."""
    r = random.Random(7)
    root = os.path.join(base, "root")
    files = {
        "empty.txt": b"",
        "one.txt": b"x",
        "small.txt": text(r, 100),
        "a.txt": text(r, 5000),
        "big.txt": text(r, 100_000),
        "page.html": b"<!doctype html><p>" + text(r, 3000) + b"</p>\n",
        "style.css": text(r, 2000),
        "stale.css": text(r, 2000),
        "data.json": b'{"k": "' + text(r, 4000).replace(b"\n", b" ") + b'"}',
        "img.svg": b"<svg xmlns='http://www.w3.org/2000/svg'>" + text(r, 1500) + b"</svg>",
        "pic.png": bytes(r.randrange(256) for _ in range(3000)),
        "sp ace.txt": text(r, 700),
        "\u00fc.txt": text(r, 800),
        ".hidden.txt": text(r, 300),
        "sub/index.html": b"<p>" + text(r, 900) + b"</p>\n",
        "sub/b.txt": text(r, 6000),
        "noindex/c.txt": text(r, 400),
    }
    for name, data in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (MTIME, MTIME))
    # A fresh .gz beside style.css (other bytes than a compression of the
    # file would give, but the same content); a stale one beside stale.css;
    # only.txt.gz alone.
    extra = {
        "style.css.gz": (gzip.compress(files["style.css"], 9, mtime=0), MTIME + 10),
        "stale.css.gz": (gzip.compress(b"old " + files["stale.css"], 9, mtime=0), MTIME - 10),
        "only.txt.gz": (gzip.compress(text(r, 1200), 9, mtime=0), MTIME),
    }
    for name, (data, t) in extra.items():
        path = os.path.join(root, name)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (t, t))
    # Links inside the root (both servers follow them; the type is the
    # name's, not the target's).
    links = {"link.txt": "a.txt", "notes.txt": "page.html", "subl": "sub", "dangling.txt": "nowhere"}
    for name, target in links.items():
        os.symlink(target, os.path.join(root, name))
    files["link.txt"] = files["a.txt"]
    files["notes.txt"] = files["page.html"]
    files["subl/b.txt"] = files["sub/b.txt"]
    for d in ("", "sub", "noindex"):
        os.utime(os.path.join(root, d), (MTIME, MTIME))
    return root, files


def nginx_conf(base, root, port, gzip="on"):
    gz = "on" if gzip == "on" else "off"
    gz_static = "off" if gzip == "off" else "on"
    return f"""daemon off;
worker_processes 1;
pid {base}/nginx.pid;
error_log {base}/nginx-error.log warn;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {base}/client_body;
    sendfile on;
    keepalive_requests 1000;
    gzip {gz};
    gzip_static {gz_static};
    gzip_vary on;
    gzip_min_length 256;
    gzip_types {GZIP_TYPES};
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


class Response:
    def __init__(self, status, headers, body, closed):
        self.status = status
        self.headers = headers  # lower-case name -> list of values
        self.body = body
        self.closed = closed  # the server closed after it

    def get(self, name):
        v = self.headers.get(name)
        return v[0] if v else None


class Conn:
    def __init__(self, port):
        self.port = port
        self.s = None
        self.buf = b""
        self.eof = False

    def open(self):
        self.close()
        self.s = socket.create_connection(("127.0.0.1", self.port))
        self.s.settimeout(TIMEOUT)
        self.buf = b""
        self.eof = False

    def close(self):
        if self.s:
            self.s.close()
        self.s = None

    def fill(self):
        if self.eof:
            return False
        try:
            d = self.s.recv(65536)
        except socket.timeout:
            return False
        except OSError:
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def read_response(self, head_only):
        """One response (`None`: none came; its body read as framed)."""
        while b"\r\n\r\n" not in self.buf:
            if not self.fill():
                return None
        end = self.buf.index(b"\r\n\r\n")
        lines = self.buf[:end].split(b"\r\n")
        self.buf = self.buf[end + 4 :]
        parts = lines[0].split(b" ", 2)
        status = int(parts[1])
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            headers.setdefault(k.strip().lower().decode(), []).append(v.strip().decode("latin-1"))
        body = b""
        if head_only or status in (204, 304) or 100 <= status < 200:
            pass
        elif "chunked" in ",".join(headers.get("transfer-encoding", [])).lower():
            while True:
                while b"\r\n" not in self.buf:
                    if not self.fill():
                        return Response(status, headers, body + b"<cut>", True)
                ln, self.buf = self.buf.split(b"\r\n", 1)
                n = int(ln.split(b";")[0], 16)
                while len(self.buf) < n + 2:
                    if not self.fill():
                        return Response(status, headers, body + b"<cut>", True)
                body += self.buf[:n]
                self.buf = self.buf[n + 2 :]
                if n == 0:
                    break
        elif "content-length" in headers:
            n = int(headers["content-length"][0])
            while len(self.buf) < n:
                if not self.fill():
                    return Response(status, headers, self.buf + b"<cut>", True)
            body, self.buf = self.buf[:n], self.buf[n:]
        else:
            while self.fill():
                pass
            body, self.buf = self.buf, b""
        close = any(v.lower() == "close" for v in headers.get("connection", []))
        return Response(status, headers, body, close)


def ranges_header(r, size):
    """A Range value neither server documents a deviation for."""
    c = r.randrange(10)
    if c < 4 or size == 0:
        a = r.randrange(0, max(size, 1) + 3)
        b = a + r.choice([0, 1, 9, 100, 5000, 200000])
        return f"bytes={a}-{b}"
    if c < 6:
        return f"bytes={r.randrange(0, max(size, 1) + 3)}-"
    if c < 8:
        return f"bytes=-{r.choice([0, 1, 10, 300, size, size + 5])}"
    if c < 9 and size > 20:
        # Spellings: white space, the unit's case, two spans from byte 0
        # (empty list elements are a documented deviation).
        return r.choice(["bytes= 0-9", "bytes=0-9 ", "Bytes=0-9", "bytes=0 - 9", "bytes=0-9,20-29"])
    # Two or three spans, ascending, apart, adding up to less than the file.
    spans, at = [], r.randrange(0, 50)
    for _ in range(r.choice([2, 3])):
        n = r.randrange(1, 40)
        if at + n >= size:
            break
        spans.append(f"{at}-{at + n - 1}")
        at += n + r.randrange(2, 200)
    return "bytes=" + ",".join(spans) if spans else f"bytes=0-{max(size - 1, 0)}"


class Gen:
    """The random requests of one seed."""

    ENCODINGS = [
        None,
        None,
        "gzip",
        "gzip, deflate, br",
        "deflate",
        "gzip;q=0",
        "identity",
        "x-gzip",
        "gzip;q=0.5",
        "br;q=1.0, gzip;q=0.8",
        "*",
        "gzip;q=0.5, identity;q=1",
        "identity;q=0",
    ]
    ACCEPTED = ("*", "gzip;q=0.5, identity;q=1", "x-gzip")  # documented deviations

    def __init__(self, seed, files, mode):
        self.r = random.Random(seed)
        self.files = files
        self.mode = mode
        self.names = sorted(files) + [
            "", "sub/", "sub", "noindex/", "noindex", "missing.txt", "only.txt",
            "only.txt.gz", "style.css.gz", "sub/missing", "a.txt/", "subl/", "subl", "dangling.txt",
        ]

    def eligible(self, name):
        """Whether the file `name` answers is one both servers compress."""
        if self.mode == "static":
            return name in ("style.css", "stale.css", "only.txt")
        name = {"sub/": "sub/index.html", "subl/": "sub/index.html"}.get(name, name)
        data = self.files.get(name)
        if name == "only.txt":
            return True
        ext = name.rsplit(".", 1)[-1]
        return data is not None and len(data) >= 256 and ext in ("txt", "css", "json", "svg", "html")

    def path(self, name):
        r = self.r
        out = []
        for ch in name:
            b = ch.encode()
            if ch in "/":
                out.append("//" if r.random() < 0.03 else "/")
            elif ch == " " or len(b) > 1 or (ch.isalnum() and r.random() < 0.05):
                out.append("".join(f"%{x:02X}" for x in b))
            else:
                out.append(ch)
        p = "/" + "".join(out)
        if r.random() < 0.03:
            p = p.replace("/", "/./", 1)
        if r.random() < 0.1:
            p += r.choice(["?x=1", "?", "?a=%20b&c", "?q=/../x"])
        return p

    def one(self):
        """(method, request bytes, head_only, skip: a documented deviation)."""
        r = self.r
        name = r.choice(self.names)
        data = self.files.get(name)
        size = len(data) if data is not None else 1000
        c = r.random()
        method = "GET" if c < 0.7 else "HEAD" if c < 0.96 else r.choice(["POST", "OPTIONS", "DELETE", "PUT", "PATCH", "TRACE"])
        if method not in ("GET", "HEAD") and data is None:
            name = "a.txt"  # another method on a missing name: documented
        version = "HTTP/1.1" if r.random() < 0.85 else "HTTP/1.0"
        headers = [("Host", "localhost")]
        notes = {"trace"} if method == "TRACE" else set()
        ae = r.choice(self.ENCODINGS)
        if ae is not None:
            headers.append(("Accept-Encoding", ae))
            if ae in self.ACCEPTED:
                notes.add("ae")
        # nginx would compress the answer (its rule: `gzip` named, not q=0).
        if ae and "gzip" in ae and "gzip;q=0" != ae and version == "HTTP/1.1" and self.eligible(name):
            notes.add("gz")
        if method == "GET" and r.random() < 0.3:
            headers.append(("Range", ranges_header(r, size)))
            notes.add("range")
        pre = r.random()
        tag = "{ETAGZ}" if r.random() < 0.3 else "{ETAG}"
        if tag == "{ETAGZ}":
            notes.add("tagz")
        lm = formatdate(MTIME, usegmt=True)
        other = formatdate(MTIME + r.choice([-86400, 86400, 1]), usegmt=True)
        if pre < 0.3 or "range" in notes:
            notes.add("tag")
        if pre < 0.12:
            headers.append(("If-None-Match", r.choice([tag, '"nope"', "*", f'"x", {tag}', f"W/{tag}"])))
        elif pre < 0.2:
            headers.append(("If-Modified-Since", r.choice([lm, other])))
        elif pre < 0.25:
            headers.append(("If-Match", r.choice([tag, f"W/{tag}", '"nope"', "*", f'"x", {tag}'])))
        elif pre < 0.3:
            headers.append(("If-Unmodified-Since", r.choice([lm, other])))
        if "range" in notes and r.random() < 0.3:
            headers.append(("If-Range", r.choice([tag, f"W/{tag}", lm, other, '"nope"'])))
        if r.random() < 0.05:
            headers.append(("Connection", "close"))
        elif version == "HTTP/1.0" and r.random() < 0.5:
            headers.append(("Connection", "keep-alive"))
        target = self.path(name)
        body = ""
        shape = r.random()
        if shape < 0.03:
            target = "http://localhost" + target  # absolute form
        elif shape < 0.05 and version == "HTTP/1.1":
            headers.pop(0)  # no Host: 400 in both
        elif shape < 0.08:
            # A body on the request, framed by length or chunks: read and
            # dropped, the next request found behind it.
            data = "x" * r.choice([0, 1, 10, 300])
            if r.random() < 0.5:
                headers.append(("Content-Length", str(len(data))))
                body = data
            elif version == "HTTP/1.1":
                headers.append(("Transfer-Encoding", "chunked"))
                body = (f"{len(data):x}\r\n{data}\r\n" if data else "") + "0\r\n\r\n"
        elif shape < 0.1:
            headers.append(("X-Pad", "y" * r.choice([100, 2000, 7000, 8000])))
        head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
        return method, head + "\r\n" + body, name, notes

    def batch(self):
        n = 1 if self.r.random() < 0.8 else self.r.randrange(2, 4)
        return [self.one() for _ in range(n)]


def learn_tags(port, names):
    """Each name's ETag, identity and gzip, as the server at `port` sends it."""
    tags = {}
    for name in names:
        for key, ae in (("{ETAG}", None), ("{ETAGZ}", "gzip")):
            c = Conn(port)
            c.open()
            p = "/" + "".join(ch if ch.isascii() and ch != " " else "".join(f"%{x:02X}" for x in ch.encode()) for ch in name)
            req = f"HEAD {p} HTTP/1.1\r\nHost: localhost\r\n" + (f"Accept-Encoding: {ae}\r\n" if ae else "") + "\r\n"
            c.s.sendall(req.encode())
            resp = c.read_response(True)
            c.close()
            tags[(name, key)] = resp.get("etag") if resp and resp.get("etag") else '"none"'
    return tags


def decode(resp):
    """The body as content: ungzipped, or the parts of a multipart body."""
    body = resp.body
    if (resp.get("content-encoding") or "").lower() == "gzip":
        try:
            return ("gzip", gzip.decompress(body))
        except Exception as e:  # noqa: BLE001 - a broken body is the finding
            return ("gzip-broken", repr(e).encode())
    ctype = resp.get("content-type") or ""
    if ctype.startswith("multipart/byteranges"):
        boundary = ctype.split("boundary=", 1)[1].strip('"').encode()
        parts = []
        for chunk in body.split(b"--" + boundary)[1:]:
            if chunk.startswith(b"--"):
                break
            head, _, data = chunk.partition(b"\r\n\r\n")
            fields = {}
            for ln in head.strip().split(b"\r\n"):
                k, _, v = ln.partition(b":")
                fields[k.strip().lower()] = v.strip()
            ct = fields.get(b"content-type", b"").split(b";")[0]
            if ct == b"application/gzip":
                ct = b"application/octet-stream"  # documented, as above
            parts.append((ct, fields.get(b"content-range"), data[:-2] if data.endswith(b"\r\n") else data))
        return ("parts", parts)
    return ("identity", body)


def view(resp, method):
    """What must agree between the two servers' answers."""
    if resp is None:
        return ("no response",)
    h = resp.get
    enc = (h("content-encoding") or "").lower()
    ctype = (h("content-type") or "").split(";")[0].strip().lower()
    if ctype.startswith("multipart/byteranges"):
        ctype = "multipart/byteranges"
    if ctype == "application/gzip":
        ctype = "application/octet-stream"  # a documented type nginx lacks
    loc = h("location")
    if loc and loc.startswith("http://"):
        loc = "/" + loc.split("/", 3)[3] if loc.count("/") >= 3 else "/"
    v = {
        "status": resp.status,
        "content-type": ctype if resp.status in (200, 206, 304) or h("content-type") is None else "(error page)",
        "content-encoding": enc,
        "content-range": h("content-range"),
        "last-modified": h("last-modified"),
        "etag": h("etag") is not None,
        # nginx's gzip filter does not see a 304, 412 or 416; duality varies
        # them as the 200 would (RFC 9110 15.4.5), as documented.
        "vary": h("vary") if resp.status not in (304, 412, 416) else None,
        "location": loc,
        "closed": resp.closed,
    }
    if resp.status in (200, 206) and not enc and not ctype.startswith("multipart"):
        v["content-length"] = h("content-length")
    if resp.status == 200 and not enc:
        v["accept-ranges"] = h("accept-ranges")  # nginx sends none with 206
    if method == "GET" and resp.status in (200, 206):
        v["body"] = decode(resp)
    return tuple(sorted(v.items()))


def documented(req_notes, name, mine, theirs, mode):
    """Which documented deviation explains the difference, if one does."""
    m, t = dict(mine), dict(theirs)
    if name == "empty.txt" and "range" in req_notes and (m["status"], t["status"]) == (200, 416):
        return "a range of an empty file"
    differ = {k for k in m if m[k] != t.get(k)}
    if "trace" in req_notes and differ == {"closed"}:
        return "nginx closes after a TRACE"  # both 405
    if mode == "off":
        return None
    if name.startswith("stale.css") and ("gz" in req_notes or differ == {"vary"}):
        return "stale FILE.gz"
    same = (m["status"], m["content-encoding"]) == (t["status"], t["content-encoding"])
    if same and m["status"] not in (304, 412):
        return None  # the same variant chosen: every other field must agree
    if {"range", "gz"} <= req_notes and m["content-encoding"] == "":
        return "range of a gzip response"
    # nginx's gzip variant has the identity's tag made weak; duality's its
    # own strong tag (as Apache): a tag matches other variants in each.
    if ({"tag", "gz"} <= req_notes or "tagz" in req_notes) and {m["status"], t["status"]} <= {
        200,
        206,
        304,
        412,
        416,
    }:
        return "the gzip variant's own ETag"
    # Which variant answers (and so its validators, and a lone .gz found
    # or not) differs where the two read Accept-Encoding differently.
    if "ae" in req_notes:
        return "Accept-Encoding preference"
    return None


def start(args, base, root):
    nport, dport = free_port(), free_port()
    conf = os.path.join(base, "nginx.conf")
    with open(conf, "w") as f:
        f.write(nginx_conf(base, root, nport, args.gzip))
    nginx = subprocess.Popen([args.nginx, "-c", conf, "-p", base], stderr=subprocess.DEVNULL)
    duality = subprocess.Popen(
        [args.duality, "http", "--root", root, "--listen", f"127.0.0.1:{dport}", *GZIP_ARGS[args.gzip], *args.rest],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(base, "duality.log"), "wb"),
    )
    wait_listening(nport, nginx, "nginx")
    wait_listening(dport, duality, "duality http")
    return nginx, duality, nport, dport


def count(counts, what):
    with COUNTS_LOCK:
        counts[what] = counts.get(what, 0) + 1


def run_seed(seed, args, files, nport, dport, tags_n, tags_d, counts, say):
    """Runs one seed; `say` takes its report's lines. False if it diverged."""
    gen = Gen(seed, files, args.gzip)
    ng, du = Conn(nport), Conn(dport)
    ng.open()
    du.open()
    history = []
    for i in range(args.count):
        batch = gen.batch()
        wire_n, wire_d, parts_n = b"", b"", []
        for method, raw, name, _ in batch:
            n_bytes, d_bytes = raw, raw
            for key in ("{ETAGZ}", "{ETAG}"):
                n_bytes = n_bytes.replace(key, tags_n.get((name, key), '"none"'))
                d_bytes = d_bytes.replace(key, tags_d.get((name, key), '"none"'))
            parts_n.append(n_bytes.encode("utf-8"))
            wire_n += parts_n[-1]
            wire_d += d_bytes.encode("utf-8")
        history.append(wire_d)
        try:
            ng.s.sendall(wire_n)
            du.s.sendall(wire_d)
        except OSError:
            pass
        reopen = False
        for j, (method, raw, name, notes) in enumerate(batch):
            rn = ng.read_response(method == "HEAD")
            if rn is None and ng.eof and not ng.buf:
                # nginx 1.22 closes a connection it kept alive after a 412
                # (the requests behind it unanswered): they are sent again
                # on a new one, as a client retries on a stale connection.
                count(counts, "nginx closed a kept-alive connection")
                ng.open()
                ng.s.sendall(b"".join(parts_n[j:]))
                rn = ng.read_response(method == "HEAD")
            rd = du.read_response(method == "HEAD")
            vn, vd = view(rn, method), view(rd, method)
            count(counts, "responses")
            if vn != vd:
                why = documented(notes, name, vd, vn, args.gzip) if rn and rd else None
                if why:
                    count(counts, why)
                else:
                    say(f"seed {seed}: request {i} diverged: {raw.splitlines()[0]!r}")
                    for ln in history[-args.history :]:
                        say(f"  sent: {ln if len(ln) < 600 else ln[:600] + b'...'}")
                    dn = dict(vn) if rn else {"response": None}
                    dd = dict(vd) if rd else {"response": None}
                    for k in sorted(set(dn) | set(dd)):
                        a, b = dn.get(k), dd.get(k)
                        if a != b:
                            sa, sb = repr(a), repr(b)
                            say(f"  {k}: nginx {sa[:300]}\n  {' ' * len(k)}  duality {sb[:300]}")
                    ng.close()
                    du.close()
                    return False
            if rn is None or rd is None or rn.closed or rd.closed:
                reopen = True
                break
        if reopen or ng.eof or du.eof:
            ng.open()
            du.open()
    ng.close()
    du.close()
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("duality")
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--count", type=int, default=2000, help="writes per seed")
    ap.add_argument("--nginx", default="nginx")
    ap.add_argument("--history", type=int, default=4, help="writes printed before a divergence")
    ap.add_argument("--parallel", type=int, default=1, help="seeds run at once, each on its own connections")
    ap.add_argument(
        "--gzip",
        choices=sorted(GZIP_ARGS),
        default="on",
        help="both servers compress and send .gz files (on), neither does (off), or .gz files only (static)",
    )
    argv, extra = sys.argv[1:], []
    if "--" in argv:  # after it: more `duality http` arguments
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1 :]
    args = ap.parse_args(argv)
    args.rest = extra
    if shutil.which(args.nginx) is None:
        sys.exit(f"{args.nginx} not found: install nginx (nginx-light) to compare against it")
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    base = tempfile.mkdtemp(prefix="http-fuzz-")
    os.chmod(base, 0o755)  # nginx's workers run as another user
    nginx = duality = None
    failed = []
    counts = {"responses": 0}
    try:
        root, files = make_root(base)
        nginx, duality, nport, dport = start(args, base, root)
        names = list(files)
        tags_n, tags_d = learn_tags(nport, names), learn_tags(dport, names)

        def one(seed):
            t0, lines = time.time(), []
            ok = run_seed(seed, args, files, nport, dport, tags_n, tags_d, counts, lines.append)
            lines.append(f"seed {seed}: {'same' if ok else 'DIVERGED'} ({time.time() - t0:.1f} s)")
            return seed, ok, lines

        # Seeds side by side (--parallel): each on connections of its own,
        # so the servers' caches are shared by requests in flight at once.
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            for seed, ok, lines in pool.map(one, seeds):
                print("\n".join(lines), flush=True)
                if not ok:
                    failed.append(seed)
                for p, what in ((nginx, "nginx"), (duality, "duality http")):
                    if p.poll() is not None:
                        sys.exit(f"{what} exited with {p.returncode}")
    finally:
        for p in (nginx, duality):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(base, ignore_errors=True)
    print("responses compared:", counts.pop("responses"), "documented differences:", counts or "none")
    if failed:
        print("diverged:", " ".join(map(str, failed)))
        sys.exit(1)


if __name__ == "__main__":
    main()
