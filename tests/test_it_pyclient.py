#!/usr/bin/python3
"""A bf protocol client written from docs/protocol.md alone (pyzmq).

Run by tests/test_it_pyclient.c against a real bfd:

    test_it_pyclient.py --ctl ENDPOINT --worker ENDPOINT --pub ENDPOINT --dir DIR

DIR holds glosses_train.tsv and glosses_val.tsv. The client submits a tiny
BudgetFormer sweep (2 trials), follows it on the PUB socket while polling
`wait`, reads every trial's metrics history and checks it against what was
published, then sends malformed messages to both ROUTER sockets and expects
an `error` reply with the documented code each time. Exit status 0 when every
check passed; a failed check prints what differed and exits 1.
"""

import argparse
import json
import os
import sys
import time
import uuid

import zmq

TIMEOUT_MS = 10000
SETTLE_S = 90.0  # the whole sweep must finish within this


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Client:
    """A DEALER on a ROUTER socket of bfd: 4 frames out, 4 frames back."""

    def __init__(self, ctx, endpoint):
        self.s = ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(endpoint)
        self.req = 0

    def raw(self, frames):
        """Sends frames as they are; returns the reply frames."""
        self.s.send_multipart(frames)
        try:
            return self.s.recv_multipart()
        except zmq.Again:
            fail("no reply within %d ms to %r" % (TIMEOUT_MS, [f[:40] for f in frames]))

    def call(self, type_, expect=None, **body):
        """A request with a fresh req id; returns (type, body) and checks the
        envelope and the req echo. expect: the reply type wanted."""
        self.req += 1
        body["req"] = self.req
        rep = self.raw([b"bf", b"1", type_.encode(), json.dumps(body).encode()])
        check(len(rep) == 4, "%s: reply has %d frames, want 4" % (type_, len(rep)))
        check(rep[0] == b"bf" and rep[1] == b"1", "%s: bad envelope %r" % (type_, rep[:2]))
        rbody = json.loads(rep[3])
        check(isinstance(rbody, dict), "%s: reply body is not an object" % type_)
        check(rbody.get("req") == self.req,
              "%s: reply req %r, sent %d" % (type_, rbody.get("req"), self.req))
        rtype = rep[2].decode()
        if expect is not None and rtype != expect:
            fail("%s: reply %s %s, want %s" % (type_, rtype, rbody, expect))
        return rtype, rbody

    def expect_error(self, frames, code, what):
        rep = self.raw(frames)
        # a request that began with an empty delimiter gets one back
        if frames and frames[0] == b"":
            check(len(rep) >= 1 and rep[0] == b"", "%s: reply lost the empty delimiter" % what)
            rep = rep[1:]
        check(len(rep) == 4, "%s: reply has %d frames, want 4: %r" % (what, len(rep), rep))
        check(rep[0] == b"bf" and rep[1] == b"1", "%s: bad envelope %r" % (what, rep[:2]))
        check(rep[2] == b"error", "%s: reply type %r, want error" % (what, rep[2]))
        body = json.loads(rep[3])
        check(body.get("code") == code,
              "%s: error code %r, want %r (%s)" % (what, body.get("code"), code, body))
        check(isinstance(body.get("message"), str) and body["message"],
              "%s: error without a message" % what)
        return body


def sweep_text(d):
    return (
        "name: pyclient\n"
        "pipeline: budgetformer\n"
        "device: cpu\n"
        "data: {train: %s/glosses_train.tsv, val: %s/glosses_val.tsv}\n"
        "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 300}\n"
        "train: {steps: 40, batch: 8, lr: 2.0e-3, warmup: 2, seed: 3, eval_every: 10,\n"
        "        checkpoint_every: 0, log_every: 1}\n"
        "sweep:\n"
        "  method: grid\n"
        "  parameters:\n"
        "    budget.range: {values: [[0.25, 0.5], [0.5, 1.0]]}\n"
        "metric: {name: val/acc, goal: max}\n"
        "resources: {ranks: 1}\n" % (d, d))


def sync_sub(ctl, sub):
    """docs/protocol.md "Live data without gaps": subscribe to a sync topic
    and repeat `sync` until its message arrives on the SUB."""
    topic = "sync/" + uuid.uuid4().hex
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    deadline = time.time() + 10
    while time.time() < deadline:
        _, rep = ctl.call("sync", expect="synced", topic=topic)
        check(rep.get("topic") == topic, "synced: topic %r, sent %r" % (rep.get("topic"), topic))
        if sub.poll(100):
            while sub.poll(0):
                fr = sub.recv_multipart()
                check(len(fr) == 5, "PUB message with %d frames, want 5" % len(fr))
                if fr[0] == topic.encode():
                    check(fr[3] == b"sync", "sync topic carried type %r" % fr[3])
                    sub.setsockopt(zmq.UNSUBSCRIBE, topic.encode())
                    return
    fail("the sync message never arrived on the PUB socket")


