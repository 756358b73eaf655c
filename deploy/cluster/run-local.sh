#!/usr/bin/env bash
# The deploy/cluster topology without containers (docs/cluster.md,
# "Deploying a cluster"): three nats-server processes in one JetStream
# cluster, one redis-server, three gateways loading deploy/cluster/
# gateway.yaml (addresses overridden by flags: everything on 127.0.0.1),
# and HAProxy in front of MQTT and AMQP with the checks of haproxy.cfg.
# Then it runs the smoke check through HAProxy (test/bench/cluster -smoke)
# and stops everything it started.
#
#   deploy/cluster/run-local.sh            # from the repository root
#
# Needs go, redis-server and haproxy (Debian: apt-get install haproxy
# redis-server); nats-server is built from the module's dependency.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
base=${BASE_PORT:-21000}

echo "building gateway and nats-server into $dir"
(cd "$root" && go build -o "$dir/gateway" ./cmd/gateway && go build -o "$dir/nats-server" github.com/nats-io/nats-server/v2)

routes=""
for i in 1 2 3; do routes+="nats://127.0.0.1:$((base + 60 + i)),"; done
routes=${routes%,}
natsurls=""
for i in 1 2 3; do
	"$dir/nats-server" -a 127.0.0.1 -p $((base + 40 + i)) -m $((base + 50 + i)) -n "nats$i" -js -sd "$dir/js$i" \
		--cluster_name tolsey --cluster "nats://127.0.0.1:$((base + 60 + i))" --routes "$routes" \
		>"$dir/nats$i.log" 2>&1 &
	pids+=($!)
	natsurls+="nats://127.0.0.1:$((base + 40 + i)),"
done
natsurls=${natsurls%,}

redis-server --port $((base + 79)) --bind 127.0.0.1 --save "" --appendonly no >"$dir/redis.log" 2>&1 &
pids+=($!)

for i in 1 2 3; do
	TOLSEY_NODE_ID="gw$i" "$dir/gateway" --config "$root/deploy/cluster/gateway.yaml" \
		--mqtt.listen=127.0.0.1:$((base + i)) --amqp.listen=127.0.0.1:$((base + 10 + i)) \
		--admin.listen=127.0.0.1:$((base + 20 + i)) --data.dir="$dir/gw$i" \
		--retain.redis.url=redis://127.0.0.1:$((base + 79))/0 --bridge.nats.url="$natsurls" \
		--log.format=text >"$dir/gw$i.log" 2>&1 &
	pids+=($!)
done

# haproxy.cfg with the gateways' local addresses (the compose file's
# names and ports are the only difference).
sed -e "s/^\(    default-server .*\) resolvers docker\(.*\)$/\1\2/" \
	-e "/^resolvers docker/,/^$/d" \
	-e "s/bind :1883/bind 127.0.0.1:$((base + 31))/" -e "s/bind :5672/bind 127.0.0.1:$((base + 32))/" \
	-e "s/check port 8088//" \
	"$root/deploy/cluster/haproxy.cfg" >"$dir/haproxy.cfg"
for i in 1 2 3; do
	sed -i -e "s/server gw$i gw$i:1883/server gw$i 127.0.0.1:$((base + i)) check port $((base + 20 + i))/" \
		-e "s/server gw$i gw$i:5672/server gw$i 127.0.0.1:$((base + 10 + i)) check port $((base + 20 + i))/" "$dir/haproxy.cfg"
done
haproxy -c -f "$dir/haproxy.cfg" >/dev/null
haproxy -f "$dir/haproxy.cfg" -db >"$dir/haproxy.log" 2>&1 &
pids+=($!)

ready() { curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1; }
for i in 1 2 3; do
	for _ in $(seq 100); do ready $((base + 20 + i)) && break; sleep 0.2; done
	ready $((base + 20 + i)) || { echo "gw$i not ready"; cat "$dir/gw$i.log"; exit 1; }
done
echo "three gateways ready; NATS cluster: $(curl -fsS "http://127.0.0.1:$((base + 51))/routez" 2>/dev/null | grep -o '"num_routes": *[0-9]*' || true) on nats1"
# HAProxy marks servers up after two checks (inter 2s).
sleep 5
echo "HAProxy: MQTT on 127.0.0.1:$((base + 31)), AMQP on 127.0.0.1:$((base + 32))"
(cd "$root" && go run ./test/bench/cluster -smoke "127.0.0.1:$((base + 31))")
for i in 1 2 3; do
	echo "gw$i /api/v1/cluster: $(curl -fsS -H 'Authorization: Bearer change-me-cluster-token' "http://127.0.0.1:$((base + 20 + i))/api/v1/cluster")"
done
echo "run-local: ok"
