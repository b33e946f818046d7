"""TensorBoard's own reader against bf's event files (run by test_it_tensorboard).

  test_it_tensorboard.py store DB LOGDIR JOB    every scalar of every trial of JOB
      in LOGDIR/NAME-JOB/tTRIAL equals the store's points (same tags, steps,
      wall times, float32 values, no duplicates); the HParams experiment and
      each session's start/end parse and match the trials' params and states.
  test_it_tensorboard.py server LOGDIR JOB     a real TensorBoard server on
      LOGDIR/NAME-JOB (LOGDIR beside bf.db) shows each trial as an HParams
      session with its values and status.
  test_it_tensorboard.py jsonl RUNDIR           the scalars of RUNDIR's event file
      equal RUNDIR/metrics.jsonl (bfworker train, no daemon).

Exits 0 when everything matches, 1 with a message otherwise.
"""
import glob
import json
import math
import os
import sqlite3
import socket
import struct
import subprocess
import sys
import time
import urllib.request

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import api_pb2, metadata as hp_metadata, plugin_data_pb2

KEEP_ALL = {ea.SCALARS: 0, ea.TENSORS: 0}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def load(run_dir):
    acc = ea.EventAccumulator(run_dir, size_guidance=KEEP_ALL, purge_orphaned_data=False)
    acc.Reload()
    return acc


def scalars_of(acc):
    """{tag: [(step, wall_time, value)]} in file order."""
    out = {}
    for tag in acc.Tags()["scalars"]:
        out[tag] = [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)]
    return out


def plugin_data(acc, tag):
    """The HParamsPluginData of tag in this run, or None."""
    try:
        content = acc.PluginTagToContent("hparams")
    except KeyError:
        return None
    if tag not in content:
        return None
    d = plugin_data_pb2.HParamsPluginData()
    d.ParseFromString(content[tag])
    return d


def pb_value(v):
    kind = v.WhichOneof("kind")
    return getattr(v, kind)


def canon(v):
    """One text for a swept value: lists and objects arrive as their JSON text."""
    if isinstance(v, str) and v[:1] in "[{":
        v = json.loads(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = float(v)  # protobuf Values are doubles: seed 1 arrives as 1.0
    return json.dumps(v, sort_keys=True)


def check_store(db, logdir, job):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    name, metric = con.execute("SELECT name, metric_name FROM jobs WHERE id = ?", (job,)).fetchone()
    jobdir = os.path.join(logdir, "%s-%d" % (name, job))
    if not os.path.isdir(jobdir):
        fail("no job folder %s" % jobdir)
    trials = con.execute("SELECT id, params, state FROM trials WHERE job = ? ORDER BY idx",
                         (job,)).fetchall()
    if not trials:
        fail("job %d has no trials" % job)
    # the experiment: every swept key, the job's metric
    exp = plugin_data(load(jobdir), hp_metadata.EXPERIMENT_TAG)
    if exp is None or not exp.HasField("experiment"):
        fail("no HParams experiment in %s" % jobdir)
    e = exp.experiment
    keys = sorted(json.loads(trials[0][1]).keys())
    if sorted(h.name for h in e.hparam_infos) != keys:
        fail("experiment hparams %s, swept keys %s" % ([h.name for h in e.hparam_infos], keys))
    for h in e.hparam_infos:
        seen = sorted({canon(json.loads(t[1])[h.name]) for t in trials})
        if not h.HasField("domain_discrete"):
            fail("hparam %s has no discrete domain" % h.name)
        dom = sorted(canon(pb_value(v)) for v in h.domain_discrete.values)
        if dom != seen:
            fail("hparam %s: domain %s, trials have %s" % (h.name, dom, seen))
    if metric not in [m.name.tag for m in e.metric_infos]:
        fail("experiment metrics %s lack the job's %s" % (list(e.metric_infos), metric))
    state_status = {"COMPLETED": api_pb2.STATUS_SUCCESS, "STOPPED": api_pb2.STATUS_SUCCESS,
                    "FAILED": api_pb2.STATUS_FAILURE, "CANCELLED": api_pb2.STATUS_FAILURE}
    total = 0
    for tid, params, state in trials:
        run = os.path.join(jobdir, "t%d" % tid)
        acc = load(run)
        got = scalars_of(acc)
        want = {}
        for seq, step, nm, value, time in con.execute(
                "SELECT m.seq, m.step, n.name, m.value, m.time FROM metrics m "
                "JOIN metric_names n ON n.id = m.name WHERE m.trial = ? ORDER BY m.seq, n.name",
                (tid,)):
            want.setdefault(nm, []).append((step, time, f32(value)))
        if not want:
            fail("trial %d has no stored points" % tid)
        if sorted(got) != sorted(want):
            fail("trial %d: tags %s, store %s" % (tid, sorted(got), sorted(want)))
        for tag in want:
            g, w = got[tag], want[tag]
            if len(g) != len(w):
                fail("trial %d %s: %d points in TensorBoard, %d stored" % (tid, tag, len(g), len(w)))
            for a, b in zip(g, w):
                same_value = a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))
                if a[0] != b[0] or a[1] != b[1] or not same_value:
                    fail("trial %d %s: TensorBoard %s, store %s" % (tid, tag, a, b))
            total += len(w)
        start = plugin_data(acc, hp_metadata.SESSION_START_INFO_TAG)
        if start is None:
            fail("trial %d: no session_start_info" % tid)
        hp = {k: pb_value(v) for k, v in start.session_start_info.hparams.items()}
        for k, v in json.loads(params).items():
            h = hp.get(k)
            if h is None or canon(h) != canon(v):
                fail("trial %d: hparam %s is %r, params say %r" % (tid, k, h, v))
        if state in state_status:
            end = plugin_data(acc, hp_metadata.SESSION_END_INFO_TAG)
            if end is None or end.session_end_info.status != state_status[state]:
                for fn in sorted(os.listdir(run)):
                    print(fn, os.path.getsize(os.path.join(run, fn)))
                print(open(os.path.join(run, ".bf-progress")).read())
                fail("trial %d (%s): session end %s" % (tid, state, end))
    print("ok: %d trials, %d scalars equal to the store in %s" % (len(trials), total, jobdir))


