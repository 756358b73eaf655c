#!/usr/bin/env bash
# End-to-end checks of the MQTT front-end with the reference Python client
# (python3-paho-mqtt): builds the gateway, runs it on free ports with the
# embedded store, runs mqtt_python.py, restarts the gateway on the same data
# directory and checks that retained messages survived. test/run runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."

py=/usr/bin/python3
$py -c 'import paho.mqtt.client' 2>/dev/null || {
  echo "mqtt_python.sh: python3-paho-mqtt is missing (Debian: apt-get install python3-paho-mqtt)" >&2
  exit 1
}

tmp=$(mktemp -d)
gw_pid=
stop_gateway() {
  if [[ -n "$gw_pid" ]]; then
    kill "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
    gw_pid=
  fi
}
cleanup() {
  stop_gateway
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/gateway" ./cmd/gateway

# start_gateway LOG: starts the gateway on port 0 everywhere, waits for the
# bound addresses in its log and for /readyz, and sets mqtt_port, ws_port.
start_gateway() {
  local log=$1 admin= deadline=$((SECONDS + 30))
  "$tmp/gateway" --mqtt.listen=127.0.0.1:0 --mqtt.ws.listen=127.0.0.1:0 \
    --admin.listen=127.0.0.1:0 --amqp.listen= --retain.backend=embedded \
    --data.dir="$tmp/data" --log.format=text --node.id=e2e-python >"$log" 2>&1 &
  gw_pid=$!
  mqtt_port= ws_port=
  while [[ -z "$mqtt_port" || -z "$ws_port" || -z "$admin" ]]; do
    if ! kill -0 "$gw_pid" 2>/dev/null || ((SECONDS > deadline)); then
      echo "mqtt_python.sh: gateway did not start:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.05
    mqtt_port=$(sed -n 's/.*msg="mqtt listening".*addr=[^ ]*:\([0-9]*\) transport=tcp.*/\1/p' "$log")
    ws_port=$(sed -n 's/.*msg="mqtt listening".*addr=[^ ]*:\([0-9]*\) transport=websocket.*/\1/p' "$log")
    admin=$(sed -n 's/.*msg="admin API listening".*addr=\([^ ]*\).*/\1/p' "$log")
  done
  $py - "$admin" <<'EOF' || { echo "mqtt_python.sh: /readyz never answered 200:" >&2; cat "$log" >&2; exit 1; }
import sys, time, urllib.request
deadline = time.monotonic() + 30
while True:
    try:
        with urllib.request.urlopen("http://%s/readyz" % sys.argv[1], timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)
EOF
}

status=0
start_gateway "$tmp/gateway1.log"
$py test/e2e/mqtt_python.py --port "$mqtt_port" --ws-port "$ws_port" --phase main || status=1

# SIGTERM drains and flushes the store; the second gateway opens the same dir.
stop_gateway
start_gateway "$tmp/gateway2.log"
$py test/e2e/mqtt_python.py --port "$mqtt_port" --ws-port "$ws_port" --phase restarted || status=1

if ((status != 0)); then
  echo "mqtt_python.sh: FAILED; gateway logs follow" >&2
  cat "$tmp/gateway1.log" "$tmp/gateway2.log" >&2
fi
exit $status
