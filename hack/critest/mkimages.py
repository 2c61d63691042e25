#!/usr/bin/env python3
"""Derive the images critest needs from berth's busybox test image in a local
registry (docker-registry on 127.0.0.1, filled by build_test_images).
usage: mkimages.py ADDR   (e.g. 127.0.0.1:41234)
Pushes (names as critest asks for them, minus the host; berth mirrors every
host to this registry):
  e2e-test-images/nginx:1.14-2, k8s-staging-cri-tools/hostnet-nginx-amd64:latest
  pause:3.9, k8s-staging-cri-tools/test-image-{1,2,3,latest,digest}:latest,
  test-image-tags:{1,2,3}, test-image-tag:{test,all}, test-image-user-*,
  test-image-predefined-group:latest
Every one gets the COMMON files below; with SHROOT set (critest.sh: Debian's
dynamic busybox as bin/sh, with the libraries it needs, under that dir) its
files too, so that the images' /bin/sh execs commands from PATH, as the
upstream busybox image's does.
"""
import gzip, os, hashlib, io, json, sys, tarfile, urllib.request, urllib.error

ADDR = sys.argv[1]
BASE = ("berth-test/busybox", "latest")
MT_M = "application/vnd.docker.distribution.manifest.v2+json"
MT_C = "application/vnd.docker.container.image.v1+json"
MT_L = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def req(method, path, data=None, headers=None, full=False):
    url = path if path.startswith("http") else f"http://{ADDR}{path}"
    r = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        resp = urllib.request.urlopen(r)
    except urllib.error.HTTPError as e:
        if full:
            return e
        raise RuntimeError(f"{method} {url}: {e.code} {e.read()[:300]}")
    return resp


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def blob_exists(repo, dg):
    r = req("HEAD", f"/v2/{repo}/blobs/{dg}", full=True)
    return getattr(r, "status", getattr(r, "code", 0)) == 200


def push_blob(repo, data, dg=None, src=None):
    dg = dg or sha(data)
    if blob_exists(repo, dg):
        return dg
    if src:
        r = req("POST", f"/v2/{repo}/blobs/uploads/?mount={dg}&from={src}", data=b"", full=True)
        if getattr(r, "status", getattr(r, "code", 0)) == 201:
            return dg
    r = req("POST", f"/v2/{repo}/blobs/uploads/", data=b"")
    loc = r.headers["Location"]
    if not loc.startswith("http"):
        loc = f"http://{ADDR}{loc}"
    sep = "&" if "?" in loc else "?"
    req("PUT", f"{loc}{sep}digest={dg}", data=data, headers={"Content-Type": "application/octet-stream"})
    return dg


