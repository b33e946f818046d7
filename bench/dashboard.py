"""bench/dashboard.py — how long bfd's dashboard takes on a big job.

  python3 bench/dashboard.py [--build DIR] [--trials N] [--points N] [--json]

An outside party, like the browser test (tests/test_it_dashboard.py): a
store of N trials (default 10,000) and N points (default 1,000,000, four
metrics) written by bench_store, its trials marked COMPLETED so bfd starts
none, served by a real bfd; then, each timed from the request to the
result on screen, in Debian's headless chromium (python3-selenium):
the API's trial list read page by page, a curve's points, the job page
until every trial is in its table, and the curves view until drawn.
Prints a table (or one JSON object with --json) naming the machine.
"""
import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def wait_for(cond, timeout=120.0):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            sys.exit("bench_dashboard: timed out")
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--points", type=int, default=1000000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bf-bench-dash-")
    home = os.path.join(tmp, "home")
    os.mkdir(home, 0o700)
    db = os.path.join(home, "bf.db")
    t0 = time.time()
    subprocess.run([os.path.join(a.build, "bench_store"), "--trials", str(a.trials), "--points",
                    str(a.points), "--reps", "1", "--db", db, "--keep"], check=True,
                   stdout=subprocess.DEVNULL)
    with sqlite3.connect(db) as c:  # a finished sweep: bfd starts nothing
        c.execute("UPDATE trials SET state = 'COMPLETED'")
    fill_s = time.time() - t0
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with open(os.path.join(home, "bfd.yaml"), "w") as f:
        f.write("slots: 1\nhttp: 127.0.0.1:%d\n" % port)
    bfd = subprocess.Popen([os.path.join(a.build, "bfd"), "--home", home, "--quiet"])
    url = "http://127.0.0.1:%d/" % port
    try:
        wait_for(lambda: os.path.exists(os.path.join(home, "http.url")), 20)
        token = open(os.path.join(home, "http.token")).read().strip()
        rows = run(url, token, a.trials)
    finally:
        bfd.terminate()
        bfd.wait()
        shutil.rmtree(tmp)
    out = {"machine": cpu_model(), "trials": a.trials, "points": a.points,
           "fill_s": round(fill_s, 1), "timings_s": rows}
    if a.json:
        print(json.dumps(out))
        return
    print("bench_dashboard on %s: %d trials, %d points (store filled in %.1f s)"
          % (out["machine"], a.trials, a.points, fill_s))
    for k, v in rows.items():
        print("  %-44s %8.3f s" % (k, v))


def run(url, token, n_trials):
    auth = {"Authorization": "Bearer " + token}
    rows = {}
    t0 = time.time()
    after, got = None, 0
    while True:
        q = "api/v1/jobs/1/trials?limit=10000" + ("&after=" + after if after else "")
        with urllib.request.urlopen(urllib.request.Request(url + q, headers=auth)) as r:
            got += len(json.load(r))
            after = r.headers.get("X-Next-After")
        if not after:
            break
    rows["API: every trial (pages of 10,000)"] = time.time() - t0
    if got != n_trials:
        sys.exit("bench_dashboard: read %d trials, not %d" % (got, n_trials))
    t0 = time.time()
    q = "api/v1/jobs/1/points?metric=val/acc&max_points=1000&trials=" + ",".join(
        str(i) for i in range(1, 21))
    with urllib.request.urlopen(urllib.request.Request(url + q, headers=auth)) as r:
        json.load(r)
    rows["API: 20 curves of val/acc (1,000 points each)"] = time.time() - t0
    opts = Options()
    for o in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000"):
        opts.add_argument(o)
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        drv.get(url + "?token=" + token)
        wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]"))
        t0 = time.time()
        drv.get(url + "#/job/1")
        want = "%d of %d trials" % (n_trials, n_trials)
        wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#trials tr[data-trial]") and
                 want in drv.page_source)
        rows["page: job, all trials in the table"] = time.time() - t0
        t0 = time.time()
        drv.find_element(By.CSS_SELECTOR, "#trials th").click()  # sort by id
        wait_for(lambda: "sorted-" in drv.find_element(By.CSS_SELECTOR, "#trials th").get_attribute("class"))
        rows["page: sort the table by a column"] = time.time() - t0
        t0 = time.time()
        drv.get(url + "#/job/1/curves")
        wait_for(lambda: int((drv.find_elements(By.ID, "curve") or [None])[0].get_attribute("data-points") or 0)
                 if drv.find_elements(By.ID, "curve") else False)
        rows["page: curves of 20 trials drawn"] = time.time() - t0
    finally:
        drv.quit()
    return rows


if __name__ == "__main__":
    main()
