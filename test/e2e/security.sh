#!/usr/bin/env bash
# Security end to end with the reference clients (docs/security.md
# "Tests"): users file, ACL and TLS on every listener of a real gateway
# binary, checked by Python paho-mqtt, Qpid Proton (python3-qpid-proton),
# rhea (npm) and Python's ssl module as a TLS 1.0/1.1 client. test/run runs
# it.
#
# Builds the gateway and test/internal/certgen/cmd/certgen, makes a CA, a
# server certificate for 127.0.0.1 and client certificates (good, expired,
# from another CA) in a temp dir (none is committed), writes a users file
# with `gateway passwd` hashes, starts the gateway on free ports with
# mqtt.tls, amqp.tls (clientAuth request: a certificate, when sent, must be
# of the CA) and auth.file, then runs test/e2e/security_mqtt.py,
# test/e2e/amqp/proton_security.py and test/e2e/js/rhea_security.js. Each
# prints one PASS/FAIL line per case; the script exits non-zero on any FAIL.
#
# Environment: KEEP=1 keeps the temp dir (certificates, users file, gateway
# log) for inspection; PROTON_VENV: see "Qpid Proton with Cyrus SASL" below.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-security-e2e.XXXXXX")
gw_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$gw_pid" ]] && kill -0 "$gw_pid" 2>/dev/null; then
    kill -TERM "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
  fi
  if ((rc != 0)) && [[ -f "$tmp/gateway.log" ]]; then
    echo "--- last lines of the gateway log ($tmp/gateway.log)"
    tail -n 40 "$tmp/gateway.log"
  fi
  if [[ -n "${KEEP:-}" ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "FAIL security: $*"; exit 1; }

"$PY" -c 'import proton, paho.mqtt.client' 2>/dev/null ||
  die "python3-qpid-proton and python3-paho-mqtt are needed (apt-get install python3-qpid-proton python3-paho-mqtt)"
command -v node >/dev/null || die "node is needed for the rhea checks"
if [[ ! -d test/e2e/js/node_modules/rhea ]]; then
  (cd test/e2e/js && npm ci --no-audit --no-fund --silent) || die "npm ci in test/e2e/js failed"
fi

# Qpid Proton with Cyrus SASL, for SCRAM-SHA-256. Debian's
# python3-qpid-proton is built without Cyrus (proton.SASL.extended() is
# False) and speaks only PLAIN, EXTERNAL and ANONYMOUS, so the checks run
# under python-qpid-proton built from PyPI's source against libsasl2-dev
# (its build links cyrus_sasl.c when pkg-config finds libsasl2; the SCRAM
# plugin comes from Debian's libsasl2-modules). It is built once into a
# venv under the user's cache that also sees Debian's packages (paho), and
# reused. PROTON_VENV=path uses another venv; PROTON_VENV=system runs with
# Debian's Proton, the SCRAM exchange then reported NOT RUN.
proton_default=${XDG_CACHE_HOME:-$HOME/.cache}/tolsey-e2e/proton-0.40.0-cyrus
proton_venv=${PROTON_VENV:-$proton_default}
has_cyrus() { "$1" -c 'import sys, proton, paho.mqtt.client; sys.exit(0 if proton.SASL.extended() else 1)' 2>/dev/null; }
if [[ $proton_venv == system ]]; then
  client_py=$PY
else
  client_py=$proton_venv/bin/python
  # Two runs at once (two worktrees) build it once: the second waits.
  mkdir -p "$(dirname "$proton_venv")"
  exec 9>"$proton_venv.lock"
  flock 9
  if ! has_cyrus "$client_py"; then
    [[ $proton_venv == "$proton_default" ]] || die "PROTON_VENV=$proton_venv has no Proton with Cyrus SASL"
    pkg-config --exists libsasl2 ||
      die "libsasl2-dev and pkg-config are needed to build Proton with Cyrus SASL for SCRAM-SHA-256 (test/run installs them)"
    echo "building python-qpid-proton 0.40.0 with Cyrus SASL into $proton_venv (once, about a minute and a half)"
    rm -rf "$proton_venv"
    "$PY" -m venv --system-site-packages "$proton_venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$proton_venv/bin/pip" install -q --disable-pip-version-check --no-binary python-qpid-proton \
      python-qpid-proton==0.40.0 >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; die "pip could not build python-qpid-proton 0.40.0"; }
    has_cyrus "$client_py" || die "python-qpid-proton built in $proton_venv without Cyrus SASL (is libsasl2-dev installed?)"
  fi
  exec 9>&-
fi

start=$(date +%s)
echo "building the gateway and certgen"
CGO_ENABLED=0 go build -o "$tmp/gateway" ./cmd/gateway || die "go build ./cmd/gateway failed"
go build -o "$tmp/certgen" ./test/internal/certgen/cmd/certgen || die "go build certgen failed"

pki=$tmp/pki
mkdir "$pki"
"$tmp/certgen" -dir "$pki" -client alice,ghost -expired-cn alice -foreign-cn alice || die "certgen failed"

# Passwords are made here, hashed by the binary under test, and handed to
# the clients on their command line; the file holds only hashes.
alice_pw=alice-$RANDOM$RANDOM
ops_pw=ops-$RANDOM$RANDOM
hash() { printf '%s\n' "$1" | "$tmp/gateway" passwd "${@:2}" || die "gateway passwd failed"; }
alice_hash=$(hash "$alice_pw")
ops_hashes=$(hash "$ops_pw" --scram)
ops_hash=$(sed -n 1p <<<"$ops_hashes")
ops_scram=$(sed -n 2p <<<"$ops_hashes")
[[ $alice_hash == '$2a$'* && $ops_scram == SCRAM-SHA-256* ]] || die "gateway passwd printed something else: $alice_hash / $ops_scram"
# ghost has a certificate of the CA but is not in the file.
cat >"$tmp/users.yaml" <<YAML
users:
  - {name: alice, password: "$alice_hash", groups: [devices]}
  - {name: ops, password: "$ops_hash", scram: "$ops_scram", groups: [admin]}
