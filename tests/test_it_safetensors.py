"""The outside party for test_it_safetensors: Python's own safetensors package
(the reference implementation) and numpy, written from docs/checkpoints.md.

  write PATH      writes a file with safetensors.numpy.save_file
  check-set DIR   reads the checkpoint set bf wrote into DIR and checks it
                  against the documented layout; exits non-zero with a
                  message on the first difference
"""
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def fail(msg):
    print("test_it_safetensors.py: " + msg, file=sys.stderr)
    sys.exit(1)


def write(path):
    tensors = {
        "blocks.0.w": (np.arange(6, dtype=np.float32).reshape(2, 3) * 0.25 - 1.0),
        "blocks.0.b": np.array([1.5, -2.0, 3.25], dtype=np.float32),
        "scale": np.array(3.5, dtype=np.float32),
        "half": np.array([1.0, 2.0], dtype=np.float16),
        "index": np.array([7, -9], dtype=np.int64),
    }
    save_file(tensors, path, metadata={"writer": "python", "note": "x"})


def header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
        data = f.read()
    if (8 + n) % 8:
        fail("%s: data section not 8-byte aligned (header %d bytes)" % (path, n))
    return h, data


def check_file(path, kind, state, base):
    h, data = header(path)
    md = h.pop("__metadata__")
    for k, want in [("format", "bf"), ("kind", kind), ("set_id", state["set_id"]),
                    ("step", str(state["step"])), ("config_hash", state["config_hash"]),
                    ("config", state["config"]), ("n_floats", str(state["n_floats"]))]:
        if md.get(k) != want:
            fail("%s: metadata %s is %r, expected %r" % (path, k, md.get(k), want))
    name = os.path.basename(path)
    if md["data_fnv1a64"] != "%016x" % fnv1a64(data):
        fail("%s: data_fnv1a64 %s does not match the data" % (path, md["data_fnv1a64"]))
    if state["files"][name]["data_fnv1a64"] != md["data_fnv1a64"]:
        fail("%s: state.json records another checksum" % path)
    if state["files"][name]["bytes"] != os.path.getsize(path):
        fail("%s: state.json records %d bytes" % (path, state["files"][name]["bytes"]))
    # every value is base + 0.25 * (its index in the flat buffer); the data
    # section is the buffer (or m then v) verbatim
    nf = state["n_floats"]
    flat = np.frombuffer(data, dtype="<f4")
    bufs = 1 if kind == "model" else 2
    if flat.size != nf * bufs:
        fail("%s: %d floats, expected %d" % (path, flat.size, nf * bufs))
    with safe_open(path, framework="numpy") as f:
        names = list(f.keys())
        if len(names) != len(h):
            fail("%s: safe_open sees %d tensors, the header %d" % (path, len(names), len(h)))
        for n in names:
            t = f.get_tensor(n)
            info = h[n]
            if info["dtype"] != "F32" or list(t.shape) != info["shape"]:
                fail("%s: %s is %s %s" % (path, n, info["dtype"], t.shape))
            off = info["data_offsets"][0] // 4
            buf = 0
            if kind == "optimizer":
                if not (n.startswith("m.") or n.startswith("v.")):
                    fail("%s: %s is neither m. nor v." % (path, n))
                buf = 0 if n.startswith("m.") else 1
                off -= buf * nf
            b = base + 100.0 * (buf + 1) if kind == "optimizer" else base
            want = (b + 0.25 * (off + np.arange(t.size, dtype=np.float64))).astype(np.float32)
            if not np.array_equal(t.reshape(-1), want):
                fail("%s: %s differs: %s vs %s" % (path, n, t.reshape(-1)[:4], want[:4]))
    return {k: v["shape"] for k, v in h.items()}


def check_set(d):
    with open(os.path.join(d, "state.json")) as f:
        state = json.load(f)
    if state["format"] != "bf" or state["format_version"] != 3:
        fail("state.json: format %r version %r" % (state["format"], state["format_version"]))
    cfg = state["config"].encode()
    if state["config_hash"] != "%016x" % fnv1a64(cfg):
        fail("state.json: config_hash is not FNV-1a 64 of the config")
    base = float(state["counters"]["base"])
    model = check_file(os.path.join(d, "model.safetensors"), "model", state, base)
    opt = check_file(os.path.join(d, "optimizer.safetensors"), "optimizer", state, base)
    for n, shape in model.items():
        if opt.get("m." + n) != shape or opt.get("v." + n) != shape:
            fail("optimizer.safetensors: m./v. of %s missing or misshapen" % n)
    if len(opt) != 2 * len(model):
        fail("optimizer.safetensors: %d tensors for %d parameters" % (len(opt), len(model)))
    if sum(int(np.prod(s)) for s in model.values()) != state["n_floats"]:
        fail("state.json: n_floats does not add up")
    print("ok: %d tensors, step %d, set %s" % (len(model), state["step"], state["set_id"]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check-set":
        check_set(sys.argv[2])
    else:
        fail("usage: test_it_safetensors.py write PATH | check-set DIR")
