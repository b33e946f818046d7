"""The dashboard in a real browser (run by test_it_dashboard).

  test_it_dashboard.py URL HOME BFCTL JOB SHOTS DOCS S2S_JOB PARETO_JOB OTHER

URL is bfd's dashboard (http://127.0.0.1:PORT/), HOME its BF_HOME (the
token in HOME/http.token), JOB a sweep running now, SHOTS the folder for
screenshots, DOCS docs/http.md (its pandas example is run as written),
S2S_JOB an S2S sweep whose second trial waits on the first's teacher,
PARETO_JOB a finished sweep of three objectives (budget.range by
train.seed), OTHER a finished sweep of the same objectives (budget.range
by train.batch) to compare it with.
Plays an outside party with Debian's chromium (headless) driven by
python3-selenium, and with plain urllib:

- a request without the token gets 401; a POST with the cookie from
  another origin gets 403 and cancels nothing;
- the trial table lists every trial in the state `bfctl show JOB --json`
  gives (compared when two readings of bfctl around the page agree);
- the curve of a running trial gains points without a reload;
- the docs' pandas example reads the job's trials and points;
- max_parallel set on the page is in the store; a value added to the grid
  axis on the page appends its trial, drop on the page cancels it;
  cancel on the page cancels the job in the store;
- the stage graph page draws every shared stage of the S2S job and who
  waits on whom, as jobs/J/stages says;
- a trial's page links its last checkpoint's files, which download whole;
  a path out of the trial's folder is refused;
- the Pareto page draws one mark per completed trial, its front marks are
  the trials `bfctl results --json` marks pareto, a third objective can be
  put on an axis, hovering a mark names its trial and a click opens it;
- a stream resumed with Last-Event-ID sends the points of the gap (its
  first point of a trial is the one after the last read before);
- pages of the trial list join without gap or repeat, and a thinned curve
  keeps its extremes;
- PARETO_JOB's page opens on its seed groups, each row's trials, n, rank, front
  mark, mean and std as `bfctl results PARETO_JOB --group-by-seed --json`
  says, and its curves page draws the groups' bands; the compare view of
  PARETO_JOB against OTHER shows the rows of `bfctl results PARETO_JOB
  OTHER --json`, matched by budget.range, each difference OTHER - baseline
  (and compare?group_by_seed=1, read in pages of one, the groups of
  `bfctl results PARETO_JOB OTHER --group-by-seed --json`);
  clone on a trial's page makes a one-trial job naming its source, with
  the change.
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
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import Select
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException


DRIVER = []  # the browser, once started: what its page said goes with a failure


def fail(msg):
    print("FAIL:", msg)
    for drv in DRIVER:
        print("the page at", drv.current_url, "said:", drv.find_element(By.TAG_NAME, "body").text[:2000])
        for entry in drv.get_log("browser")[-10:]:
            print("console:", entry.get("message"))
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


def on_element(drv, what, elem_id, action, timeout=20.0):
    """Finds the element by id and does action(element) on it, finding it
    again when the page redrew it in between (a stale reference)."""
    t0 = time.time()
    while True:
        found = drv.find_elements(By.ID, elem_id)
        if found:
            try:
                return action(found[0])
            except StaleElementReferenceException:
                pass
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


def read_sse(resp, want):
    """Records of an open event stream until want(event, data, id) is true:
    returns that record's (event, data, id)."""
    ev, data, rid = None, [], None
    while True:
        line = resp.readline()
        if not line:
            fail("the stream ended")
        line = line.decode().rstrip("\n")
        if line == "":
            if ev and want(ev, "\n".join(data), rid):
                return ev, "\n".join(data), rid
            ev, data, rid = None, [], None
        elif line.startswith("event: "):
            ev = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line.startswith("id: "):
            rid = line[4:]


