#!/usr/bin/env bash
# JMS producer → JMS consumer through the gateway and through ActiveMQ
# Artemis, the same Qpid JMS 2.x program against both in one run (docs/jms.md,
# "Performance"; docs/benchmarks.md, "JMS"):
#
#   test/bench/jms/run.sh [-n 20000] [-np 2000] [-size 1024] [-rounds 2]
#                         [-producers 1] [-consumers 1] [-phases topic-non-persistent,...]
#                         [-async-persistent] [-gateway-arg --key=value] [-profile queue-persistent -profile-dir DIR]
#
# Flags go to the Java program (test/jms/bench, JmsBench.java). This script
# downloads Artemis once (Maven Central, org.apache.activemq:apache-artemis
# bin tar.gz) into ~/.cache/tolsey-artemis, builds the gateway and the
# program, creates an Artemis instance with its own `artemis create`
# (journal on disk, as created: NIO or AIO with the auto-tuned buffer
# timeout; one acceptor on a free 127.0.0.1 port, AMQP enabled, anonymous
# allowed), starts it with `artemis run`, runs the program (which starts
# the gateway itself, embedded queue store on disk) and stops Artemis with
# `artemis stop`. Everything it starts is stopped on exit.
#
# Environment: ARTEMIS_VERSION (2.40.0).
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD

die() { echo "FAIL jms bench: $*" >&2; exit 1; }
command -v mvn >/dev/null || die "maven is needed (apt-get install maven openjdk-17-jdk-headless)"
command -v java >/dev/null || die "a JDK is needed (apt-get install openjdk-17-jdk-headless)"

version=${ARTEMIS_VERSION:-2.40.0}
cache=$HOME/.cache/tolsey-artemis
dist=$cache/apache-artemis-$version
if [[ ! -x $dist/bin/artemis ]]; then
	mkdir -p "$cache"
	tgz=$cache/apache-artemis-$version-bin.tar.gz
	if [[ ! -s $tgz ]]; then
		echo "downloading Artemis $version into $cache" >&2
		mvn -q -B dependency:copy -Dartifact="org.apache.activemq:apache-artemis:$version:tar.gz:bin" \
			-DoutputDirectory="$cache" >&2 || die "could not fetch apache-artemis $version"
	fi
	tar -xzf "$tgz" -C "$cache" || die "could not unpack $tgz"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jms-bench.XXXXXX")
artemis_pid=
cleanup() {
	if [[ -n $artemis_pid ]] && kill -0 "$artemis_pid" 2>/dev/null; then
		"$tmp/artemis/bin/artemis" stop >/dev/null 2>&1 || true
		for _ in $(seq 1 100); do kill -0 "$artemis_pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$artemis_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the gateway and test/jms/bench" >&2
CGO_ENABLED=0 go build -o "$tmp/gateway" ./cmd/gateway || die "go build ./cmd/gateway failed"
(cd test/jms && mvn -q -B -Pbench -pl bench -am compile >&2) || die "mvn compile of test/jms/bench failed"
cp=$root/test/jms/bench/target/classes:$(cat "$root/test/jms/bench/target/classpath.txt")

# A free port: bind 0 and let it go (the broker binds it a moment later).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "creating an Artemis $version instance (its journal auto-tune takes ~15 s)" >&2
"$dist/bin/artemis" create --user bench --password bench --allow-anonymous --silent \
	--no-web --no-amqp-acceptor --no-mqtt-acceptor --no-stomp-acceptor --no-hornetq-acceptor \
	--host 127.0.0.1 --default-port "$port" "$tmp/artemis" >"$tmp/artemis-create.log" 2>&1 ||
	{ cat "$tmp/artemis-create.log" >&2; die "artemis create failed"; }
grep -q "tcp://127.0.0.1:$port?" "$tmp/artemis/etc/broker.xml" || die "the acceptor is not on 127.0.0.1:$port"
"$tmp/artemis/bin/artemis" run >"$tmp/artemis.log" 2>&1 &
artemis_pid=$!
# `artemis run` execs java, so $! is the broker's JVM (its CPU is measured).
ready=
for _ in $(seq 1 600); do
	kill -0 "$artemis_pid" 2>/dev/null || { cat "$tmp/artemis.log" >&2; die "Artemis exited during start"; }
	if grep -q 'AMQ221007' "$tmp/artemis.log"; then ready=1; break; fi # "Server is now active"
	sleep 0.1
done
[[ -n $ready ]] || { cat "$tmp/artemis.log" >&2; die "Artemis was not active within 60 s"; }
echo "Artemis $version active after ${SECONDS} s of this script: $(grep -o '<journal-type>[A-Z]*' "$tmp/artemis/etc/broker.xml" | cut -d'>' -f2) journal," \
	"journal-buffer-timeout $(grep -o '<journal-buffer-timeout>[0-9]*' "$tmp/artemis/etc/broker.xml" | cut -d'>' -f2) ns" >&2

java -Dgateway.bin="$tmp/gateway" -cp "$cp" dev.tolsey.jms.bench.JmsBench \
	-artemis "amqp://127.0.0.1:$port" -artemis-pid "$artemis_pid" "$@"
