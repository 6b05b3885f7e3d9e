#!/usr/bin/env python3
"""post_load.py <list> <n> <rate>: n posts of random 5-200 KB to a list over SMTP at <rate> a
second (a thread each; SMTP_PORT, default 13525), for bench/memory/after-drain.sh. Prints how
many were answered 250 and the p50/p99 of the time from connect to the 250."""
import smtplib, random, sys, time, threading, os
host, port = "127.0.0.1", int(os.environ.get("SMTP_PORT", "13525"))
lst = sys.argv[1]; n = int(sys.argv[2]); rate = float(sys.argv[3])
lat = []
lock = threading.Lock()
def send(i):
    size = random.randint(5_000, 200_000)
    line = ("x" * 70 + "\r\n")
    body = line * (size // 72)
    msg = (f"From: poster{i%20}@outside.test\r\nTo: {lst}\r\nSubject: load {i}\r\n"
           f"Message-ID: <load-{i}-{time.time()}@outside.test>\r\n\r\n{body}")
    t = time.time()
    try:
        with smtplib.SMTP(host, port, timeout=60) as s:
            s.sendmail(f"poster{i%20}@outside.test", [lst], msg)
        with lock: lat.append(time.time() - t)
    except Exception as e:
        print("error", i, e, file=sys.stderr)
t0 = time.time(); ths = []
for i in range(n):
    th = threading.Thread(target=send, args=(i,)); th.start(); ths.append(th)
    delay = t0 + (i + 1) / rate - time.time()
    if delay > 0: time.sleep(delay)
for th in ths: th.join()
lat.sort()
print(f"sent {len(lat)}/{n} in {time.time()-t0:.1f}s p50 {lat[len(lat)//2]*1000:.1f} ms p99 {lat[int(len(lat)*0.99)]*1000:.1f} ms")
