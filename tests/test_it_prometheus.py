"""Scrapes a running bfd as Prometheus would (run by test_it_prometheus).

  test_it_prometheus.py URL BFCTL

While a sweep is in flight: GET URL (/metrics), parse it with
prometheus_client's text parser, and check it against `bfctl daemon status
--json` taken just before and just after (only a page whose surrounding
status readings agree is compared): jobs, trials by state, queue length,
slots and GPUs in use, one heartbeat age per running trial, a histogram whose
buckets add up. Needs one comparison with a trial running and points ingested.
Exits 0 when it held, 1 with a message otherwise.
"""
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def status(bfctl):
    out = subprocess.run([bfctl, "daemon", "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def essentials(s):
    return (s["counts"], s["slots"], s["slots_free"], sorted(s["gpus"]), sorted(s["gpus_free"]),
            sorted(r["trial"] for r in s["running"]))


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        ctype = r.headers.get("Content-Type", "")
        if not ctype.startswith("text/plain") or "version=0.0.4" not in ctype:
            fail("Content-Type %r" % ctype)
        text = r.read().decode()
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def one(samples, name, **labels):
    got = [v for l, v in samples.get(name, []) if all(l.get(k) == w for k, w in labels.items())]
    if len(got) != 1:
        fail("%s%s: %d samples" % (name, labels, len(got)))
    return got[0]


def compare(s, m):
    c = s["counts"]
    checks = [("bf_jobs", {}, c["jobs"]),
              ("bf_trials", {"state": "PENDING"}, c["trials_pending"]),
              ("bf_trials", {"state": "RUNNING"}, c["trials_running"]),
              ("bf_queue_length", {}, c["trials_pending"]),
              ("bf_slots", {}, s["slots"]),
              ("bf_slots_used", {}, s["slots"] - s["slots_free"]),
              ("bf_gpus", {}, len(s["gpus"])),
              ("bf_gpus_used", {}, len(s["gpus"]) - len(s["gpus_free"])),
              ("bf_running_trials", {}, len(s["running"]))]
    for name, labels, want in checks:
        got = one(m, name, **labels)
        if got != want:
            fail("%s%s = %s, bfctl daemon status says %s" % (name, labels, got, want))
    ages = {int(l["trial"]): v for l, v in m.get("bf_trial_heartbeat_age_seconds", [])}
    running = {r["trial"] for r in s["running"]}
    if set(ages) != running:
        fail("heartbeat ages for trials %s, running %s" % (sorted(ages), sorted(running)))
    if any(not (0 <= v < 60) for v in ages.values()):
        fail("heartbeat ages %s" % ages)
    buckets = [(float(l["le"]), v) for l, v in m["bf_ingest_latency_seconds_bucket"]]
    counts = [v for _, v in sorted(buckets)]
    if counts != sorted(counts):
        fail("histogram buckets not cumulative: %s" % buckets)
    if counts[-1] != one(m, "bf_ingest_latency_seconds_count"):
        fail("+Inf bucket %s != count" % counts[-1])


def main():
    url, bfctl = sys.argv[1], sys.argv[2]
    deadline = time.time() + 120
    compared = with_running = 0
    losses = set()
    while time.time() < deadline and with_running < 3:
        s1 = status(bfctl)
        time.sleep(0.3)  # the snapshot is at most 0.25 s old: one taken after s1
        m = scrape(url)
        s2 = status(bfctl)
        if essentials(s1) != essentials(s2):
            continue  # the state moved while we looked: try again
        compare(s2, m)
        compared += 1
        points = one(m, "bf_metric_points_ingested_total")
        if s2["running"] and points > 0:
            with_running += 1
        losses |= {int(l["trial"]) for l, _ in m.get("bf_trial_train_loss", [])}
        if s2["counts"]["trials_pending"] == 0 and not s2["running"]:
            break
    if with_running < 3:
        fail("only %d agreeing pages with a trial running (%d compared)" % (with_running, compared))
    if not losses:
        fail("no bf_trial_train_loss for any running trial")
    for path, code in (("/nothing", 404),):
        try:
            urllib.request.urlopen(url.rsplit("/", 1)[0] + path, timeout=10)
            fail("%s answered 200" % path)
        except urllib.error.HTTPError as e:
            if e.code != code:
                fail("%s answered %d, not %d" % (path, e.code, code))
    print("ok: %d pages agree with bfctl daemon status (%d with trials running); train/loss of "
          "trials %s" % (compared, with_running, sorted(losses)))


if __name__ == "__main__":
    main()
