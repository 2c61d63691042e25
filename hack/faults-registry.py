#!/usr/bin/env python3
"""The registry side of hack/kube-faults.sh's `registry-drop` and `disk-full`.

    faults-registry.py proxy LISTEN UPSTREAM DIR
        An HTTP proxy on LISTEN (127.0.0.1:PORT) in front of the registry at
        UPSTREAM, for pulls (GET and HEAD). While DIR/cut.on exists (holding
        N, default 3), it drops the connection in the middle of the first
        blob of 1 MiB or more it serves and of every Nth after: headers and
        a part of the body sent, then a reset. Each blob it serves is a line
        of DIR/blobs.log: "DIGEST SIZE FROM SENT whole|cut" (FROM is the
        Range's start, SIZE the body's length). Loopback only.
    faults-registry.py push REGISTRY BASE REPO:TAG LAYERS MIB
        Pushes REPO:TAG to REGISTRY: the image BASE (REPO:TAG there) with
        LAYERS more layers of MIB MiB of random bytes each (a fresh image:
        nothing of it but BASE's layers is in any store). Prints BASE's blob
        digests as "base DIGEST" and the new ones as "new DIGEST".

Python 3 standard library only.
"""

import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import random
import socket
import socketserver
import struct
import sys
import tarfile
import threading

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
])
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
BIG = 1 << 20
CHUNK = 64 << 10
# Bound on every upstream call.
TIMEOUT = 60


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = ""
    dir = ""
    lock = threading.Lock()
    big_blobs = 0

    def log_message(self, fmt, *args):
        pass

    def do_HEAD(self):
        self.forward(body=False)

    def do_GET(self):
        self.forward(body=True)

    def cut_after(self, size):
        """Bytes of this blob's body to send before the cut, or None."""
        try:
            with open(os.path.join(self.dir, "cut.on")) as f:
                n = int(f.read().strip() or 3)
        except (OSError, ValueError):
            return None
        if size < BIG:
            return None
        with Proxy.lock:
            k = Proxy.big_blobs
            Proxy.big_blobs += 1
        if k % max(n, 1):
            return None
        return random.randint(CHUNK, size // 2)

    def forward(self, body):
        conn = http.client.HTTPConnection(self.upstream, timeout=TIMEOUT)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        try:
            conn.request(self.command, self.path, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            self.send_error(502, f"upstream: {e}")
            return
        try:
            length = resp.getheader("Content-Length")
            size = int(length) if length is not None else None
            blob = "/blobs/sha256:" in self.path and body and resp.status in (200, 206)
            cut = self.cut_after(size) if blob and size is not None else None
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                    self.send_header(k, v)
            if size is None and body:
                # Unknown length (chunked upstream): sent whole, the connection closed after.
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not body:
                return
            sent = 0
            while cut is None or sent < cut:
                want = CHUNK if cut is None else min(CHUNK, cut - sent)
                data = resp.read(want)
                if not data:
                    break
                self.wfile.write(data)
                sent += len(data)
            if blob:
                digest = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
                start = (self.headers.get("Range") or "bytes=0-")[6:].split("-")[0] or "0"
                with open(os.path.join(self.dir, "blobs.log"), "a") as f:
                    f.write(f"{digest} {size} {start} {sent} {'cut' if cut is not None else 'whole'}\n")
            if cut is not None:
                self.wfile.flush()
                # A reset, as a dying registry or a broken network leaves it.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
        finally:
            conn.close()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def proxy(listen, upstream, dir):
    host, port = listen.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost"):
        sys.exit("faults-registry: loopback only")
    Proxy.upstream = upstream
    Proxy.dir = dir
    Server((host, int(port)), Proxy).serve_forever()


def call(registry, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(registry, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            sys.exit(f"faults-registry: {method} {path}: {resp.status} {data[:200]!r}")
        return resp, data
    finally:
        conn.close()


def manifest(registry, repo, ref):
    resp, data = call(registry, "GET", f"/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_TYPES})
    doc = json.loads(data)
    media = doc.get("mediaType") or resp.getheader("Content-Type")
    if media in INDEX_TYPES:
        for m in doc["manifests"]:
            p = m.get("platform", {})
            if p.get("os") == "linux" and p.get("architecture") == "amd64":
                return manifest(registry, repo, m["digest"])
        sys.exit(f"faults-registry: {repo}:{ref} has no linux/amd64 image")
    return media, doc


def upload(registry, repo, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    resp, _ = call(registry, "POST", f"/v2/{repo}/blobs/uploads/")
    loc = resp.getheader("Location")
    loc = loc.split(registry, 1)[-1] if "://" in loc else loc
    sep = "&" if "?" in loc else "?"
    call(registry, "PUT", f"{loc}{sep}digest={digest}", body=data,
         headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
    return digest


def random_layer(i, mib):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(f"kube-faults/layer-{i}")
        info.size = mib << 20
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(random.randbytes(info.size)))
    raw = raw.getvalue()
    return "sha256:" + hashlib.sha256(raw).hexdigest(), gzip.compress(raw, compresslevel=1)


def push(registry, base, target, layers, mib):
    base_repo, base_tag = base.rsplit(":", 1)
    repo, tag = target.rsplit(":", 1)
    media, doc = manifest(registry, base_repo, base_tag)
    _, config = call(registry, "GET", f"/v2/{base_repo}/blobs/{doc['config']['digest']}")
    config = json.loads(config)
    for blob in doc["layers"]:
        # Mounted from the base's repository: no bytes move.
        call(registry, "POST", f"/v2/{repo}/blobs/uploads/?mount={blob['digest']}&from={base_repo}")
        print("base", blob["digest"])
    layer_type = ("application/vnd.docker.image.rootfs.diff.tar.gzip"
                  if "docker" in (media or "") else "application/vnd.oci.image.layer.v1.tar+gzip")
    for i in range(layers):
        diff_id, data = random_layer(i, mib)
        digest = upload(registry, repo, data)
        doc["layers"].append({"mediaType": layer_type, "digest": digest, "size": len(data)})
        config["rootfs"]["diff_ids"].append(diff_id)
        if config.get("history"):
            config["history"].append({"created_by": "kube-faults: a fresh layer"})
        print("new", digest)
    config = json.dumps(config).encode()
    doc["config"] = dict(doc["config"], digest=upload(registry, repo, config), size=len(config))
    print("new", doc["config"]["digest"])
    body = json.dumps(doc).encode()
    call(registry, "PUT", f"/v2/{repo}/manifests/{tag}", body=body,
         headers={"Content-Type": media or "application/vnd.oci.image.manifest.v1+json"})


def main(args):
    if len(args) == 4 and args[0] == "proxy":
        proxy(*args[1:])
    elif len(args) == 6 and args[0] == "push":
        push(args[1], args[2], args[3], int(args[4]), int(args[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
