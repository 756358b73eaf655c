#!/usr/bin/env bash
# The JMS suite (test/jms, docs/jms.md): Qpid JMS 2.x (jakarta.jms) and 1.x
# (javax.jms) against real gateway processes that the suite starts itself on
# free ports. Builds the gateway once and hands its path to Maven as
# -Dgateway.bin. The first run downloads the dependencies from Maven Central
# into ~/.m2; later runs work offline. Exits non-zero on any test failure.
#
# Environment: MVN_ARGS adds Maven arguments (e.g. -Dtest=BodiesTest).
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "FAIL jms: $*"; exit 1; }
command -v mvn >/dev/null || die "maven is needed (apt-get install maven openjdk-17-jdk-headless)"
command -v javac >/dev/null || die "a JDK is needed (apt-get install openjdk-17-jdk-headless)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-jms.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
CGO_ENABLED=0 go build -o "$tmp/gateway" ./cmd/gateway || die "go build ./cmd/gateway failed"
# The cluster tests (ClusterFailoverTest) run NATS (the go.mod version,
# built from the module cache) and redis-server (test/run installs it).
go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2 || die "go build nats-server failed"
command -v redis-server >/dev/null || die "redis-server is needed (apt-get install redis-server)"
rc=0
(cd test/jms && mvn -q -B test -Dgateway.bin="$tmp/gateway" -Dnats.bin="$tmp/nats-server" ${MVN_ARGS:-}) || rc=1
echo "jms: $([[ $rc -eq 0 ]] && echo ok || echo FAILED) in $(($(date +%s) - start)) s"
exit "$rc"
