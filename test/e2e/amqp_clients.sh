#!/usr/bin/env bash
# Reference AMQP 1.0 clients against a real gateway binary (README, "Test
# it"): Qpid Proton (python3-qpid-proton, with paho-mqtt for
# the cross-protocol checks) and rhea (npm, with mqtt.js).
#
# Builds the gateway, starts it on free ports (anonymous allowed, SASL PLAIN
# user alice:secret, embedded store in a temp dir), waits for /readyz, runs
# test/e2e/amqp/proton_checks.py (with every AMQP type passing AMQP to AMQP
# unchanged) and test/e2e/js/rhea_checks.js, then the
# queue checks test/e2e/amqp/proton_queues.py and test/e2e/js/rhea_queues.js
# (docs/queues.md, "AMQP"; they declare their queues through the admin API)
# and the transaction checks test/e2e/amqp/proton_txn.py (docs/jms.md),
# then the type-by-type matrix test/e2e/amqp/typed_matrix.py (Proton and
# rhea on both ends, large bodies, topics and queues; with a second gateway
# whose amqp.maxFrameSize is 512), stops the gateways on exit. Exits non-zero if any check failed or the
# gateway died.
#
# Environment: KEEP=1 keeps the temp dir (gateway log) for inspection.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

PY=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-amqp-e2e.XXXXXX")
gw_pid="" gw512_pid=""
stop() { # $1: a gateway's pid, or empty
  if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}
