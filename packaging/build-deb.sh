#!/usr/bin/env bash
# Builds Herald's Debian package from this checkout with only cargo and dpkg-deb (both on any
# Debian machine that builds Herald): no debhelper, no cargo-deb to install. The package holds
# the binary, a default /etc/herald/herald.toml (a conffile), a hardened systemd unit and the
# docs; its maintainer scripts create the `herald` system user.
#
#   packaging/build-deb.sh            # -> target/deb/herald_<version>_<arch>.deb
#   SKIP_BUILD=1 packaging/build-deb.sh   # package an already built target/release/herald
#   PROFILE=debug packaging/build-deb.sh  # the debug build (CI's install test: `cargo test`
#                                         # already built it; a release build costs ~10 min)
set -euo pipefail
profile="${PROFILE:-release}"
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
cd "$root"
if [ -z "${SKIP_BUILD:-}" ]; then
    if [ "$profile" = release ]; then
        cargo build --release --locked --bin herald
    else
        cargo build --locked --bin herald
    fi
fi
binary="$target/$profile/herald"
[ -x "$binary" ] || { echo "build-deb: no $binary" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
arch="$(dpkg --print-architecture)"
stage="$target/deb/stage"
rm -rf "$stage"
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/etc/herald" "$stage/etc/logrotate.d" \
    "$stage/lib/systemd/system" "$stage/usr/share/doc/herald"
install -m 0755 "$binary" "$stage/usr/bin/herald"
strip --strip-debug "$stage/usr/bin/herald" 2>/dev/null || true
install -m 0640 packaging/deb/herald.toml "$stage/etc/herald/herald.toml"
install -m 0644 packaging/deb/herald.service "$stage/lib/systemd/system/herald.service"
install -m 0644 packaging/deb/logrotate "$stage/etc/logrotate.d/herald"
install -m 0644 README.md herald.example.toml "$stage/usr/share/doc/herald/"
# The operator's manual the README links to, as plain Markdown (docs/, without the benchmark
# notebook and the Grafana example).
install -d "$stage/usr/share/doc/herald/docs"
install -m 0644 docs/*.md "$stage/usr/share/doc/herald/docs/"
cat > "$stage/usr/share/doc/herald/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: herald
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
for script in postinst prerm postrm; do
    install -m 0755 "packaging/deb/$script" "$stage/DEBIAN/$script"
done
printf '%s\n' /etc/herald/herald.toml /etc/logrotate.d/herald > "$stage/DEBIAN/conffiles"
size_kb="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: herald
Version: $version
Architecture: $arch
Maintainer: Herald developers <herald@localhost>
Installed-Size: $size_kb
Depends: adduser, libc6, libgcc-s1
Section: mail
Priority: optional
Description: mailing-list server that fans out at network speed
 Herald takes a post for a list and gets a personal copy to every member,
 with VERP and one-click unsubscribe, bounce handling, moderation, DKIM/ARC
 signing, MTA-STS/DANE, a durable spool and live observability.
CONTROL
out="$target/deb/herald_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" >/dev/null
echo "$out"