class Live:
    """What the PUB socket delivered: points per trial and events per job."""

    def __init__(self):
        self.points = {}  # trial -> {seq: point}
        self.dups = 0
        self.events = []

    def take(self, fr):
        check(len(fr) == 5, "PUB message with %d frames, want 5" % len(fr))
        topic, proto, ver, type_, body = fr
        check(proto == b"bf" and ver == b"1", "PUB envelope %r" % fr[1:3])
        b = json.loads(body)
        t = topic.decode()
        if t.startswith("trial/"):
            check(type_ == b"metrics", "trial topic with type %r" % type_)
            tid = int(t[len("trial/"):])
            check(b.get("trial") == tid, "topic %s carries trial %r" % (t, b.get("trial")))
            pts = self.points.setdefault(tid, {})
            last = None
            for p in b["points"]:
                if last is not None:
                    check(p["seq"] > last, "published seqs not increasing: %s" % b)
                last = p["seq"]
                if p["seq"] in pts:
                    self.dups += 1
                pts[p["seq"]] = p
        elif t.startswith("job/"):
            check(type_ == b"event", "job topic with type %r" % type_)
            for k in ("job", "trial", "state", "attempt", "time", "message"):
                check(k in b, "event without %r: %s" % (k, b))
            self.events.append(b)

    def drain(self, sub, wait_ms):
        if sub.poll(wait_ms):
            while sub.poll(0):
                self.take(sub.recv_multipart())


def read_history(ctl, trial, limit):
    after, points, pages = 0, [], 0
    while True:
        _, m = ctl.call("metrics", expect="metrics", trial=trial, after=after, limit=limit)
        check(m["trial"] == trial, "metrics: trial %r" % m["trial"])
        check(len(m["points"]) <= limit, "metrics: %d points > limit %d" % (len(m["points"]), limit))
        points += m["points"]
        pages += 1
        if m["points"]:
            check(m["last"] == m["points"][-1]["seq"], "metrics: last %r is not the last seq" % m["last"])
        else:
            check(m["last"] == after, "metrics: empty page, last %r != after %d" % (m["last"], after))
        if not m["more"]:
            break
        check(m["last"] > after, "metrics: more=true without progress")
        after = m["last"]
    return points, pages