def check_stream_resume(url, token, job):
    """Reads a points record of a running trial, closes the stream, lets the
    trial log more, and reconnects with the record's id: the first point of
    the trial sent then is the one right after the last read before."""
    path = url + "api/v1/jobs/%d/stream?metric=train/loss" % job
    auth = {"Authorization": "Bearer " + token}
    r = urllib.request.urlopen(urllib.request.Request(path, headers=auth), timeout=30)
    _, data, rid = read_sse(r, lambda e, d, i: e == "points" and i)
    r.close()
    pts = json.loads(data)
    trial = pts[-1]["trial"]
    last = max(p["step"] for p in pts if p["trial"] == trial)
    def steps():
        return [p["step"] for p in get_json(url + "api/v1/trials/%d/points?metric=train/loss"
                                             % trial, token)[0]]
    after = wait_for("points of t%d past step %d" % (trial, last),
                     lambda: [s for s in steps() if s > last][:3] if len(
                         [s for s in steps() if s > last]) >= 3 else None, 30)
    hdr = dict(auth, **{"Last-Event-ID": rid})
    r = urllib.request.urlopen(urllib.request.Request(path, headers=hdr), timeout=30)
    _, data, _ = read_sse(r, lambda e, d, i: e == "points" and any(
        p["trial"] == trial for p in json.loads(d)))
    r.close()
    first = min(p["step"] for p in json.loads(data) if p["trial"] == trial)
    if first != after[0]:
        fail("resumed at step %d of t%d, not %d (the last read was %d): the gap was lost"
             % (first, trial, after[0], last))
    print("stream resumed at t%d step %d after %d" % (trial, first, last))


def check_stages(drv, url, token, s2s, shots):
    """The stage graph page against jobs/J/stages: a box per stage key, a
    row per trial, and the waiting trial shown waiting on the runner."""
    g = wait_for("a trial of the S2S job waiting on a stage", lambda: (
        lambda g: g if any(t["doing"] == "waits" for t in g["trials"]) else None)(
        get_json(url + "api/v1/jobs/%d/stages" % s2s, token)[0]), 40)
    shared = [st for st in g["stages"] if len(st["trials"]) == 2]
    if len(g["stages"]) != 9 or len(shared) != 3:
        fail("%d stages, %d shared by both trials (want 9 and 3): %s"
             % (len(g["stages"]), len(shared), g["stages"]))
    waiter = [t for t in g["trials"] if t["doing"] == "waits"][0]
    drv.get(url + "#/job/%d/stages" % s2s)
    boxes = wait_for("the stage graph", lambda: drv.find_elements(
        By.CSS_SELECTOR, "#stage-graph svg g.stage"))
    if sorted(b.get_attribute("data-key") for b in boxes) != sorted(st["key"] for st in g["stages"]):
        fail("the page draws other stages than jobs/%d/stages gives" % s2s)
    row = drv.find_element(By.CSS_SELECTOR, "#stage-trials tr[data-trial='%d']" % waiter["id"])
    if "waits for" not in row.text or "t%d" % waiter["on"] not in row.text:
        fail("t%d's row says %r, not that it waits for t%d" % (waiter["id"], row.text, waiter["on"]))
    drv.save_screenshot(os.path.join(shots, "job_stages.png"))
    print("stages: %d, t%d waits on t%d" % (len(g["stages"]), waiter["id"], waiter["on"]))


def check_checkpoint_links(drv, url, token, trial, shots):
    """The trial page links its last checkpoint's files; each downloads
    whole with the page's cookie; a path out of the folder is refused."""
    t = wait_for("a checkpoint of t%d" % trial, lambda: (lambda t: t if t["checkpoints"]["last"]
                 else None)(get_json(url + "api/v1/trials/%d" % trial, token)[0]), 30)
    if not t["tensorboard"]["run"].endswith("/t%d" % trial):
        fail("tensorboard run %s" % t["tensorboard"])
    drv.get(url + "#/trial/%d" % trial)
    links = wait_for("checkpoint links", lambda: drv.find_elements(By.CSS_SELECTOR, "#ckpt-last a"))
    if "t%d" % trial not in drv.find_element(By.ID, "tb-run").text:
        fail("no TensorBoard run on the page")
    sizes = {f["name"]: f["size"] for f in t["checkpoints"]["last"]["files"]}
    for a in links:
        code, body = status_of(a.get_attribute("href"), "GET", {"Authorization": "Bearer " + token})
        name = a.text.split(" ")[0]
        if code != 200 or name not in sizes or len(body) < sizes[name]:
            fail("%s gave %d with %d bytes (listed %s)" % (a.get_attribute("href"), code,
                                                           len(body), sizes.get(name)))
    for bad in ("../../http.token", "..%2F..%2Fhttp.token", "/etc/passwd", ".hidden"):
        code, _ = status_of(url + "api/v1/trials/%d/file?path=%s" % (trial, bad), "GET",
                            {"Authorization": "Bearer " + token})
        if code not in (400, 404):
            fail("file?path=%s gave %d" % (bad, code))
    drv.execute_script("document.getElementById('run-links').scrollIntoView()")
    drv.save_screenshot(os.path.join(shots, "trial_checkpoints.png"))
    print("checkpoint links: %d files of step %s" % (len(links), t["checkpoints"]["last"]["step"]))


