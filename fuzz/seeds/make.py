#!/usr/bin/env python3
"""Writes the binary seeds of the fuzz targets (run from anywhere:
`python3 fuzz/seeds/make.py`); the output is checked in, this script says how
it was made. Each seed starts with the byte its target dispatches on."""

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)


def digest(n):
    return "sha256:" + ("%02x" % n) * 32


# --- oci_documents: 0 manifest/index, 1 config, 2 image record, 3 pair,
# 4 WWW-Authenticate challenge ---
def j(v):
    return json.dumps(v, separators=(",", ":")).encode()


index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(1), "size": 400,
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(2), "size": 400,
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
        {"digest": digest(3), "size": 1, "platform": {"architecture": "arm", "os": "linux", "variant": "v7"}},
    ],
}
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": digest(9), "size": 300},
    "layers": [
        {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": digest(4), "size": 1000},
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": digest(5), "size": 2000},
    ],
}
config = {
    "architecture": "amd64",
    "os": "linux",
    "created": "2026-01-01T00:00:00Z",
    "config": {"User": "1000:1000", "Env": ["PATH=/bin"], "Entrypoint": None, "Cmd": ["sh"],
               "WorkingDir": "/w", "Volumes": {"/data": {}}, "StopSignal": "SIGTERM",
               "Labels": {"a": "b"}, "ExposedPorts": {"80/tcp": {}}},
    "rootfs": {"type": "layers", "diff_ids": [digest(6), digest(7)]},
}
record = {
    "id": digest(9), "repo_tags": ["docker.io/library/busybox:1"],
    "repo_digests": ["docker.io/library/busybox@" + digest(8)], "size": 3300, "uid": 1000,
    "username": "", "pinned": False,
    "config": {"user": "1000", "env": [], "entrypoint": [], "cmd": ["sh"], "working_dir": "",
               "volumes": [], "stop_signal": "", "labels": {}, "exposed_ports": [],
               "architecture": "amd64", "os": "linux", "created": ""},
    "layers": [{"digest": digest(4), "media_type": "", "size": 1000, "diff_id": digest(6),
                "chain_id": digest(6)}],
    "manifests": [digest(8)], "generation": 3,
}
write("oci_documents", "index", b"\0" + j(index))
write("oci_documents", "manifest", b"\0" + j(manifest))
write("oci_documents", "config", b"\1" + j(config))
write("oci_documents", "record", b"\2" + j(record))
write("oci_documents", "pair", b"\3" + j(manifest) + b"\0" + j(config))
write("oci_documents", "challenge",
      b"\4" + b'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"')


# --- oci_layer: bit 0 gzip the rest, bit 1 as root (owners, devices),
# bit 2 fix the header checksums ---
def info(name, kind=tarfile.REGTYPE, size=0, mode=0o644, link="", uid=0, gid=0):
    t = tarfile.TarInfo(name)
    t.type, t.size, t.mode, t.linkname, t.uid, t.gid, t.mtime = kind, size, mode, link, uid, gid, 1000000
    return t