def check_malformed(ctx, ctl, ctl_ep, worker_ep, job, tid):
    """Malformed messages to both ROUTER sockets: each gets its documented
    error (job and tid: a finished job and one of its trials)."""
    ctl.expect_error([b"bf", b"1", b"status"], "bad_frames", "3 frames")
    ctl.expect_error([b"bf", b"1", b"status", b"{}", b"extra"], "bad_frames", "5 frames")
    ctl.expect_error([b"xx", b"1", b"status", b"{}"], "bad_frames", "protocol frame xx")
    ctl.expect_error([b"bf", b"1", b"Status!", b"{}"], "bad_frames", "bad type frame")
    e = ctl.expect_error([b"bf", b"2", b"status", b"{}"], "bad_version", "version 2")
    check("1" in e["message"], "bad_version message does not say which versions: %r" % e["message"])
    ctl.expect_error([b"bf", b"1", b"no_such_type", b"{}"], "unknown_type", "unknown type")
    ctl.expect_error([b"bf", b"1", b"status", b"{\"a\": "], "bad_json", "truncated JSON")
    ctl.expect_error([b"bf", b"1", b"status", b"[1, 2]"], "bad_json", "JSON array body")
    e = ctl.expect_error([b"bf", b"1", b"job", json.dumps({"job": "three", "req": 41}).encode()], "bad_field", "job: string id")
    check(e.get("req") == 41, "error reply req %r, sent 41" % e.get("req"))
    ctl.expect_error([b"bf", b"1", b"job", b"{}"], "bad_field", "job: missing id")
    ctl.expect_error([b"bf", b"1", b"metrics", json.dumps({"trial": tid, "limit": 0}).encode()], "bad_field", "metrics: limit 0")
    ctl.expect_error([b"bf", b"1", b"job", json.dumps({"job": 2 ** 60}).encode()], "bad_field", "job: id past 2^53")
    ctl.expect_error([b"bf", b"1", b"job", json.dumps({"job": 999999}).encode()], "not_found", "job: no such job")
    ctl.expect_error([b"bf", b"1", b"cancel", json.dumps({"trial": tid}).encode()], "bad_state", "cancel a finished trial")
    e = ctl.expect_error([b"bf", b"1", b"submit", json.dumps({"sweep": "name: x\nmodel: {layers: two}\n", "file": "bad.yaml"}).encode()],
                         "invalid_sweep", "submit: invalid sweep")
    check(isinstance(e.get("errors"), list) and e["errors"] and e["errors"][0].startswith("bad.yaml:"),
          "invalid_sweep errors: %r" % e.get("errors"))
    big = b'{"pad": "' + b"x" * (9 << 20) + b'"}'
    ctl.expect_error([b"bf", b"1", b"status", big], "too_large", "9 MiB body")
    # REQ-style: an empty delimiter first
    ctl.expect_error([b"", b"bf", b"1", b"nope", b"{}"], "unknown_type", "REQ-style unknown type")

    wk = Client(ctx, worker_ep)
    tok = "0123456789abcdef0123456789abcdef"
    pt = [{"seq": 1, "step": 0, "time": time.time(), "values": {"x": 1.0}}]
    wk.expect_error([b"bf", b"1", b"metrics", json.dumps({"trial": tid, "token": tok, "points": pt}).encode()],
                    "bad_token", "worker: metrics for a finished trial")
    wk.expect_error([b"bf", b"1", b"metrics", json.dumps({"trial": tid, "token": "short", "points": pt}).encode()],
                    "bad_field", "worker: short token")
    wk.expect_error([b"bf", b"1", b"status", b"{}"], "unknown_type", "worker: a control type")
    wk.expect_error([b"bf", b"7", b"hello", b"{}"], "bad_version", "worker: version 7")

    # a REQ socket works as documented
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(ctl_ep)
    req.send_multipart([b"bf", b"1", b"status", b"{}"])
    rep = req.recv_multipart()
    check(rep[:3] == [b"bf", b"1", b"status"], "REQ status: %r" % rep[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--pub", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()

    ctx = zmq.Context()
    ctl = Client(ctx, a.ctl)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(a.pub)
    sub.setsockopt(zmq.SUBSCRIBE, b"trial/")
    sub.setsockopt(zmq.SUBSCRIBE, b"job/")

    # status
    _, st = ctl.call("status", expect="status")
    check(st["version"] == 1, "status: version %r" % st["version"])
    check(st["endpoints"]["ctl"] == a.ctl, "status: ctl endpoint %r != %r" % (st["endpoints"]["ctl"], a.ctl))
    check(st["slots"] >= 1, "status: slots %r" % st["slots"])

    sync_sub(ctl, sub)
    live = Live()

    # submit
    text = sweep_text(a.dir)
    _, sm = ctl.call("submit", expect="submitted", sweep=text, file="pyclient.yaml", cwd=a.dir)
    job = sm["job"]
    check(isinstance(job, int) and job >= 1, "submitted: job %r" % job)
    check(sm["trials"] == 2 and sm["name"] == "pyclient", "submitted: %s" % sm)

    _, js = ctl.call("jobs", expect="jobs")
    mine = [j for j in js["jobs"] if j["id"] == job]
    check(len(mine) == 1, "jobs: job %d listed %d times" % (job, len(mine)))
    check(mine[0]["pipeline"] == "budgetformer" and mine[0]["metric"] == "val/acc" and mine[0]["goal"] == "max",
          "jobs: %s" % mine[0])

    # follow: PUB while polling wait twice a second
    t0 = time.time()
    while True:
        live.drain(sub, 500)
        _, w = ctl.call("wait", expect="wait", job=job)
        if w["done"]:
            break
        if time.time() - t0 > SETTLE_S:
            fail("job %d not done after %.0f s: %s" % (job, SETTLE_S, w))
    check(w["ok"], "wait: job %d finished not ok: %s" % (job, w))
    check(w["states"] == {"COMPLETED": 2}, "wait: states %s" % w["states"])
    live.drain(sub, 300)
    print("pyclient: job %d done in %.1f s" % (job, time.time() - t0))

    _, jd = ctl.call("job", expect="job", job=job)
    trials = jd["trials"]
    check([t["index"] for t in trials] == [0, 1], "job: trial indices %s" % [t["index"] for t in trials])
    for t in trials:
        check(t["job"] == job and t["state"] == "COMPLETED" and t["attempts"] == 1, "job: trial %s" % t)
        check(len(t["hash"]) == 16 and all(c in "0123456789abcdef" for c in t["hash"]), "job: hash %r" % t["hash"])
        check("budget.range" in t["params"], "job: params %s" % t["params"])
        check("val/acc" in t["latest"] and "step" in t["latest"]["val/acc"], "job: latest %s" % t["latest"])
        check(t["best"] is not None and 0.0 <= t["best"] <= 1.0, "job: best %r" % t["best"])

    # history, paged, against what the PUB socket delivered
    for t in trials:
        tid = t["id"]
        pts, pages = read_history(ctl, tid, 7)
        seqs = [p["seq"] for p in pts]
        check(len(pts) >= 40, "trial %d: only %d points" % (tid, len(pts)))
        check(seqs == list(range(1, len(pts) + 1)), "trial %d: seqs not 1..N: %s" % (tid, seqs))
        check(pages == (len(pts) + 6) // 7 or pages == (len(pts) + 6) // 7 + 1,
              "trial %d: %d points in %d pages of 7" % (tid, len(pts), pages))
        names = set()
        for p in pts:
            names.update(p["values"].keys())
        for n in ("train/loss", "val/acc", "val/heads_used"):
            check(n in names, "trial %d: no %s in %s" % (tid, n, sorted(names)))
        steps = [p["step"] for p in pts if "train/loss" in p["values"]]
        check(steps == sorted(steps) and steps[-1] <= 40, "trial %d: train steps %s" % (tid, steps))
        check(all(p["time"] > 1.5e9 for p in pts), "trial %d: a point without a wall time" % tid)
        # the trial summary's latest val/acc is the last one in the history
        last_acc = [p for p in pts if "val/acc" in p["values"]][-1]
        check(t["latest"]["val/acc"]["value"] == last_acc["values"]["val/acc"],
              "trial %d: latest val/acc %r != history %r" % (tid, t["latest"]["val/acc"], last_acc))
        got = live.points.get(tid, {})
        check(sorted(got) == seqs, "trial %d: PUB delivered seqs %s, history has 1..%d" % (tid, sorted(got), len(pts)))
        for p in pts:
            lp = got[p["seq"]]
            check(lp["step"] == p["step"] and lp["values"] == p["values"],
                  "trial %d seq %d: published %s, stored %s" % (tid, p["seq"], lp, p))
        # one page past the end is empty
        _, m = ctl.call("metrics", expect="metrics", trial=tid, after=len(pts))
        check(m["points"] == [] and m["last"] == len(pts) and not m["more"], "metrics past the end: %s" % m)
        print("pyclient: trial %d: %d points, seq 1..%d, %d pages" % (tid, len(pts), len(pts), pages))
    check(live.dups == 0, "PUB delivered %d points twice" % live.dups)
    for t in trials:
        st = [e["state"] for e in live.events if e["trial"] == t["id"]]
        check("RUNNING" in st and st[-1] == "COMPLETED", "events of trial %d: %s" % (t["id"], st))

    # trial, best, export, logs
    tid = trials[0]["id"]
    _, tr = ctl.call("trial", expect="trial", trial=tid)
    check(tr["id"] == tid and tr["job"] == job and tr["state"] == "COMPLETED", "trial: %s" % {k: tr[k] for k in ("id", "job", "state")})
    check("model.d_model: 32" in tr["config"].splitlines(), "trial: config lacks 'model.d_model: 32'")
    check(isinstance(tr["log"], str), "trial: log %r" % tr.get("log"))

    _, b = ctl.call("best", expect="best", job=job, n=1)
    check(b["metric"] == "val/acc" and b["goal"] == "max" and len(b["trials"]) == 1, "best: %s" % b)
    top = max(trials, key=lambda t: t["best"])
    check(b["trials"][0]["best"] == top["best"], "best: %s, job says %s" % (b["trials"][0]["best"], top["best"]))

    _, ex = ctl.call("export", expect="export", job=job)
    check(ex["job"]["id"] == job and len(ex["trials"]) == 2, "export: %s" % ex["job"])
    for et in ex["trials"]:
        hist, _ = read_history(ctl, et["id"], 10000)
        nvals = sum(len(p["values"]) for p in hist)
        check(len(et["metrics"]) == nvals, "export: trial %d has %d values, history %d" % (et["id"], len(et["metrics"]), nvals))
        keys = [(m["seq"], m["name"]) for m in et["metrics"]]
        check(keys == sorted(keys), "export: metrics not in (seq, name) order")
        check(set(et["metrics"][0]) >= {"name", "step", "seq", "value", "time"}, "export: metric %s" % et["metrics"][0])

    _, lg = ctl.call("logs", expect="logs", trial=tid, max=100)
    check(lg["trial"] == tid and lg["offset"] == 0, "logs: %s" % lg)
    check(lg["next"] - lg["offset"] == len(lg["data"].encode()) and lg["next"] <= lg["size"], "logs: %s" % {k: lg[k] for k in ("offset", "next", "size")})

    check_malformed(ctx, ctl, a.ctl, a.worker, job, tid)
    _, st = ctl.call("status", expect="status")
    check(st["pid"] > 0, "status after the bad messages: %s" % st)
    print("pyclient: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