cleanup() {
  local rc=$?
  stop "$gw_pid"
  stop "$gw512_pid"
  if ((rc != 0)) && [[ -f "$tmp/gateway.log" ]]; then
    echo "--- last lines of the gateway log ($tmp/gateway.log)"
    tail -n 40 "$tmp/gateway.log"
  fi
  if [[ -n "${KEEP:-}" ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "FAIL amqp_clients: $*"; exit 1; }

# The clients (test/run installs them; say so clearly when run alone).
"$PY" -c 'import proton, paho.mqtt.client' 2>/dev/null ||
  die "python3-qpid-proton and python3-paho-mqtt are needed (apt-get install python3-qpid-proton python3-paho-mqtt)"
command -v node >/dev/null || die "node is needed for the rhea checks"
if [[ ! -d test/e2e/js/node_modules/rhea || ! -d test/e2e/js/node_modules/mqtt ]]; then
  (cd test/e2e/js && npm ci --no-audit --no-fund --silent) || die "npm ci in test/e2e/js failed"
fi

start=$(date +%s)
echo "building the gateway"
CGO_ENABLED=0 go build -o "$tmp/gateway" ./cmd/gateway || die "go build ./cmd/gateway failed"

# An alternate destination for the queue checks (proton_queues.py c_alternate).
cat >"$tmp/gateway.yaml" <<'YAML'
queues:
  declare:
    - name: py-alt-parked
  addresses:
    - prefix: alt/python/
      alternate: py-alt-parked
YAML

"$tmp/gateway" \
  --config="$tmp/gateway.yaml" \
  --mqtt.listen=127.0.0.1:0 \
  --mqtt.ws.listen=127.0.0.1:0 \
  --amqp.listen=127.0.0.1:0 \
  --admin.listen=127.0.0.1:0 \
  --amqp.allowAnonymous=true \
  --amqp.users=alice:secret \
  --amqp.maxTransactionMessages=50 \
  --retain.backend=embedded \
  --data.dir="$tmp/data" \
  --log.format=text \
  >"$tmp/gateway.log" 2>&1 &
gw_pid=$!
# The second gateway, for the type-by-type matrix: max-frame-size 512 (the
# smallest AMQP allows), so that the senders split their messages too;
# queues created on first use.
"$tmp/gateway" \
  --mqtt.listen=127.0.0.1:0 \
  --amqp.listen=127.0.0.1:0 \
  --admin.listen=127.0.0.1:0 \
  --amqp.allowAnonymous=true \
  --amqp.maxFrameSize=512 \
  --queues.autoCreate=true \
  --retain.backend=memory \
  --data.dir="$tmp/data512" \
  --log.format=text \
  >"$tmp/gateway512.log" 2>&1 &
gw512_pid=$!

# Bound addresses come from the log ("... listening ... addr=HOST:PORT").
addr_of() { # $1: log message
  grep -E "msg=\"$1\"" "$tmp/gateway.log" | grep -v 'transport=websocket' | head -n 1 |
    sed -nE 's/.* (addr|address)=("?)([^ "]+)\2.*/\3/p' || true
}
ws_addr() {
  grep -E 'msg="mqtt listening"' "$tmp/gateway.log" | grep 'transport=websocket' | head -n 1 |
    sed -nE 's/.* addr=([^ ]+).*/\1/p' || true
}
ready() {
  "$PY" - "$1" <<'EOF'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen("http://%s/readyz" % sys.argv[1], timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

admin="" mqtt="" amqp="" mqttws=""
for _ in $(seq 150); do
  kill -0 "$gw_pid" 2>/dev/null || die "the gateway exited during start"
  admin=$(addr_of "admin API listening")
  mqtt=$(addr_of "mqtt listening")
  amqp=$(addr_of "amqp listening")
  mqttws=$(ws_addr)
  if [[ -n "$admin" ]] && ready "$admin"; then break; fi
  sleep 0.1
done
[[ -n "$admin" ]] || die "no \"admin API listening\" line in the gateway log"
ready "$admin" || die "GET http://$admin/readyz did not answer 200 within 15 s"
# Read again now that /readyz says every listener is up: the loop may have
# read them in the instant between the admin API's start and theirs.
mqtt=$(addr_of "mqtt listening")
amqp=$(addr_of "amqp listening")
mqttws=$(ws_addr)
[[ -n "$mqtt" ]] || die "no \"mqtt listening\" line in the gateway log"
[[ -n "$mqttws" ]] || die "no \"mqtt listening ... transport=websocket\" line in the gateway log"
[[ -n "$amqp" ]] || die "no \"amqp listening\" line in the gateway log: the gateway does not serve AMQP (amqp.listen=127.0.0.1:0)"
echo "gateway up: amqp=$amqp mqtt=$mqtt admin=$admin"

rc=0
echo "== Qpid Proton (python3-qpid-proton)"
timeout 45 "$PY" test/e2e/amqp/proton_checks.py --amqp "$amqp" --mqtt "$mqtt" --user alice --password secret || rc=1
timeout 45 "$PY" test/e2e/amqp/proton_queues.py --amqp "$amqp" --admin "$admin" || rc=1
timeout 45 "$PY" test/e2e/amqp/proton_txn.py --amqp "$amqp" --admin "$admin" --max-txn 50 || rc=1
echo "== rhea (node $(node --version))"
timeout 45 node test/e2e/js/rhea_checks.js --amqp "$amqp" --mqtt "$mqtt" --mqtt-ws "$mqttws" --user alice --password secret || rc=1
timeout 45 node test/e2e/js/rhea_queues.js --amqp "$amqp" --admin "$admin" || rc=1
echo "== type by type, AMQP -> AMQP (Proton and rhea on both ends)"
amqp512=""
for _ in $(seq 150); do
  amqp512=$(grep -E 'msg="amqp listening"' "$tmp/gateway512.log" | head -n 1 | sed -nE 's/.* addr=([^ ]+).*/\1/p' || true)
  [[ -n "$amqp512" ]] && break
  kill -0 "$gw512_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$amqp512" ]]; then
  echo "FAIL amqp_clients: the gateway with amqp.maxFrameSize=512 did not start"
  tail -n 20 "$tmp/gateway512.log"
  rc=1
else
  timeout 900 "$PY" test/e2e/amqp/typed_matrix.py --amqp "$amqp" --amqp512 "$amqp512" || rc=1
fi

if ! kill -0 "$gw_pid" 2>/dev/null || ! kill -0 "$gw512_pid" 2>/dev/null; then
  echo "FAIL amqp_clients: a gateway died during the checks"
  rc=1
elif grep -qE '^panic:|fatal error:|DATA RACE' "$tmp/gateway.log" "$tmp/gateway512.log"; then
  echo "FAIL amqp_clients: panic or race in the gateway log"
  rc=1
fi
echo "amqp_clients: $([[ $rc -eq 0 ]] && echo ok || echo FAILED) in $(($(date +%s) - start)) s"
exit "$rc"