acl:
  - {allow: [publish, subscribe], topic: "devices/%u/#", groups: [devices]}
  - {deny: [subscribe], topic: "test/nosubscribe"}
  - {allow: [publish, subscribe], topic: "#", users: [ops]}
  - {allow: [publish, subscribe], topic: "sec/#"}
default: deny
YAML

"$tmp/gateway" \
  --mqtt.listen=127.0.0.1:0 \
  --mqtt.tls.listen=127.0.0.1:0 \
  --mqtt.tls.cert="$pki/server.pem" --mqtt.tls.key="$pki/server.key" \
  --mqtt.tls.clientCA="$pki/ca.pem" --mqtt.tls.clientAuth=request \
  --amqp.listen=127.0.0.1:0 \
  --amqp.tls.listen=127.0.0.1:0 \
  --amqp.tls.cert="$pki/server.pem" --amqp.tls.key="$pki/server.key" \
  --amqp.tls.clientCA="$pki/ca.pem" --amqp.tls.clientAuth=request \
  --admin.listen=127.0.0.1:0 \
  --auth.file="$tmp/users.yaml" \
  --auth.allowAnonymous=false \
  --retain.backend=memory \
  --data.dir="$tmp/data" \
  --log.format=text \
  >"$tmp/gateway.log" 2>&1 &
gw_pid=$!

# Bound addresses come from the log ("... listening ... addr=HOST:PORT transport=...").
addr_of() { # $1: log message, $2: transport (empty: the line without one)
  local lines
  lines=$(grep -E "msg=\"$1\"" "$tmp/gateway.log" || true)
  if [[ -n $2 ]]; then lines=$(grep -E " transport=$2( |\$)" <<<"$lines" || true)
  else lines=$(grep -v ' transport=' <<<"$lines" || true); fi
  sed -nE 's/.* addr=([^ ]+).*/\1/p' <<<"$lines" | head -n 1
}
for _ in $(seq 300); do
  kill -0 "$gw_pid" 2>/dev/null || die "the gateway exited during start"
  grep -q 'msg="gateway ready"' "$tmp/gateway.log" && break
  sleep 0.1
done
grep -q 'msg="gateway ready"' "$tmp/gateway.log" || die "no \"gateway ready\" line within 30 s"
mqtt_tls=$(addr_of "mqtt listening" tls)
mqtt_plain=$(addr_of "mqtt listening" tcp)
amqp_tls=$(addr_of "amqp listening" tls)
amqp_plain=$(addr_of "amqp listening" "")
for v in mqtt_tls mqtt_plain amqp_tls amqp_plain; do
  [[ -n ${!v} ]] || die "no address for $v in the gateway log"
done
echo "gateway up: mqtt tls=$mqtt_tls plain=$mqtt_plain, amqp tls=$amqp_tls plain=$amqp_plain"
admin=$(addr_of "admin API listening" "")

rc=0
echo "== Python: paho-mqtt, Qpid Proton $("$client_py" -c 'import proton; print(".".join(map(str, proton.VERSION)))'), ssl (TLS 1.0/1.1)"
timeout 180 "$client_py" test/e2e/security_clients.py --pki "$pki" --mqtt-tls "$mqtt_tls" --amqp-tls "$amqp_tls" \
  --alice-password "$alice_pw" --ops-password "$ops_pw" || rc=1
echo "== rhea (node $(node --version))"
timeout 60 node test/e2e/js/rhea_security.js --amqp "$amqp_tls" --ca "$pki/ca.pem" \
  --user alice --password "$alice_pw" || rc=1

# The refusals above were counted per protocol and reason, and no password
# the clients sent, good or wrong, reached the log.
metrics=$("$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=5).read().decode())' "$admin") ||
  die "GET /metrics failed"
for want in 'protocol="mqtt",reason="bad_password"' 'protocol="mqtt",reason="unknown_user"' 'protocol="mqtt",reason="anonymous"' \
  'protocol="mqtt",reason="unknown_certificate"' 'protocol="mqtt",reason="subscribe_denied"' 'protocol="mqtt",reason="publish_denied"' \
  'protocol="amqp",reason="bad_password"' 'protocol="amqp",reason="unknown_user"'; do
  if grep -E "^tolsey_auth_failures_total\{" <<<"$metrics" | grep -F "$want" | grep -qvE ' 0$'; then
    echo "PASS metrics: tolsey_auth_failures_total{$want} counted"
  else
    echo "FAIL metrics: tolsey_auth_failures_total{$want} missing or 0"
    rc=1
  fi
done
if grep -qF -e "$alice_pw" -e "$ops_pw" "$tmp/gateway.log"; then
  echo "FAIL log: a password the clients sent is in the gateway log"
  rc=1
else
  echo "PASS log: no password in the gateway log"
fi

if ! kill -0 "$gw_pid" 2>/dev/null; then
  echo "FAIL security: the gateway died during the checks"
  rc=1
elif grep -qE '^panic:|fatal error:|DATA RACE' "$tmp/gateway.log"; then
  echo "FAIL security: panic or race in the gateway log"
  rc=1
fi
echo "security: $([[ $rc -eq 0 ]] && echo ok || echo FAILED) in $(($(date +%s) - start)) s"
exit "$rc"