def layer(files):
    """files: {path: (content bytes, mode)}; returns (gz bytes, diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = set()
        for p in sorted(files):
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d and d not in dirs:
                    dirs.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type = tarfile.DIRTYPE
                    ti.mode = 0o755
                    ti.mtime = 0
                    t.addfile(ti)
            content, mode = files[p]
            ti = tarfile.TarInfo(p)
            ti.size = len(content)
            ti.mode = mode
            ti.mtime = 0
            t.addfile(ti, io.BytesIO(content))
    rawb = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as g:
        g.write(rawb)
    return gz.getvalue(), sha(rawb)


base_repo, base_tag = BASE
base_m = json.load(req("GET", f"/v2/{base_repo}/manifests/{base_tag}", headers={"Accept": MT_M}))
base_c = json.load(req("GET", f"/v2/{base_repo}/blobs/{base_m['config']['digest']}"))


_common = []  # the COMMON layer, made once: (gz, diff_id, repo it was first pushed to)


def add_layer(repo_full, cfg, layers, gz, diff, src=None, why=""):
    dg = push_blob(repo_full, gz, src=src)
    layers.append({"mediaType": MT_L, "size": len(gz), "digest": dg})
    cfg["rootfs"]["diff_ids"].append(diff)
    if cfg.get("history"):
        cfg["history"].append({"created": "1970-01-01T00:00:00Z", "created_by": why})


def make(repo, tags, files=None, user=None, cmd=None, ports=None):
    repo_full = f"k8s-staging-cri-tools/{repo}" if "/" not in repo and repo != "pause" else repo
    cfg = json.loads(json.dumps(base_c))
    layers = list(base_m["layers"])
    for l in layers:
        if not blob_exists(repo_full, l["digest"]):
            r = req("POST", f"/v2/{repo_full}/blobs/uploads/?mount={l['digest']}&from={base_repo}", data=b"", full=True)
            if getattr(r, "status", getattr(r, "code", 0)) != 201:
                data = req("GET", f"/v2/{base_repo}/blobs/{l['digest']}").read()
                push_blob(repo_full, data, l["digest"])
    # the files every image gets, one layer shared by all (mounted across
    # repositories), then the image's own files
    if not _common:
        _common.extend(layer(COMMON) + (repo_full,))
    gz, diff, src = _common
    add_layer(repo_full, cfg, layers, gz, diff, src=src, why="critest common")
    if files:
        gz, diff = layer(files)
        add_layer(repo_full, cfg, layers, gz, diff, why=f"critest {repo}")
    c = cfg.setdefault("config", {})
    if user is not None:
        c["User"] = user
    if cmd is not None:
        c["Cmd"] = cmd
        c.pop("Entrypoint", None)
    if ports:
        c["ExposedPorts"] = {f"{p}/tcp": {} for p in ports}
    cb = json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    cdg = push_blob(repo_full, cb)
    m = {"schemaVersion": 2, "mediaType": MT_M,
         "config": {"mediaType": MT_C, "size": len(cb), "digest": cdg},
         "layers": layers}
    mb = json.dumps(m, indent=3).encode()
    for t in tags:
        req("PUT", f"/v2/{repo_full}/manifests/{t}", data=mb, headers={"Content-Type": MT_M})
        print(f"{ADDR}/{repo_full}:{t}@{sha(mb)}")


BUSYBOX = open("/bin/busybox", "rb").read()
COMMON = {
    # Debian's busybox-static has no pgrep (critest's execSync-timeout spec runs `pgrep sleep`)
    "bin/pgrep": (b"#!/bin/sh\nr=1\nfor p in $(pidof \"$1\"); do echo $p; r=0; done\nexit $r\n", 0o755),
    # a real file, not a symlink to busybox: MaskedPaths [/bin/ls] must mask ls only
    "bin/ls": (BUSYBOX, 0o755),
    # Debian's busybox-static has no ipcs (HostIpc specs run `ipcs -m`): the segments of this IPC namespace
    "bin/ipcs": (b"#!/bin/sh\necho '------ Shared Memory Segments --------'\nawk 'NR>1{print $1, $2, $8, $3, $4, $7}' /proc/sysvipc/shm\n", 0o755),
}
SHROOT = os.environ.get("SHROOT", "")
if SHROOT:
    # bin/sh replaces busybox-static's symlink: Debian builds busybox-static
    # with FEATURE_SH_STANDALONE, whose sh runs `ls` as an applet in place
    # and never execs /bin/ls (critest's MaskedPaths spec runs `sh -c ls`)
    for d, _, names in os.walk(SHROOT):
        for n in names:
            full = os.path.join(d, n)
            COMMON[os.path.relpath(full, SHROOT)] = (open(full, "rb").read(), 0o755)
PASSWD = (b"root:x:0:0:root:/root:/bin/sh\n"
          b"www-data:x:33:33:www-data:/var/www:/bin/sh\n"
          b"app:x:1000:1000:app:/home/app:/bin/sh\n")
GROUP = (b"root:x:0:\nwww-data:x:33:\napp:x:1000:\n")
www = {"www/index.html": (b"<html>critest</html>\n", 0o644)}

make("e2e-test-images/busybox", ["1.29-2"])
NGX = "mkdir -p /var/run; echo $$ > /var/run/nginx.pid; exec httpd -f -p %d -h /www"
NGINX = {"usr/sbin/nginx": (open(os.environ.get("W", "/var/tmp/critest") + "/imgsrc/nginx", "rb").read(), 0o755)}
make("e2e-test-images/nginx", ["1.14-2"], files=dict(www, **NGINX), cmd=["/usr/sbin/nginx", "80", "-g", "daemon off; master process"], ports=[80])
make("e2e-test-images/httpd", ["2.4.39-4"], files=www, cmd=["sh", "-c", "echo httpd starting; exec httpd -f -p 80 -h /www"], ports=[80])
make("e2e-test-images/nonewprivs", ["1.3"], files={"nnp": (open(os.environ.get("W", "/var/tmp/critest") + "/imgsrc/nnp", "rb").read(), 0o4755)}, cmd=["/nnp"])
make("hostnet-nginx-amd64", ["latest"], files=dict(www, **NGINX), cmd=["/usr/sbin/nginx", "12003", "-g", "daemon off; master process"], ports=[12003])
make("pause", ["3.9"], cmd=["sleep", "2147483647"])
for n in ["test-image-1", "test-image-2", "test-image-3", "test-image-latest", "test-image-digest"]:
    make(n, ["latest"], files={n: (b"", 0o644)})
make("test-image-tags", ["1", "2", "3"], files={"same-image": (b"", 0o644)})
make("test-image-tag", ["test"], files={"test": (b"", 0o644)})
make("test-image-tag", ["all"], files={"all": (b"", 0o644)})
pw = {"etc/passwd": (PASSWD, 0o644), "etc/group": (GROUP, 0o644)}
make("test-image-user-uid", ["latest"], files=pw, user="1002")
make("test-image-user-username", ["latest"], files=pw, user="www-data")
make("test-image-user-uid-group", ["latest"], files=pw, user="1003:1004")
make("test-image-user-username-group", ["latest"], files=pw, user="www-data:1004")
make("test-image-predefined-group", ["latest"], files={
    "etc/passwd": (PASSWD.replace(b"app:x:1000:1000:app:/home/app:/bin/sh\n", b"") + b"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n", 0o644),
    "etc/group": (b"root:x:0:\nwww-data:x:33:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n", 0o644)},
    user="1000")