def tar(entries, fmt=tarfile.GNU_FORMAT, end=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for e in entries:
            ti, data = e if isinstance(e, tuple) else (e, None)
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    out = buf.getvalue().rstrip(b"\0")
    # Whole blocks; the end blocks only when asked (the reader stops at EOF).
    out += b"\0" * (-len(out) % 512)
    return out + (b"\0" * 1024 if end else b"")


def file(name, data, **kw):
    return (info(name, size=len(data), **kw), data)


plain = tar([
    info("etc/", tarfile.DIRTYPE, mode=0o755),
    file("etc/hostname", b"berth\n"),
    info("etc/link", tarfile.SYMTYPE, link="../../sentinel/victim"),
    info("etc/hard", tarfile.LNKTYPE, link="etc/hostname"),
    info("etc/.wh.gone"),
    info("etc/.wh..wh..opq"),
], end=True)
write("oci_layer", "plain", b"\4" + plain)

owners = tar([
    file("bin/su", b"#!", mode=0o4755, uid=1000, gid=1000),
    info("dev/null", tarfile.CHRTYPE, mode=0o666),
    info("run/fifo", tarfile.FIFOTYPE),
])
write("oci_layer", "owners", b"\6" + owners)

t = info("usr/share/" + "long-name-" * 12, size=2)
t.pax_headers = {"SCHILY.xattr.user.note": "x", "mtime": "1000000.5", "uid": "7"}
pax = tar([(t, b"hi"), info("usr/lib/", tarfile.DIRTYPE, mode=0o700)], fmt=tarfile.PAX_FORMAT)
write("oci_layer", "pax_gzipped", b"\5" + pax)

# A GNU sparse entry ('S'): one 512-byte block of data at 4096, apparent size
# 1 MiB; the sparse map lives in the old GNU header fields.
h = bytearray(info("sparse", size=512).tobuf(tarfile.GNU_FORMAT))
h[156] = ord("S")
def octal(n, width):
    return (b"%0*o" % (width - 1, n)) + b"\0"
h[386:398], h[398:410] = octal(4096, 12), octal(512, 12)   # sparse[0]
h[410:422], h[422:434] = octal(1 << 20, 12), octal(0, 12)  # end of map
h[483:495] = octal(1 << 20, 12)                            # real size
h[148:156] = b" " * 8
h[148:156] = b"%06o\0 " % sum(h)
write("oci_layer", "sparse", b"\4" + bytes(h) + b"x" * 512)

hostile = tar([
    info("a", tarfile.SYMTYPE, link="../sentinel"),
    file("a/victim", b"owned"),
    file("../escape", b"x"),
    info("b", tarfile.LNKTYPE, link="../sentinel/victim"),
])
write("oci_layer", "hostile", b"\4" + hostile)

small = tar([file("hello", b"hello\n")], end=True)
write("oci_layer", "gzip_blob", b"\0" + gzip.compress(small, mtime=0))
if shutil.which("zstd"):
    zst = subprocess.run(["zstd", "-q", "-c", "--no-check"], input=small, stdout=subprocess.PIPE, check=True)
    write("oci_layer", "zstd_blob", b"\0" + zst.stdout)


# --- store_record: 0 berth's Record of meta and status, 1 a typed record ---
write("store_record", "record",
      b"\0" + j({"version": 1, "record": {"meta": {"id": "abc", "name": "pod"},
                                          "status": {"state": "ready"}}}))
write("store_record", "typed",
      b"\1" + j({"version": 1, "record": {"id": "c1", "pid": 42, "exit_code": -1,
                                          "created_ns": 1700000000000000000, "size": 18446744073709551615,
                                          "state": {"Running": {"since": 5}}, "labels": {"k": "v"},
                                          "mounts": [["/data", True]]}}))


# --- nri_frame: NRI's mux frames (conn id, length, payload), one after the
# other, a ttrpc message header at the start of each payload ---
def frame(conn, payload):
    return conn.to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload


def ttrpc(body, stream=1, kind=1):
    return len(body).to_bytes(4, "big") + stream.to_bytes(4, "big") + bytes([kind, 0]) + body


write("nri_frame", "two_and_a_half",
      frame(1, ttrpc(b"\x0a\x03abc")) + frame(2, ttrpc(b"", stream=3, kind=2)) + frame(1, b"")[:6])
write("nri_frame", "split", frame(2, ttrpc(b"x" * 4086)[:4096]) + frame(2, b"y" * 100))
write("nri_frame", "reserved_conn", frame(0, b"hi"))


# --- nri_reply: protobuf from a plugin; the first byte picks the message
# (0 CreateContainerResponse, 1 UpdateContainerResponse, 2
# StopContainerResponse, 3 SynchronizeResponse, 4 ConfigureResponse, 5
# ValidateContainerAdjustmentResponse, 6 RegisterPluginRequest, 7
# UpdateContainersRequest) ---
def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, payload):
    """A length-delimited field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def number(num, n):
    return varint(num << 3) + varint(n)


memory = field(1, field(1, field(1, number(1, 1 << 20))))  # resources.memory.limit
update = field(1, b"c2") + field(2, field(1, memory))        # ContainerUpdate
adjust = (field(4, field(1, b"A") + field(2, b"1"))          # env A=1
          + field(2, field(1, b"note") + field(2, b"x"))     # annotation
          + field(4, field(1, b"-PATH"))                     # env removal
          + field(6, field(7, field(1, b"network"))          # namespace
                     + field(2, memory)))                     # linux resources
write("nri_reply", "create", b"\0" + field(1, adjust) + field(2, update)
      + field(3, field(1, b"c3") + field(2, b"too big")))
write("nri_reply", "update", b"\1" + field(1, update) + field(1, field(1, b"c1") + field(2, field(1, memory))))
write("nri_reply", "stop", b"\2" + field(1, update))
write("nri_reply", "synchronize", b"\3" + field(1, update) + number(2, 1))
write("nri_reply", "configure", b"\4" + number(2, 0x7FF))
write("nri_reply", "validate", b"\5" + number(1, 1) + field(2, b"no"))
write("nri_reply", "register", b"\6" + field(1, b"plugin") + field(2, b"10"))
write("nri_reply", "update_containers", b"\7" + field(1, update) + field(2, field(1, b"c4") + field(2, b"evict")))


# --- oci_archive: first byte bit 0 fixes tar checksums; then the tar ---
def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


layer = gzip.compress(tar([file("hello", b"hi\n")], end=True), mtime=0)
diff = tar([file("hello", b"hi\n")], end=True)
config = j({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/hello"]},
            "rootfs": {"type": "layers", "diff_ids": [sha(diff)]}})
manifest = j({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
              "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                         "digest": sha(config), "size": len(config)},
              "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                          "digest": sha(layer), "size": len(layer)}]})
oci_index = j({"schemaVersion": 2, "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest),
     "size": len(manifest), "annotations": {"io.containerd.image.name": "example.com/seed:1",
                                            "org.opencontainers.image.ref.name": "1"}}]})
blob = lambda d: file("blobs/sha256/" + hashlib.sha256(d).hexdigest(), d)
write("oci_archive", "oci", b"\0" + tar([
    file("oci-layout", j({"imageLayoutVersion": "1.0.0"})),
    file("index.json", oci_index),
    blob(manifest), blob(config), blob(layer),
], end=True))
docker_manifest = j([{"Config": "config.json", "RepoTags": ["example.com/seed:2"],
                      "Layers": ["layer/layer.tar"]}])
write("oci_archive", "docker", b"\0" + tar([
    file("manifest.json", docker_manifest),
    file("config.json", config),
    info("layer/", tarfile.DIRTYPE, mode=0o755),
    file("layer/layer.tar", diff),
], end=True))

# An OCI layout of an artifact: an empty config, a file and a tar layer.
model = b"weights"
art_manifest = j({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "artifactType": "application/vnd.lab.model.v1",
                  "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha(b"{}"), "size": 2},
                  "layers": [{"mediaType": "application/octet-stream", "digest": sha(model), "size": len(model),
                              "annotations": {"org.opencontainers.image.title": "m/model.bin"}},
                             {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                              "digest": sha(layer), "size": len(layer)}]})
art_index = j({"schemaVersion": 2, "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(art_manifest),
     "size": len(art_manifest), "annotations": {"io.containerd.image.name": "example.com/model:1"}}]})
write("oci_archive", "artifact", b"\0" + tar([
    file("oci-layout", j({"imageLayoutVersion": "1.0.0"})),
    file("index.json", art_index),
    blob(art_manifest), blob(b"{}"), blob(model), blob(layer),
], end=True))

# --- oci_artifact: 0 a manifest whose layers the artifact plan checks,
# 1 a path an artifact's file would get ---
artifact = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "artifactType": "application/vnd.lab.model.v1",
    "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(9), "size": 2},
    "layers": [
        {"mediaType": "application/octet-stream", "digest": digest(1), "size": 10,
         "annotations": {"org.opencontainers.image.title": "model.bin"}},
        {"mediaType": "text/plain", "digest": digest(2), "size": 3,
         "annotations": {"org.opencontainers.image.title": "tok/vocab.txt"}},
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(3), "size": 100},
        {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(4), "size": 2},
        {"mediaType": "application/octet-stream", "digest": digest(5), "size": 1,
         "annotations": {"org.cncf.model.filepath": "weights/a.safetensors"}},
    ],
}
write("oci_artifact", "model", b"\0" + j(artifact))
hostile = dict(artifact, layers=[
    {"mediaType": "application/octet-stream", "digest": digest(1), "size": 1,
     "annotations": {"org.opencontainers.image.title": "a"}},
    {"mediaType": "application/octet-stream", "digest": digest(2), "size": 1,
     "annotations": {"org.opencontainers.image.title": "a/../../b"}},
])
write("oci_artifact", "hostile", b"\0" + j(hostile))
write("oci_artifact", "path", b"\1" + b"models/llama/model-00001-of-00002.safetensors")
