#!/usr/bin/python3
"""A fake `bfworker serve` agent and the workers of its two attempts,
written from docs/protocol.md ("Agents", "Worker socket"), against a real
bfd with `launcher: remote`. It speaks ZMTP 3.0 (the ZeroMQ wire format,
rfc.zeromq.org/spec/23, NULL mechanism, DEALER) over the plain Unix socket
of bfd's ipc:// worker endpoint, so that two messages can go out in one
write and reach bfd in one read: they are then handled in the same round of
its loop, as a busy bfd handles messages that arrive together.

Run by tests/test_it_remote.c:

    test_it_remote_round.py --worker BF_HOME/worker.sock

The agent takes two launches (trials A and C, in that order); then trial
A's metrics and A's `agent_exit` go out in one write, and C's metrics
after. Each trial's points carry values 1000 * trial + seq, so the test
can tell whose points were stored under which trial. Every `ack` must
name its own trial. Exit status 0 when every check passed.
"""

import argparse
import json
import os
import socket
import struct
import sys


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Zmtp:
    """A ZMTP 3.0 DEALER peer on a Unix stream socket."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(30)
        self.s.connect(path)
        self.buf = b""
        # greeting: signature, version 3.0, mechanism NULL, as-server 0, filler
        self.s.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") +
                       b"\0" + b"\0" * 31)
        g = self.read(64)
        check(g[0] == 0xFF and g[9] == 0x7F and g[10] >= 3, "not a ZMTP 3 peer: %r" % g[:11])
        prop = b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
        self.s.sendall(self.frame(b"\x05READY" + prop, command=True))
        flags, body = self.read_frame()
        check(flags & 4 and body.startswith(b"\x05READY"), "no READY from bfd: %r" % body[:20])

    def read(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            check(chunk, "bfd closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    @staticmethod
    def frame(body, more=False, command=False):
        flags = (1 if more else 0) | (4 if command else 0)
        if len(body) > 255:
            return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
        return bytes([flags, len(body)]) + body

    def read_frame(self):
        flags = self.read(1)[0]
        n = struct.unpack(">Q", self.read(8))[0] if flags & 2 else self.read(1)[0]
        return flags, self.read(n)

    @staticmethod
    def message(type_, body):
        frames = [b"bf", b"1", type_.encode(), json.dumps(body).encode()]
        return b"".join(Zmtp.frame(f, more=i < 3) for i, f in enumerate(frames))

    def send(self, *msgs):
        """Sends the messages (from message()) in one write."""
        self.s.sendall(b"".join(msgs))

    def recv(self):
        """The next message as (type, body); commands (PING) are skipped."""
        frames = []
        while True:
            flags, body = self.read_frame()
            if flags & 4:
                continue
            frames.append(body)
            if not flags & 1:
                break
        check(len(frames) == 4 and frames[0] == b"bf" and frames[1] == b"1",
              "bad message from bfd: %r" % frames)
        return frames[2].decode(), json.loads(frames[3])


def points(trial):
    return [{"seq": k, "step": 10 * k, "time": 1.0e9 + k, "values": {"x": 1000 * trial + k}}
            for k in (1, 2, 3)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    z = Zmtp(args.worker)
    agent = {"name": "fake-agent", "pid": os.getpid(), "slots": 2}
    z.send(Zmtp.message("agent_hello", dict(agent, running=[])))
    launches, ok = [], False
    while len(launches) < 2 or not ok:
        t, b = z.recv()
        if t == "agent_ok":
            ok = True
        elif t == "launch":
            launches.append(b)
        else:
            fail("unexpected %s %s" % (t, b))
    for la in launches:
        z.send(Zmtp.message("hello", {"trial": la["trial"], "token": la["token"],
                                      "attempt": la["attempt"], "pid": os.getpid(),
                                      "host": "fake"}))
        t, b = z.recv()
        check(t == "config" and b.get("trial") == la["trial"], "hello: %s %s" % (t, b))
    # bfd's run table holds A first, C after (launch order)
    a, c = launches
    print("trials: A %d, C %d" % (a["trial"], c["trial"]))
    # A's metrics and A's end in one write: one round of bfd's loop
    z.send(Zmtp.message("metrics", {"trial": a["trial"], "token": a["token"],
                                    "points": points(a["trial"])}),
           Zmtp.message("agent_exit", dict(agent, trial=a["trial"], attempt=a["attempt"], code=0,
                                           signal=0)))
    replies = dict(z.recv() for _ in range(2))
    check(replies.get("ack") == {"trial": a["trial"], "seq": 3},
          "A's metrics were acked as %s, want trial %d seq 3" % (replies.get("ack"), a["trial"]))
    check(replies.get("agent_ack") == {"trial": a["trial"], "attempt": a["attempt"]},
          "agent_exit: %s" % replies)
    z.send(Zmtp.message("metrics", {"trial": c["trial"], "token": c["token"],
                                    "points": points(c["trial"])}))
    t, b = z.recv()
    check(t == "ack" and b == {"trial": c["trial"], "seq": 3},
          "C's metrics: %s %s, want ack trial %d seq 3" % (t, b, c["trial"]))
    z.send(Zmtp.message("agent_exit", dict(agent, trial=c["trial"], attempt=c["attempt"], code=0,
                                           signal=0)))
    t, b = z.recv()
    check(t == "agent_ack", "C's agent_exit: %s %s" % (t, b))
    print("ok")


if __name__ == "__main__":
    main()
