#!/usr/bin/env bash
# The Debian package, tried as an operator would: build it, install it on this machine, check
# the systemd unit with systemd-analyze, run the service as the unit does (as user `herald`,
# with only CAP_NET_BIND_SERVICE, bound to 127.0.0.1:25), create a list and post to it over
# SMTP on port 25, then purge the package and check it left nothing but its data.
#
# Needs root (dpkg). Uses the debug build `cargo test` already made unless PROFILE=release.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "package test: needs root for dpkg -i" >&2
    exit 1
fi
if dpkg -s herald >/dev/null 2>&1; then
    echo "package test: a herald package is already installed here; refusing to touch it" >&2
    exit 1
fi

# `cargo test` (run before this in .ci/run) has built target/debug/herald; building it again
# alone would resolve features without the dev-dependencies and recompile the whole graph.
profile="${PROFILE:-debug}"
skip=""
[ -x "${CARGO_TARGET_DIR:-target}/$profile/herald" ] && skip=1
deb="$(PROFILE="$profile" SKIP_BUILD="$skip" packaging/build-deb.sh)"
# What the package and this test need from Debian (present on most machines already).
need=""
command -v systemd-analyze >/dev/null || need="$need systemd"
command -v adduser >/dev/null || need="$need adduser"
command -v setpriv >/dev/null || need="$need util-linux"
command -v logrotate >/dev/null || need="$need logrotate"
command -v pkill >/dev/null || need="$need procps"
if [ -n "$need" ]; then
    apt-get update && apt-get install -y $need
fi
echo "built $deb ($(du -h "$deb" | cut -f1))"
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    dpkg --purge herald >/dev/null 2>&1 || true
    rm -rf /var/lib/herald
    [ -z "${scratch:-}" ] || rm -rf "$scratch"
}
trap cleanup EXIT

dpkg -i "$deb"
getent passwd herald >/dev/null || { echo "FAIL: no herald user" >&2; exit 1; }
[ "$(stat -c %U:%a /var/lib/herald)" = "herald:750" ] || { echo "FAIL: /var/lib/herald $(stat -c %U:%a /var/lib/herald)" >&2; exit 1; }
[ "$(stat -c %U:%G:%a /etc/herald/herald.toml)" = "root:herald:640" ] || { echo "FAIL: config perms" >&2; exit 1; }

echo "== systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
    # systemd only warns about a bad directive ("Failed to parse …, ignoring") and goes on, so
    # any line naming our unit fails the test; lines about the host's other units are not ours.
    verify="$(systemd-analyze verify /lib/systemd/system/herald.service 2>&1)" || true
    if grep -q "herald" <<<"$verify"; then
        echo "FAIL: systemd-analyze verify:" >&2
        echo "$verify" >&2
        exit 1
    fi
else
    echo "FAIL: systemd-analyze missing (apt-get install systemd)" >&2
    exit 1
fi

http="http://127.0.0.1:8025"
if [ -d /run/systemd/system ]; then
    echo "== started by systemd (postinst)"
else
    echo "== no systemd here: starting the service as its unit does"
    setpriv --reuid herald --regid herald --init-groups \
        --inh-caps +net_bind_service --ambient-caps +net_bind_service --bounding-set +net_bind_service \
        --no-new-privs \
        /usr/bin/herald serve --config /etc/herald/herald.toml >/tmp/herald-package.log 2>&1 &
    server_pid=$!
