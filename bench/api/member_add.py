#!/usr/bin/env python3
"""The API benchmark: members added one request at a time over the admin REST API, by
C concurrent clients with kept-alive connections, as a sign-up backend or a sync script adds
them. Herald (`POST /api/v1/lists/<list>/members`, bearer token) and, when `--mailman` names
Mailman 3 core's `mailman` program (the venv `tests/it/import_mailman3.rs` installs under
target/tmp), Mailman 3 (`POST /3.1/members`, its REST API) in the same run, each on a fresh
SQLite store. Prints each run's requests/s and the median.

    python3 bench/api/member_add.py --herald target/release/herald \
        --mailman target/tmp/mailman3-venv/bin/mailman --members 2000 --clients 8 --runs 3

Every request must answer 201 (anything else stops the run with the answer); the members
are counted back afterwards. Everything listens on 127.0.0.1.
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LIST = "bench@lists.test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, headers, timeout=300, log=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            r.read()
            if r.status < 500:
                return
        except OSError:
            pass
        time.sleep(0.3)
    tail = ""
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            tail = "".join(f.readlines()[-20:])
    sys.exit(f"nothing answered on port {port}\n{tail}")


def hammer(port, path_for, body_for, headers, n, clients):
    """n POSTs over `clients` kept-alive connections; returns (seconds, statuses seen)."""
    counter = iter(range(n))
    lock = threading.Lock()
    failures = []

    def work():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                i = next(counter, None)
            if i is None or failures:
                return
            c.request("POST", path_for(i), body=body_for(i), headers=headers)
            r = c.getresponse()
            data = r.read()
            if r.status != 201:
                failures.append(f"{r.status} {data[:300]!r}")
                return

    threads = [threading.Thread(target=work) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - start
    if failures:
        sys.exit("a request failed: " + failures[0])
    return secs


def herald_run(binary, n, clients, work):
    data = os.path.join(work, "data")
    port = free_port()
    token = "bench-token-0123456789abcdef"
    cfg = os.path.join(work, "herald.toml")
    with open(cfg, "w") as f:
        f.write(
            f'data_dir = "{data}"\nhostname = "bench.test"\n'
            f'secret = "bench-secret-0123456789abcdef0123456789"\n'
            f"[server]\nallow_root = true\n"
            f'[listen]\nsmtp = "127.0.0.1:{free_port()}"\nlmtp = "127.0.0.1:{free_port()}"\n'
            f'http = "127.0.0.1:{port}"\n'
            f'[http]\nadmin_token = "{token}"\n'
        )
    log = open(os.path.join(work, "herald.log"), "w")
    proc = subprocess.Popen([binary, "--config", cfg, "serve"], stdout=log, stderr=log)
    try:
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        wait_http(port, "/api/v1/status", auth)
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("POST", "/api/v1/lists", body=json.dumps({"address": LIST}), headers=auth)
        r = c.getresponse()
        assert r.status == 201, (r.status, r.read())
        r.read()
        secs = hammer(
            port,
            lambda i: f"/api/v1/lists/{LIST}/members",
            lambda i: json.dumps({"address": f"m{i}@d{i % 97}.test", "name": f"Member {i}"}),
            auth,
            n,
            clients,
        )
        c.request("GET", f"/api/v1/lists/{LIST}", headers=auth)
        r = c.getresponse()
        body = json.loads(r.read())
        stored = body.get("members", body.get("member_count"))
        return n / secs, stored
    finally:
        proc.terminate()
        proc.wait(timeout=90)


def mailman_run(binary, n, clients, work):
    var = os.path.join(work, "var")
    port = free_port()
    cfg = os.path.join(work, "mailman.cfg")
    with open(cfg, "w") as f:
        f.write(
            f"[mailman]\nlayout: custom\nsite_owner: admin@lists.test\n\n"
            f"[paths.custom]\nvar_dir: {var}\nbin_dir: {os.path.dirname(binary)}\n\n"
            f"[database]\nclass: mailman.database.sqlite.SQLiteDatabase\n"
            f"url: sqlite:///{var}/mailman.db\n\n"
            f"[webservice]\nhostname: 127.0.0.1\nport: {port}\n"
            f"admin_user: restadmin\nadmin_pass: restpass\n\n"
            f"[mta]\nincoming: mailman.mta.null.NullMTA\noutgoing: mailman.mta.deliver.deliver\n"
            f"smtp_host: 127.0.0.1\nsmtp_port: {free_port()}\n"
            f"lmtp_host: 127.0.0.1\nlmtp_port: {free_port()}\n\n"
            f"[archiver.prototype]\nenable: no\n"
        )
    log = open(os.path.join(work, "mailman.log"), "w")
    subprocess.run([binary, "-C", cfg, "--run-as-root", "start"], stdout=log, stderr=log, check=True)
    try:
        basic = base64.b64encode(b"restadmin:restpass").decode()
        auth = {"Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded"}
        wait_http(port, "/3.1/system/versions", auth, log=os.path.join(var, "logs", "mailman.log"))
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("POST", "/3.1/domains", body="mail_host=lists.test", headers=auth)
        c.getresponse().read()
        c.request("POST", "/3.1/lists", body=f"fqdn_listname={LIST}", headers=auth)
        r = c.getresponse()
        r.read()
        assert r.status == 201, r.status
        list_id = LIST.replace("@", ".")
        from urllib.parse import urlencode

        secs = hammer(
            port,
            lambda i: "/3.1/members",
            lambda i: urlencode({
                "list_id": list_id, "subscriber": f"m{i}@d{i % 97}.test",
                "display_name": f"Member {i}", "pre_verified": "true",
                "pre_confirmed": "true", "pre_approved": "true", "send_welcome_message": "false",
            }),
            auth,
            n,
            clients,
        )
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("GET", f"/3.1/lists/{list_id}", headers=auth)
        stored = json.loads(c.getresponse().read()).get("member_count")
        return n / secs, stored
    finally:
        subprocess.run([binary, "-C", cfg, "--run-as-root", "stop"], stdout=log, stderr=log)
        time.sleep(2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--herald", required=True)
    p.add_argument("--mailman")
    p.add_argument("--members", type=int, default=2000)
    p.add_argument("--mailman-members", type=int, default=None,
                   help="members per Mailman run (default: --members)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    results = {"herald": [], "mailman": []}
    for run in range(a.runs):
        # Alternate, so a noisy minute on the shared machine hits both.
        for name in ["herald", "mailman"]:
            if name == "mailman" and not a.mailman:
                continue
            work = tempfile.mkdtemp(prefix=f"api-bench-{name}-")
            try:
                if name == "herald":
                    rate, stored = herald_run(a.herald, a.members, a.clients, work)
                    expect = a.members
                else:
                    m = a.mailman_members or a.members
                    rate, stored = mailman_run(a.mailman, m, a.clients, work)
                    expect = m
                print(f"run {run + 1} {name}: {rate:,.0f} member adds/s ({stored} members stored, expected {expect})",
                      flush=True)
                results[name].append(rate)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    for name, rates in results.items():
        if rates:
            print(f"{name}: median {statistics.median(rates):,.0f} adds/s over {len(rates)} runs "
                  f"({', '.join(f'{r:,.0f}' for r in rates)})")
    if results["herald"] and results["mailman"]:
        print(f"ratio herald/mailman: {statistics.median(results['herald']) / statistics.median(results['mailman']):.1f}x")


if __name__ == "__main__":
    main()