def check_pareto(drv, url, bfctl, job, shots):
    """The Pareto page of a finished job of three objectives against
    `bfctl results --json`: a mark per completed trial (each ranked by
    bfctl), the front's marks the trials it marks pareto; the y axis set to
    the third objective keeps the marks; hover names a trial, a click
    opens it."""
    res = json.loads(subprocess.run([bfctl, "results", str(job), "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    ranked = {t["id"] for t in res["trials"] if t["rank"] is not None}
    front = {t["id"] for t in res["trials"] if t["pareto"]}
    completed = {t for t, s in bfctl_states(bfctl, job).items() if s == "COMPLETED"}
    if not completed or ranked != completed:
        fail("bfctl results ranks %s, the completed trials are %s" % (sorted(ranked), sorted(completed)))
    drv.get(url + "#/job/%d/pareto" % job)
    def marks():
        return drv.find_elements(By.CSS_SELECTOR, "#pareto svg circle.pt")
    wait_for("the Pareto marks", marks)
    def read():
        ms = marks()
        return (sorted(int(m.get_attribute("data-trial")) for m in ms),
                {int(m.get_attribute("data-trial")) for m in ms
                 if "front" in m.get_attribute("class").split()})
    ids, page_front = read()
    if ids != sorted(completed):
        fail("the Pareto page marks trials %s, the completed ones are %s" % (ids, sorted(completed)))
    if page_front != front:
        fail("the page's front is %s, bfctl results marks %s" % (sorted(page_front), sorted(front)))
    if len(drv.find_elements(By.CSS_SELECTOR, "#pareto path.front-line")) != 1:
        fail("no line joins the front")
    top = marks()[-1]  # drawn last: on top, a front mark
    tid = int(top.get_attribute("data-trial"))
    ActionChains(drv).move_to_element(top).perform()
    wait_for("hover to name t%d" % tid,
             lambda: drv.find_element(By.ID, "pareto-info").text.startswith("t%d " % tid))
    drv.save_screenshot(os.path.join(shots, "job_pareto.png"))
    names = [o["name"] for o in res["objectives"]]
    Select(drv.find_element(By.ID, "pareto-y")).select_by_value(names[2])
    wait_for("the marks redrawn over %s" % names[2], lambda: read() == (ids, page_front))
    top = marks()[-1]
    tid = int(top.get_attribute("data-trial"))
    ActionChains(drv).move_to_element(top).click().perform()
    wait_for("a click to open t%d" % tid, lambda: drv.current_url.endswith("#/trial/%d" % tid))
    print("pareto: %d marks, front %s (bfctl results agrees)" % (len(ids), sorted(front)))


def bfctl_json(bfctl, *args):
    return json.loads(subprocess.run([bfctl] + [str(a) for a in args] + ["--json"], check=True,
                                     capture_output=True, text=True).stdout)


def same(x, y):
    """A page's value (the text of a double) and bfctl's (12 digits)."""
    if x in ("", None) or y is None:
        return x in ("", None) and y is None
    return abs(float(x) - y) <= 1e-9 * max(1.0, abs(y))


def check_groups_and_compare(drv, url, token, bfctl, seeds, other, shots):
    """The seed groups of job seeds on its page are bfctl's; the compare
    view of seeds against other shows bfctl's rows of the two, matched,
    with differences."""
    cli = bfctl_json(bfctl, "results", seeds, "--group-by-seed")
    names = [o["name"] for o in cli["objectives"]]
    if len(cli["groups"]) != 3 or any(g["n"] != 2 for g in cli["groups"]):
        fail("bfctl results --group-by-seed: %s" % cli)
    drv.get(url + "#/job/%d" % seeds)  # opens on the groups: its trials differ in train.seed
    wait_for("the seed groups", lambda: drv.find_elements(By.CSS_SELECTOR, "#groups tr[data-group]"))
    page = drv.execute_script("""return [...document.querySelectorAll('#groups tr[data-group]')].map(tr => ({
        trials: [...tr.querySelectorAll('td.trials a')].map(a => Number(a.textContent.slice(1))),
        n: Number(tr.querySelector('td.n').textContent), rank: tr.dataset.rank,
        front: tr.querySelector('td.front-mark').textContent !== '',
        objs: Object.fromEntries([...tr.querySelectorAll('td.obj')].map(td =>
            [td.dataset.objective, [td.dataset.mean, td.dataset.std]]))}))""")
    if len(page) != len(cli["groups"]):
        fail("%d group rows on the page, bfctl %d" % (len(page), len(cli["groups"])))
    for p, g in zip(page, cli["groups"]):
        if p["trials"] != g["trials"] or p["n"] != g["n"] or p["front"] != g["pareto"] or \
                p["rank"] != ("" if g["rank"] is None else str(g["rank"])) or \
                not all(same(p["objs"][k][0], g["objectives"][k]["mean"]) and
                        same(p["objs"][k][1], g["objectives"][k]["std"]) for k in names):
            fail("group row %s, bfctl %s" % (p, g))
    drv.save_screenshot(os.path.join(shots, "job_groups.png"))
    drv.get(url + "#/job/%d/curves" % seeds)
    band = wait_for("the groups' bands", lambda: drv.find_elements(By.ID, "band"))[0]
    wait_for("points on the bands", lambda: int(band.get_attribute("data-points") or 0) > 0)
    wait_for("the bands drawn", lambda: drv.find_elements(By.CSS_SELECTOR, "#band canvas"))
    drv.save_screenshot(os.path.join(shots, "job_group_curves.png"))
    print("seed groups: %d rows as bfctl's" % len(page))

    cli = bfctl_json(bfctl, "results", seeds, other)
    want = sorted((r["job"], r["id"], r["match"]) for r in cli["trials"])
    vals = {r["id"]: r["objectives"] for r in cli["trials"]}
    drv.get(url + "#/compare/%d/%d" % (seeds, other))
    wait_for("the compare table", lambda: drv.find_elements(By.CSS_SELECTOR, "#compare tr[data-match]"))
    rows = drv.execute_script("""return [...document.querySelectorAll('#compare tr[data-match]')].map(tr => ({
        match: tr.dataset.match,
        cells: [...tr.querySelectorAll('td.trial')].map(td => ({job: Number(td.dataset.job),
            id: Number(td.dataset.trials), dim: td.classList.contains('muted')})),
        values: [...tr.querySelectorAll('td[data-value]')].map(td => [td.dataset.objective, td.dataset.value]),
        deltas: [...tr.querySelectorAll('td.delta')].map(td => [td.dataset.objective, td.dataset.delta])}))""")
    shown = sorted({(c["job"], c["id"], r["match"]) for r in rows for c in r["cells"] if c["id"]})
    if shown != want:
        fail("the compare view shows %s, bfctl results %d %d: %s" % (shown, seeds, other, want))
    for r in rows:  # a side without a row of the match shows none (id 0)
        base, oth = r["cells"]
        if (base["id"] and base["job"] != seeds) or (oth["id"] and oth["job"] != other) or \
                "budget.range=" not in r["match"]:
            fail("compare row %s" % r)
        m = len(names)
        for k, (name, v) in enumerate(r["values"]):
            cell = base if k < m else oth
            if not same(v, vals[cell["id"]][name] if cell["id"] else None):
                fail("compare row %s: %s of %s" % (r, name, v))
        for name, d in r["deltas"]:
            a = vals[base["id"]][name] if base["id"] else None
            b = vals[oth["id"]][name] if oth["id"] else None
            if not same(d, None if a is None or b is None else b - a):
                fail("compare row %s: the difference of %s is %s, not %s - %s" % (r, name, d, b, a))
    curve = drv.find_element(By.ID, "compare-curve")
    wait_for("the compared curves", lambda: int(curve.get_attribute("data-points") or 0) > 0)
    wait_for("the compared curves drawn", lambda: drv.find_elements(By.CSS_SELECTOR, "#compare-curve canvas"))
    drv.save_screenshot(os.path.join(shots, "compare.png"))
    # the API alone: seed groups compared, and pages of one joining whole
    cli = bfctl_json(bfctl, "results", seeds, other, "--group-by-seed")
    path = url + "api/v1/compare?jobs=%d,%d&group_by_seed=1&limit=1" % (seeds, other)
    api, after = [], None
    while True:
        page, after = get_json(path + ("&after=" + after if after else ""), token)
        api += page
        if not after:
            break
    if [(r["job"], r["trials"], r["match"], r["rank"]) for r in api] != \
            [(g["job"], g["trials"], g["match"], g["rank"]) for g in cli["groups"]]:
        fail("compare?group_by_seed=1 in pages of 1: %s, bfctl: %s" % (api, cli["groups"]))
    code, body = status_of(url + "api/v1/compare?jobs=%d" % seeds, "GET",
                           {"Authorization": "Bearer " + token})
    if code != 400 or b"2 to 16 job ids" not in body:
        fail("compare of one job gave %d %s" % (code, body))
    print("compare: %d rows as bfctl's, %d lines" % (len(want), len(rows)))
    check_clone(drv, url, token, want[0][1], shots)


def check_clone(drv, url, token, trial, shots):
    """Clone on a trial's page with a change: a new job whose trial names
    its source and has the change in its config, as bfctl clone makes."""
    drv.get(url + "#/trial/%d" % trial)
    on_element(drv, "the clone box", "clone-sets", lambda e: e.send_keys("train.steps=10"))
    on_element(drv, "the clone button", "clone-trial", lambda e: e.click())
    m = wait_for("the cloned job's page", lambda: re.match(r".*#/job/(\d+)/trials$", drv.current_url))
    new = int(m.group(1))
    rows, _ = get_json(url + "api/v1/jobs/%d/trials" % new, token)
    t, _ = get_json(url + "api/v1/trials/%d" % rows[0]["id"], token)
    if len(rows) != 1 or t["source"] != trial or "train.steps: 10\n" not in t["config"]:
        fail("the clone of t%d: %s, %s" % (trial, rows, t))
    drv.get(url + "#/trial/%d" % t["id"])
    wait_for("the clone's source link", lambda: drv.find_elements(By.ID, "source"))
    drv.save_screenshot(os.path.join(shots, "trial_clone.png"))
    code, body = status_of(url + "api/v1/trials/%d/clone?set=nokey" % trial, "POST",
                           {"Authorization": "Bearer " + token})
    if code != 400 or b"expected KEY=VALUE" not in body:
        fail("a clone with set=nokey gave %d %s" % (code, body))
    print("clone: job %d, t%d from t%d" % (new, t["id"], trial))


def bfctl_states(bfctl, job):
    out = subprocess.run([bfctl, "show", str(job), "--json"], check=True,
                         capture_output=True, text=True).stdout
    return {t["id"]: t["state"] for t in json.loads(out)["trials"]}


def main():
    url, home, bfctl, job, shots, docs, s2s, pareto, other = sys.argv[1:10]
    job, s2s, pareto, other = int(job), int(s2s), int(pareto), int(other)
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
    DRIVER.append(drv)
    try:
        check_stream_resume(url, token, job)
        browse(drv, url, token, bfctl, job, s2s, pareto, shots)
        check_groups_and_compare(drv, url, token, bfctl, pareto, other, shots)
    finally:
        drv.quit()
    check_pages_and_thinning(url, token, job)
    print("ok")


def page_states(drv):
    rows = drv.find_elements(By.CSS_SELECTOR, "#trials tr[data-trial]")
    return {int(r.get_attribute("data-trial")): r.get_attribute("data-state") for r in rows}


def browse(drv, url, token, bfctl, job, s2s, pareto, shots):
    # the printed URL carries the token once; then the cookie does
    drv.get(url + "?token=" + token)
    if "token=" in drv.current_url:
        fail("the token stayed in the address bar: " + drv.current_url)
    wait_for("the jobs table", lambda: drv.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]"))
    drv.save_screenshot(os.path.join(shots, "jobs.png"))
    check_pareto(drv, url, bfctl, pareto, shots)
    check_stages(drv, url, token, s2s, shots)

    # every trial, in the state bfctl gives (a reading between two equal bfctl ones)
    drv.get(url + "#/job/%d/trials" % job)
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
    drv.execute_script("document.getElementById('curve').scrollIntoView()")  # below the seed bands
    drv.save_screenshot(os.path.join(shots, "job_curves.png"))

    drv.get(url + "#/job/%d/parallel" % job)
    wait_for("parallel coordinates", lambda: drv.find_elements(By.CSS_SELECTOR, "#parallel svg path.line"))
    drv.save_screenshot(os.path.join(shots, "job_parallel.png"))

    drv.get(url + "#/trial/%d" % running[0])
    wait_for("the trial's log", lambda: any(e.text.strip() for e in drv.find_elements(By.ID, "log")))
    drv.save_screenshot(os.path.join(shots, "trial.png"))
    check_checkpoint_links(drv, url, token, running[0], shots)

    drv.get(url + "#/cluster")
    wait_for("the cluster page", lambda: drv.find_elements(By.ID, "running"))
    drv.save_screenshot(os.path.join(shots, "cluster.png"))

    # max_parallel from the page: the store says so
    drv.get(url + "#/job/%d/trials" % job)
    on_element(drv, "the max_parallel box", "max-parallel", lambda e: (e.clear(), e.send_keys("1")))
    on_element(drv, "the max_parallel button", "set-parallel", lambda e: e.click())
    wait_for("max_parallel 1 in the store", lambda: get_json(
        url + "api/v1/jobs/%d" % job, token)[0]["max_parallel"] == 1)

    # a value added to the grid from the page: one more trial (one axis);
    # dropped from the page: that trial cancelled with the reason
    n0 = get_json(url + "api/v1/jobs/%d" % job, token)[0]["n_trials"]
    on_element(drv, "the add box", "edit-add", lambda e: e.send_keys("train.seed=9"))
    on_element(drv, "the add button", "add-values", lambda e: e.click())
    added = wait_for("the added trial", lambda: [t for t in get_json(
        url + "api/v1/jobs/%d/trials" % job, token)[0] if t.get("params.train.seed") == 9])
    if get_json(url + "api/v1/jobs/%d" % job, token)[0]["n_trials"] != n0 + 1:
        fail("adding train.seed=9 did not make one trial more than %d" % n0)
    drv.save_screenshot(os.path.join(shots, "job_added.png"))
    on_element(drv, "the drop box", "edit-drop", lambda e: e.send_keys("train.seed=9"))
    on_element(drv, "the drop button", "drop-pending", lambda e: e.click())
    wait_for("the added trial dropped", lambda: bfctl_states(bfctl, job)[added[0]["id"]] == "CANCELLED")
    code, body = status_of(url + "api/v1/jobs/%d/edit?add=train.nope=1" % job, "POST",
                           {"Authorization": "Bearer " + token})
    if code != 400 or b"not an axis" not in body:
        fail("adding to a key that is no axis gave %d %s" % (code, body))

    # cancel from the page: the store says so
    on_element(drv, "the cancel button", "cancel-job", lambda e: e.click())
    drv.switch_to.alert.accept()
    wait_for("the job cancelled in the store", lambda: all(
        s in ("CANCELLED", "COMPLETED") for s in bfctl_states(bfctl, job).values())
        and "CANCELLED" in bfctl_states(bfctl, job).values(), 20)
    drv.refresh()
    wait_for("the table to show CANCELLED", lambda: "CANCELLED" in page_states(drv).values())
    drv.save_screenshot(os.path.join(shots, "job_cancelled.png"))


if __name__ == "__main__":
    main()