fi
healthy() { python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$http/healthz" 2>/dev/null; }
for _ in $(seq 1 100); do
    healthy && break
    sleep 0.1
done
healthy || { echo "FAIL: the service did not answer"; cat /tmp/herald-package.log 2>/dev/null; exit 1; }
if [ -n "$server_pid" ]; then
    [ "$(ps -o user= -p "$server_pid")" = herald ] || { echo "FAIL: not running as herald" >&2; exit 1; }
fi

echo "== a list and a post over SMTP on port 25"
herald() { /usr/bin/herald --config /etc/herald/herald.toml "$@"; }
herald list create announce@herald.localhost --policy anyone
herald member add announce@herald.localhost reader@example.invalid
python3 - <<'PY'
import smtplib
with smtplib.SMTP("127.0.0.1", 25, timeout=60) as s:
    s.ehlo("ci.localhost")
    msg = ("From: poster@example.invalid\r\nTo: announce@herald.localhost\r\n"
           "Subject: package test\r\nMessage-ID: <package-test@example.invalid>\r\n\r\nHello.\r\n")
    refused = s.sendmail("poster@example.invalid", ["announce@herald.localhost"], msg)
    assert not refused, refused
PY
herald status | tee /tmp/herald-package-status.txt
grep -q "announce@herald.localhost" /tmp/herald-package-status.txt || { echo "FAIL: the post is not in status" >&2; exit 1; }

echo "== logrotate: rename and SIGHUP; the next post's lines go to the new file"
log=/var/lib/herald/log/delivery.log
for _ in $(seq 1 100); do grep -q "package-test@example.invalid\|to=<reader@example.invalid>" "$log" 2>/dev/null && break; sleep 0.1; done
before="$(wc -l < "$log")"
[ "$before" -gt 0 ] || { echo "FAIL: nothing in $log" >&2; exit 1; }
logrotate -f /etc/logrotate.d/herald
[ -s "$log.1" ] || { echo "FAIL: not rotated" >&2; ls -la /var/lib/herald/log >&2; exit 1; }
python3 - <<'PY'
import smtplib
with smtplib.SMTP("127.0.0.1", 25, timeout=60) as s:
    msg = ("From: poster@example.invalid\r\nTo: announce@herald.localhost\r\n"
           "Subject: after rotation\r\nMessage-ID: <package-test-2@example.invalid>\r\n\r\nHello.\r\n")
    assert not s.sendmail("poster@example.invalid", ["announce@herald.localhost"], msg)
PY
for _ in $(seq 1 100); do [ -s "$log" ] && grep -q "to=<reader@example.invalid>" "$log" && break; sleep 0.1; done
grep -q "to=<reader@example.invalid>" "$log" || { echo "FAIL: after SIGHUP, nothing in the new $log" >&2; exit 1; }
[ "$(wc -l < "$log.1")" = "$before" ] || { echo "FAIL: lines went to the rotated file after SIGHUP" >&2; exit 1; }

echo "== backup from the running service, restore into a fresh data directory as root, serve it"
scratch="$(mktemp -d)"
backup_dir="$scratch/backup"
herald backup "$backup_dir" | tee /tmp/herald-package-backup.txt
[ -s "$backup_dir/manifest.json" ] || { echo "FAIL: no manifest in the backup" >&2; exit 1; }
if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" || true; server_pid=""; else systemctl stop herald; fi
mv /var/lib/herald "$scratch/data-before-restore"
install -d -o herald -g herald -m 0750 /var/lib/herald
herald restore "$backup_dir"
owner="$(stat -c %U /var/lib/herald/herald.db)"
[ "$owner" = herald ] || { echo "FAIL: restored files belong to $owner, not herald" >&2; exit 1; }
if [ -d /run/systemd/system ]; then
    systemctl start herald
else
    setpriv --reuid herald --regid herald --init-groups \
        --inh-caps +net_bind_service --ambient-caps +net_bind_service --bounding-set +net_bind_service \
        --no-new-privs \
        /usr/bin/herald serve --config /etc/herald/herald.toml >>/tmp/herald-package.log 2>&1 &
    server_pid=$!
fi
for _ in $(seq 1 100); do healthy && break; sleep 0.1; done
healthy || { echo "FAIL: the restored service did not answer"; cat /tmp/herald-package.log 2>/dev/null; exit 1; }
herald member ls announce@herald.localhost | grep -q reader@example.invalid \
    || { echo "FAIL: the restored server lost the member" >&2; exit 1; }
rm -rf "$scratch"

echo "== purge"
if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" || true; server_pid=""; fi
dpkg --purge herald
[ ! -e /usr/bin/herald ] || { echo "FAIL: binary left behind" >&2; exit 1; }
[ ! -e /lib/systemd/system/herald.service ] || { echo "FAIL: unit left behind" >&2; exit 1; }
[ ! -e /etc/herald/herald.toml ] || { echo "FAIL: config left behind after purge" >&2; exit 1; }
[ ! -e /etc/logrotate.d/herald ] || { echo "FAIL: logrotate snippet left behind after purge" >&2; exit 1; }
if getent passwd herald >/dev/null; then echo "FAIL: user left behind" >&2; exit 1; fi
echo "package test passed"
