"""The dashboard in a real browser (run by test_it_dashboard).

  test_it_dashboard.py URL HOME BFCTL JOB SHOTS DOCS

URL is bfd's dashboard (http://127.0.0.1:PORT/), HOME its BF_HOME (the
token in HOME/http.token), JOB a sweep running now, SHOTS the folder for
screenshots, DOCS docs/http.md (its pandas example is run as written).
Plays an outside party with Debian's chromium (headless) driven by
python3-selenium, and with plain urllib:

- a request without the token gets 401; a POST with the cookie from
  another origin gets 403 and cancels nothing;
- the trial table lists every trial in the state `bfctl show JOB --json`
  gives (compared when two readings of bfctl around the page agree);
- the curve of a running trial gains points without a reload;
- the docs' pandas example reads the job's trials and points;
- max_parallel set on the page is in the store; cancel on the page
  cancels the job in the store;
- pages of the trial list join without gap or repeat, and a thinned curve
  keeps its extremes.
Screenshots of each page go to SHOTS. Exits 0 when all held, 1 with a
message otherwise.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def wait_for(what, cond, timeout=20.0):
    t0 = time.time()
    while True:
        v = cond()
        if v:
            return v
        if time.time() - t0 > timeout:
            fail("timed out waiting for " + what)
        time.sleep(0.2)


def status_of(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url, token):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r), r.headers.get("X-Next-After")


def check_pages_and_thinning(url, token, job):
    """?limit=1 page by page gives every trial once, in order; a curve asked
    for at most 10 points keeps its lowest and highest (the job has ended:
    the points stand still)."""
    whole, _ = get_json(url + "api/v1/jobs/%d/trials?limit=10000" % job, token)
    ids, after = [], None
    while True:
        page, after = get_json(url + "api/v1/jobs/%d/trials?limit=1%s"
                               % (job, "&after=" + after if after else ""), token)
        ids += [t["id"] for t in page]
        if not after:
            break
    if ids != [t["id"] for t in whole]:
        fail("pages of 1 gave %s, the whole list %s" % (ids, [t["id"] for t in whole]))
    code, body = status_of(url + "api/v1/jobs/%d/trials?limit=0" % job, "GET",
                           {"Authorization": "Bearer " + token})
    if code != 400 or b"limit must be an integer in [1, 10000]" not in body:
        fail("?limit=0 gave %d %s" % (code, body))
    for path in ("jobs/999999/points?metric=train/loss", "trials/999999/points?metric=train/loss",
                 "jobs/999999/metrics", "jobs/999999/trials", "trials/999999"):
        code, body = status_of(url + "api/v1/" + path, "GET", {"Authorization": "Bearer " + token})
        if code != 404 or b"no " not in body:
            fail("GET %s of nothing gave %d %s, not 404" % (path, code, body))
    trial = whole[0]["id"]
    full, _ = get_json(url + "api/v1/trials/%d/points?metric=train/loss&max_points=100000"
                       % trial, token)
    thin, _ = get_json(url + "api/v1/trials/%d/points?metric=train/loss&max_points=10"
                       % trial, token)
    if len(full) <= 10:
        fail("trial %d has only %d points: nothing to thin" % (trial, len(full)))
    vals = [p["value"] for p in thin]
    if len(thin) > 10 or min(vals) != min(p["value"] for p in full) or \
            max(vals) != max(p["value"] for p in full):
        fail("10 of %d points: %s" % (len(full), thin))
    if [p["seq"] for p in thin] != sorted(p["seq"] for p in thin):
        fail("thinned points out of order: %s" % thin)
    print("pages of 1: %d trials; %d points thinned to %d" % (len(ids), len(full), len(thin)))


def bfctl_states(bfctl, job):
    out = subprocess.run([bfctl, "show", str(job), "--json"], check=True,
                         capture_output=True, text=True).stdout
    return {t["id"]: t["state"] for t in json.loads(out)["trials"]}


def main():
    url, home, bfctl, job, shots, docs = sys.argv[1:7]
    job = int(job)
    token = open(os.path.join(home, "http.token")).read().strip()
    os.makedirs(shots, exist_ok=True)

    # no token: 401, on pages, the API and /metrics alike
    for path in ("", "api/v1/jobs", "metrics", "static/app.js"):
        code, _ = status_of(url + path)
        if code != 401:
            fail("GET /%s without the token gave %d, not 401" % (path, code))
    code, _ = status_of(url + "api/v1/jobs?token=" + "0" * len(token))
    if code != 401:
        fail("a wrong token gave %d, not 401" % code)
    code, _ = status_of(url + "api/v1/jobs/%d/cancel" % job, "POST")
    if code != 401:
        fail("POST cancel without the token gave %d, not 401" % code)
    # a cross-origin POST carrying the cookie (what a hostile page makes a browser send)
    host = url.split("/")[2]
    code, body = status_of(url + "api/v1/jobs/%d/cancel" % job, "POST",
                           {"Cookie": "bf_token=" + token, "Origin": "http://evil.example",
                            "Host": host})
    if code != 403:
        fail("a cross-origin POST gave %d, not 403: %s" % (code, body))
    code, body = status_of(url + "api/v1/jobs/%d/cancel" % job, "POST",
                           {"Cookie": "bf_token=" + token, "Referer": "http://evil.example/x",
                            "Host": host})
    if code != 403:
        fail("a POST with a foreign Referer gave %d, not 403" % code)
    if "CANCELLED" in bfctl_states(bfctl, job).values():
        fail("a refused POST cancelled something")

    # the docs' pandas example, as written, against this bfd (once there are points)
    auth = {"Authorization": "Bearer " + token}
    wait_for("the first points", lambda: json.loads(status_of(
        url + "api/v1/jobs/%d/points?metric=train/loss" % job, "GET", auth)[1]))
    text = open(docs).read()
    m = re.search(r"```python\n(# pandas example.*?)```", text, re.S)
    if not m:
        fail("no '# pandas example' block in " + docs)
    env = {"BF_URL": url.rstrip("/"), "BF_TOKEN": token, "BF_JOB": str(job)}
    ns = {}
    os.environ.update(env)
    exec(compile(m.group(1), docs, "exec"), ns)
    trials, points = ns["trials"], ns["points"]
    if len(trials) != len(bfctl_states(bfctl, job)):
        fail("pandas read %d trials, bfctl shows %d" % (len(trials), len(bfctl_states(bfctl, job))))
    if not {"id", "state", "params.train.seed"} <= set(trials.columns):
        fail("the trials frame lacks columns: %s" % list(trials.columns))
    if len(points) == 0 or not {"trial", "step", "value"} <= set(points.columns):
        fail("the points frame is empty or lacks columns: %s" % list(points.columns))
    print("pandas: %d trials, %d points" % (len(trials), len(points)))

    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        browse(drv, url, token, bfctl, job, shots)
    finally:
        drv.quit()
    check_pages_and_thinning(url, token, job)
    print("ok")


def page_states(drv):
    rows = drv.find_elements(By.CSS_SELECTOR, "#trials tr[data-trial]")
    return {int(r.get_attribute("data-trial")): r.get_attribute("data-state") for r in rows}


def browse(drv, url, token, bfctl, job, shots):
    # the printed URL carries the token once; then the cookie does
    drv.get(url + "?token=" + token)
    if "token=" in drv.current_url:
        fail("the token stayed in the address bar: " + drv.current_url)
    wait_for("the jobs table", lambda: drv.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]"))
    drv.save_screenshot(os.path.join(shots, "jobs.png"))

    # every trial, in the state bfctl gives (a reading between two equal bfctl ones)
    drv.get(url + "#/job/%d" % job)
    def agree():
        before = bfctl_states(bfctl, job)
        drv.refresh()
        wait_for("the trial table", lambda: drv.find_elements(By.CSS_SELECTOR, "#trials tr[data-trial]"))
        page = page_states(drv)
        after = bfctl_states(bfctl, job)
        return before == after and page == after
    wait_for("the trial table to agree with bfctl show", agree, 30)
    drv.save_screenshot(os.path.join(shots, "job_trials.png"))

    # the curve grows while the page stays (no reload: a marker survives)
    running = [t for t, s in bfctl_states(bfctl, job).items() if s == "RUNNING"]
    if not running:
        fail("no trial running to watch a curve grow (the sweep ended too soon)")
    drv.get(url + "#/job/%d/curves" % job)
    curve = wait_for("the curve", lambda: drv.find_elements(By.ID, "curve"))[0]
    drv.execute_script("window.bfMarker = 1")
    n0 = wait_for("points on the curve", lambda: int(curve.get_attribute("data-points") or 0))
    wait_for("the curve to gain points", lambda: int(curve.get_attribute("data-points")) > n0, 20)
    if drv.execute_script("return window.bfMarker") != 1:
        fail("the page reloaded")
    print("curve: %d points, then %s" % (n0, curve.get_attribute("data-points")))
    drv.save_screenshot(os.path.join(shots, "job_curves.png"))

    drv.get(url + "#/job/%d/parallel" % job)
    wait_for("parallel coordinates", lambda: drv.find_elements(By.CSS_SELECTOR, "#parallel svg path.line"))
    drv.save_screenshot(os.path.join(shots, "job_parallel.png"))

    drv.get(url + "#/trial/%d" % running[0])
    wait_for("the trial's log", lambda: any(e.text.strip() for e in drv.find_elements(By.ID, "log")))
    drv.save_screenshot(os.path.join(shots, "trial.png"))

    drv.get(url + "#/cluster")
    wait_for("the cluster page", lambda: drv.find_elements(By.ID, "running"))
    drv.save_screenshot(os.path.join(shots, "cluster.png"))

    # max_parallel from the page: the store says so
    drv.get(url + "#/job/%d" % job)
    box = wait_for("the max_parallel box", lambda: drv.find_elements(By.ID, "max-parallel"))[0]
    box.clear()
    box.send_keys("1")
    drv.find_element(By.ID, "set-parallel").click()
    wait_for("max_parallel 1 in the store", lambda: get_json(
        url + "api/v1/jobs/%d" % job, token)[0]["max_parallel"] == 1)

    # cancel from the page: the store says so
    wait_for("the cancel button", lambda: drv.find_elements(By.ID, "cancel-job"))[0].click()
    drv.switch_to.alert.accept()
    wait_for("the job cancelled in the store", lambda: all(
        s in ("CANCELLED", "COMPLETED") for s in bfctl_states(bfctl, job).values())
        and "CANCELLED" in bfctl_states(bfctl, job).values(), 20)
    drv.refresh()
    wait_for("the table to show CANCELLED", lambda: "CANCELLED" in page_states(drv).values())
    drv.save_screenshot(os.path.join(shots, "job_cancelled.png"))


if __name__ == "__main__":
    main()
