"""Calls CRI RuntimeService methods on berth's socket with Python grpcio
(gRPC C-core), as a new user would: `unix:` target, default authority, no
generated stubs (the messages are encoded by hand).

Usage: python3 cri_call.py SOCKET METHOD...
(METHOD: Version, Status, ListPodSandbox or ListContainers; the lists
unfiltered)
Prints one line per call: `METHOD ok FIELD=VALUE ...` or `METHOD error CODE DETAILS`.
Exit status 0 when every call succeeded.
"""

import sys

import grpc


def read_varint(data, pos):
    shift = 0
    value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def fields(data):
    """The top-level fields of a protobuf message: {number: [values]}."""
    out = {}
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 2:
            length, pos = read_varint(data, pos)
            value = data[pos:pos + length]
            pos += length
        elif wire == 5:
            value = data[pos:pos + 4]
            pos += 4
        elif wire == 1:
            value = data[pos:pos + 8]
            pos += 8
        else:
            raise ValueError("wire type %d" % wire)
        out.setdefault(number, []).append(value)
    return out


def describe(method, response):
    f = fields(response)
    if method == "Version":
        # VersionResponse: 1 version, 2 runtime_name, 3 runtime_version, 4 runtime_api_version
        names = {1: "version", 2: "runtime_name", 3: "runtime_version", 4: "runtime_api_version"}
        return " ".join("%s=%s" % (names[n], f[n][0].decode()) for n in sorted(names) if n in f)
    if method == "Status":
        # StatusResponse: 1 status (RuntimeStatus: 1 repeated RuntimeCondition: 1 type, 2 status)
        conditions = []
        for status in f.get(1, []):
            for cond in fields(status).get(1, []):
                c = fields(cond)
                conditions.append("%s=%s" % (c[1][0].decode(), bool(c.get(2, [0])[0])))
        return " ".join(conditions)
    if method in ("ListPodSandbox", "ListContainers"):
        # 1 repeated PodSandbox / Container: 1 id, state (3 in a PodSandbox,
        # 6 in a Container; a default 0 is not written)
        state = 3 if method == "ListPodSandbox" else 6
        items = []
        for item in f.get(1, []):
            i = fields(item)
            items.append("%s:%d" % (i[1][0].decode()[:12], i.get(state, [0])[0]))
        return "items=%d %s" % (len(items), " ".join(sorted(items)))
    raise ValueError(method)


def main():
    socket, methods = sys.argv[1], sys.argv[2:]
    ok = True
    with grpc.insecure_channel("unix:" + socket) as channel:
        for method in methods:
            call = channel.unary_unary(
                "/runtime.v1.RuntimeService/" + method,
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            try:
                response = call(b"", timeout=10)
                print("%s ok %s" % (method, describe(method, response)), flush=True)
            except grpc.RpcError as err:
                ok = False
                print("%s error %s %s" % (method, err.code(), err.details()), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