def check_server(logdir, job):
    """A real TensorBoard server on the job's folder: its HParams backend lists
    one session group per trial, with the trial's values and final status."""
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(logdir, "..", "bf.db"), uri=True)
    name, = con.execute("SELECT name FROM jobs WHERE id = ?", (job,)).fetchone()
    trials = con.execute("SELECT id, params, state FROM trials WHERE job = ?", (job,)).fetchall()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    jobdir = os.path.join(logdir, "%s-%d" % (name, job))
    srv = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", jobdir,
                            "--host", "127.0.0.1", "--port", str(port), "--load_fast=false"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d/data/plugin/hparams/" % port

    def post(path, body):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    try:
        deadline = time.time() + 90
        groups = None
        while time.time() < deadline:
            try:
                exp = post("experiment", {"experimentName": ""})
                groups = post("session_groups", {
                    "experimentName": "", "startIndex": 0, "sliceSize": 1000, "colParams": [],
                    "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                        "STATUS_RUNNING"]})
                if len(groups.get("sessionGroups", [])) >= len(trials):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        if groups is None:
            fail("TensorBoard did not answer on port %d" % port)
    finally:
        srv.kill()
        srv.wait()
    keys = sorted(json.loads(trials[0][1]))
    if sorted(h["name"] for h in exp["hparamInfos"]) != keys:
        fail("TensorBoard's experiment lists %s" % exp["hparamInfos"])
    got = {g["name"]: g for g in groups["sessionGroups"]}
    for tid, params, state in trials:
        g = got.get("t%d" % tid)
        if g is None:
            fail("TensorBoard shows sessions %s, not t%d" % (sorted(got), tid))
        for k, v in json.loads(params).items():
            if canon(g["hparams"].get(k)) != canon(v):
                fail("t%d: TensorBoard shows %s = %r, params %r" % (tid, k, g["hparams"].get(k), v))
        if state == "COMPLETED" and g["sessions"][0]["status"] != "STATUS_SUCCESS":
            fail("t%d: TensorBoard shows status %s" % (tid, g["sessions"][0]["status"]))
        if not g["metricValues"]:
            fail("t%d: no metric values in TensorBoard's HParams table" % tid)
    print("ok: TensorBoard's HParams backend shows %d sessions with their values" % len(trials))


def check_jsonl(run_dir):
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail("%s: %d event files" % (run_dir, len(files)))
    got = scalars_of(load(run_dir))
    want = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            p = json.loads(line)
            for k, v in p.items():
                if k in ("step", "time") or v is None:
                    continue
                want.setdefault(k, []).append((p["step"], f32(v)))
    if sorted(got) != sorted(want):
        fail("tags %s, metrics.jsonl %s" % (sorted(got), sorted(want)))
    n = 0
    for tag in want:
        g = [(s, v) for s, _, v in got[tag]]
        # metrics.jsonl holds the value as 9 digits of text, the event file as
        # float32 of the value itself: one float32 step apart at most when the
        # value was a double (a build without -O3 keeps some in double)
        same = len(g) == len(want[tag]) and all(
            a[0] == b[0] and math.isclose(a[1], b[1], rel_tol=1.2e-7, abs_tol=1e-30)
            for a, b in zip(g, want[tag]))
        if not same:
            fail("%s: TensorBoard %s, metrics.jsonl %s" % (tag, g[:5], want[tag][:5]))
        n += len(g)
    print("ok: %d scalars equal to metrics.jsonl in %s" % (n, run_dir))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "store":
        check_store(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "server":
        check_server(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "jsonl":
        check_jsonl(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
