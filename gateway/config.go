package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
	bolt "go.etcd.io/bbolt"

	"github.com/tolsey/tolsey/bridge"
	"github.com/tolsey/tolsey/core/tlsconf"
)

// keyKind is how a config value is parsed and checked.
type keyKind int

const (
	kindString keyKind = iota
	kindAddr           // host:port; empty allowed only where optional
	kindInt            // non-negative integer
	kindBytes          // non-negative integer with optional KiB/MiB/GiB suffix
	kindDuration
	kindEnum
	kindBool
	// kindJSON is a structured value (a list of objects): written as YAML in
	// the file, which the loader re-encodes as JSON (never fmt.Sprint), and
	// given as a JSON string in env and flags.
	kindJSON
	// kindFloat is a non-negative decimal number (a rate).
	kindFloat
	// kindList is a list of strings: a YAML list (or a comma-separated
	// string) in the file, comma-separated in env and flags.
	kindList
)

// keyDef documents and validates one configuration key. This table is the
// single source for --help, flags, environment names, the sample YAML and
// validation, so they cannot drift apart.
type keyDef struct {
	name     string
	def      string
	kind     keyKind
	optional bool     // empty value allowed (disables the part)
	enum     []string // for kindEnum
	max      int64    // for kindInt/kindBytes; 0 = no upper bound
	help     string
}

var keyDefs = []keyDef{
	{name: "mqtt.listen", def: "127.0.0.1:1883", kind: kindAddr, help: "MQTT over TCP listen address (port 0 picks a free port)"},
	{name: "mqtt.ws.listen", def: "", kind: kindAddr, optional: true, help: "MQTT over WebSocket listen address (path /mqtt and /); empty disables"},
	{name: "mqtt.tls.listen", def: "", kind: kindAddr, optional: true, help: "MQTT over TLS listen address (8883 by custom; needs mqtt.tls.cert and mqtt.tls.key); empty disables"},
	{name: "mqtt.tls.cert", def: "", kind: kindString, optional: true, help: "PEM certificate chain (leaf first) of the MQTT TLS and WSS listeners; re-read on SIGHUP"},
	{name: "mqtt.tls.key", def: "", kind: kindString, optional: true, help: "PEM private key of mqtt.tls.cert; re-read on SIGHUP"},
	{name: "mqtt.tls.clientCA", def: "", kind: kindString, optional: true, help: "PEM CAs that sign MQTT client certificates (mutual TLS); re-read on SIGHUP"},
	{name: "mqtt.tls.clientAuth", def: "none", kind: kindEnum, enum: []string{"none", "request", "require"}, help: "MQTT client certificates: none, request (verified against mqtt.tls.clientCA if sent), require (needs mqtt.tls.clientCA)"},
	{name: "mqtt.wss.listen", def: "", kind: kindAddr, optional: true, help: "MQTT over WebSocket over TLS listen address (wss://, paths /mqtt and /), served with the mqtt.tls.* files; empty disables"},
	{name: "mqtt.maxPendingWrites", def: "8192", kind: kindInt, max: 1 << 20, help: "outgoing packets queued per MQTT client before new QoS 0 ones are dropped and counted (QoS 1/2 ones are kept); the queue takes memory only while it holds packets"},
	{name: "mqtt.maxInflight", def: "8192", kind: kindInt, max: 65535, help: "QoS 1/2 messages held per MQTT session, in flight or queued while it is offline (beyond it new ones are dropped and counted); costs memory only when used"},
	{name: "mqtt.receiveMaximum", def: "1024", kind: kindInt, max: 65535, help: "QoS 1/2 publishes a client may have unacknowledged towards the gateway (MQTT 5 Receive Maximum)"},
	{name: "mqtt.maxPacketSize", def: "1MiB", kind: kindBytes, max: 268435460, help: "largest MQTT packet accepted, bytes, fixed header included (announced to MQTT 5 clients as Maximum Packet Size; a larger one ends the connection, MQTT 5 with DISCONNECT 0x95); 0 = protocol limit (256 MiB)"},
	{name: "mqtt.maxUserProperties", def: "1024", kind: kindInt, max: 1 << 20, help: "most user properties one MQTT packet may carry (each is 32 bytes once decoded, 5 on the wire: a packet of them, read before login, would otherwise decode to about 6.4 times its size); over it the connection ends, MQTT 5 with DISCONNECT 0x83; 0 = no limit"},
	{name: "mqtt.maxMessageExpiry", def: "0", kind: kindDuration, help: "cap on how long queued session messages live (mochi's 24 h default would purge them); 0 = no cap beyond each message's own expiry"},
	{name: "mqtt.maxKeepAlive", def: "0", kind: kindDuration, help: "longest keep alive an MQTT 5 client may use (longer or none is replaced, and announced as Server Keep Alive); 0 = the client's choice"},
	{name: "mqtt.writeTimeout", def: "30s", kind: kindDuration, help: "how long a write to an MQTT client may wait for it to read before it is disconnected (a subscriber that stopped reading never slows others); 0 = no limit"},
	{name: "mqtt.slowSubscriberStall", def: "5ms", kind: kindDuration, help: "how long a publisher's QoS 0 message may wait without progress for room in a subscriber's full write queue (mqtt.maxPendingWrites) before it is dropped and counted (up to 20 times this while the writer is only late to run); a subscriber that stopped reading holds each publisher once at most this long; 0 = drop at once"},
	{name: "mqtt.connectTimeout", def: "10s", kind: kindDuration, help: "how long a new MQTT connection has to send its whole CONNECT packet"},
	{name: "mqtt.sessions.backend", def: "auto", kind: kindEnum, enum: []string{"auto", "embedded", "redis", "memory"}, help: "where persistent MQTT sessions (clean start 0 / session expiry > 0) are kept, group-committed: embedded (data.dir/sessions.db), redis (retain.redis.url; must answer at start), memory (lost at restart); auto: memory with retain.backend=memory, else embedded"},
	{name: "mqtt.maxSessionExpiry", def: "0", kind: kindDuration, help: "cap on MQTT 5 session expiry for disconnected persistent sessions; 0 = no cap"},
	{name: "mqtt.maxTopicLevels", def: "128", kind: kindInt, max: 1024, help: "most levels in a topic name or filter (at most 1024), in every protocol (MQTT topics, AMQP addresses); over it: SUBACK 0x8F, PUBACK 0x90, MQTT 3.1.1 connection closed, AMQP invalid-field"},
	{name: "mqtt.maxTopicLength", def: "4096", kind: kindBytes, max: 65535, help: "longest topic name or filter in bytes, in every protocol; at most 32768 with retain.backend=embedded (its key limit); refused as for mqtt.maxTopicLevels"},
	{name: "mqtt.maxSubscriptions", def: "10000", kind: kindInt, max: 1 << 24, help: "subscriptions one MQTT client may hold (a resubscribe counts once); a filter beyond it gets SUBACK 0x97 Quota exceeded (MQTT 3.1.1: 0x80); 0 = no limit"},
	{name: "amqp.listen", def: "127.0.0.1:5672", kind: kindAddr, optional: true, help: "AMQP 1.0 listen address; empty disables"},
	{name: "amqp.tls.listen", def: "", kind: kindAddr, optional: true, help: "AMQP 1.0 over TLS (amqps) listen address (5671 by custom; needs amqp.tls.cert and amqp.tls.key); empty disables"},
	{name: "amqp.tls.cert", def: "", kind: kindString, optional: true, help: "PEM certificate chain (leaf first) of the AMQP TLS listener and of the TLS upgrade on amqp.listen (AMQP 1.0 §5.2.1, with amqp.tls.key even without amqp.tls.listen); re-read on SIGHUP"},
	{name: "amqp.tls.key", def: "", kind: kindString, optional: true, help: "PEM private key of amqp.tls.cert; re-read on SIGHUP"},
	{name: "amqp.tls.clientCA", def: "", kind: kindString, optional: true, help: "PEM CAs that sign AMQP client certificates (mutual TLS); re-read on SIGHUP"},
	{name: "amqp.tls.clientAuth", def: "none", kind: kindEnum, enum: []string{"none", "request", "require"}, help: "AMQP client certificates: none, request (verified against amqp.tls.clientCA if sent), require (needs amqp.tls.clientCA)"},
	{name: "amqp.maxMessageSize", def: "16MiB", kind: kindBytes, help: "largest AMQP message accepted, bytes (link max-message-size); 0 = no limit"},
	{name: "amqp.maxFrameSize", def: "65536", kind: kindBytes, max: 1 << 32, help: "largest AMQP frame the gateway accepts (open max-frame-size)"},
	{name: "amqp.idleTimeout", def: "60s", kind: kindDuration, help: "AMQP idle timeout the gateway announces; 0 disables heartbeats"},
	{name: "amqp.allowAnonymous", def: "true", kind: kindBool, help: "accept SASL ANONYMOUS and clients that skip SASL"},
	{name: "amqp.users", def: "", kind: kindString, optional: true, help: "SASL PLAIN users as user:password,user2:password2 (until an auth issue lands)"},
	{name: "amqp.linkBuffer", def: "1000", kind: kindInt, max: 1 << 20, help: "messages queued per AMQP receiving link before new ones are dropped and counted (slow consumer)"},
	{name: "amqp.linkOverflow", def: "drop", kind: kindEnum, enum: []string{"drop", "block"}, help: "what a message finds when an AMQP receiving link's amqp.linkBuffer is full: drop (counted, slow_consumer) or block (the publisher waits up to amqp.linkOverflowWait for room, then drops and counts; docs/amqp-frontend.md); a link may choose with the attach property tolsey:link-overflow"},
	{name: "amqp.linkOverflowWait", def: "100ms", kind: kindDuration, help: "with amqp.linkOverflow=block, the longest a publisher waits for room on one full link that shows no sign of life (a message taken, a delivery settled by its consumer); a link that made one wait in vain drops without waiting until it has drained to half"},
	{name: "amqp.writeTimeout", def: "30s", kind: kindDuration, help: "a client that does not take what the gateway writes to it for this long (a stuck socket, heartbeats included) is disconnected and counted; 0 disables"},
	{name: "amqp.maxSessions", def: "256", kind: kindInt, max: 1 << 16, help: "sessions per AMQP connection (announced as channel-max; a begin above it closes the connection with framing-error)"},
	{name: "amqp.bareAddress", def: "topic", kind: kindEnum, enum: []string{"topic", "queue"}, help: "what an AMQP address with neither prefix (topic://, queue://) nor capability names when no queue of that name exists: topic, or queue (created on first use with queues.autoCreate, as ActiveMQ Artemis, RabbitMQ and Qpid Broker-J do); addresses with MQTT wildcards stay topic filters"},
	{name: "amqp.maxLinksPerConnection", def: "1000", kind: kindInt, max: 1 << 20, help: "links (senders and receivers, over all sessions) per AMQP connection; an attach beyond it is refused with amqp:resource-limit-exceeded; bounds what one message costs one connection"},
	{name: "amqp.maxSelectorLength", def: "4096", kind: kindInt, max: 1 << 20, help: "longest JMS message selector (source filter apache.org:selector-filter:string), bytes; a longer one refuses the link with amqp:invalid-field (docs/jms.md)"},
	{name: "limits.maxConnections", def: "0", kind: kindInt, max: 1 << 30, help: "open client connections in all, over every MQTT (TCP, WebSocket, TLS, WSS) and AMQP listener; beyond it: MQTT 5 CONNACK 0x97, 3.1.1 code 3, AMQP close amqp:resource-limit-exceeded (docs/security.md, \"Limits\"); 0 = no limit"},
	{name: "limits.maxConnectionsPerAddress", def: "0", kind: kindInt, max: 1 << 30, help: "open client connections from one source address (IPv4 address, IPv6 /64), every listener together; refused as for limits.maxConnections; 0 = no limit"},
	{name: "limits.connectRate", def: "0", kind: kindFloat, help: "new connections per second one source address may open (a token bucket of limits.connectBurst; fractions allowed, 0.1 = one per 10 s); beyond it: MQTT 5 CONNACK 0x9F, 3.1.1 code 3, AMQP amqp:resource-limit-exceeded; 0 = no limit"},
	{name: "limits.sendBuffer", def: "256KiB", kind: kindBytes, max: 1 << 30, help: "kernel send buffer (SO_SNDBUF) of each MQTT and AMQP client connection, bytes: what a client that stops reading can hold of the gateway's writes in the kernel before mqtt.writeTimeout / amqp.writeTimeout starts to run (Linux doubles it); 0 = the kernel's autotuning, up to net.ipv4.tcp_wmem's maximum (4 MiB) per connection, outside the gateway's memory limits (docs/reliability.md, drill 5)"},
	{name: "limits.connectBurst", def: "0", kind: kindInt, max: 1 << 30, help: "connections one source address may open at once before limits.connectRate applies; 0 = max(1, connectRate rounded up)"},
	{name: "amqp.maxTransactionMessages", def: "1000", kind: kindInt, max: 1 << 20, help: "messages one AMQP transaction (JMS transacted session) holds until commit; a send beyond it is rejected with amqp:resource-limit-exceeded and the commit then rolls back (docs/jms.md)"},
	{name: "auth.file", def: "", kind: kindString, optional: true, help: "users file (users, password hashes, groups, ACL rules; docs/security.md) for MQTT and AMQP; re-read on SIGHUP and POST /api/v1/reload; empty = no users"},
	{name: "auth.certIdentity", def: "cn", kind: kindEnum, enum: []string{"cn", "san-dns", "san-email"}, help: "which field of a verified client certificate names the user (MQTT without a user name, AMQP SASL EXTERNAL): cn (subject common name), san-dns or san-email (the first such subject alternative name)"},
	{name: "acl.file", def: "", kind: kindString, optional: true, help: "ACL rules in a file of their own (the acl and default sections of a users file), applied to auth.file's users; re-read on SIGHUP and POST /api/v1/reload; auth.file must then hold no acl or default section"},
	{name: "acl.onRevoke", def: "unsubscribe", kind: kindEnum, enum: []string{"unsubscribe", "disconnect"}, help: "a reload whose rules deny a subscription a client holds: unsubscribe (MQTT: removed; AMQP: the link detached with amqp:unauthorized-access) or disconnect (MQTT 5 DISCONNECT 0x87, AMQP close with amqp:unauthorized-access)"},
	{name: "auth.allowAnonymous", def: "auto", kind: kindEnum, enum: []string{"auto", "true", "false"}, help: "let clients in without credentials: auto = true only while every MQTT and AMQP listener is on loopback; a listener beyond loopback with no auth.file needs true to start"},
	{name: "auth.http.url", def: "", kind: kindString, optional: true, help: "HTTP auth hook: users auth.file does not name are POSTed here (JSON username, password, clientId, protocol, certSubject, remoteAddr); 200 {\"allow\": true, \"groups\": [...]} lets them in (docs/security.md, \"HTTP auth hook\"); empty = off"},
	{name: "auth.http.timeout", def: "2s", kind: kindDuration, help: "how long the HTTP auth hook may take; no answer by then refuses the client with server unavailable (never lets it in)"},
	{name: "auth.http.cacheTTL", def: "0", kind: kindDuration, help: "how long the HTTP auth hook's allow is reused for the same credentials (a deny: at most 5s); 0 = ask every time"},
	{name: "admin.listen", def: "127.0.0.1:8088", kind: kindAddr, optional: true, help: "admin HTTP API listen address (/healthz, /readyz, /metrics, /api/v1/retained); empty disables"},
	{name: "admin.tls.cert", def: "", kind: kindString, optional: true, help: "PEM certificate chain of the admin API: set (with admin.tls.key), admin.listen serves HTTPS only; re-read on SIGHUP"},
	{name: "admin.tls.key", def: "", kind: kindString, optional: true, help: "PEM private key of admin.tls.cert; re-read on SIGHUP"},
	{name: "admin.tls.clientCA", def: "", kind: kindString, optional: true, help: "PEM CAs that sign admin API client certificates (mutual TLS); re-read on SIGHUP"},
	{name: "admin.tls.clientAuth", def: "none", kind: kindEnum, enum: []string{"none", "request", "require"}, help: "admin API client certificates: none, request, require (needs admin.tls.clientCA; protects an admin.listen beyond loopback without admin.tokens)"},
	{name: "admin.tokens", def: "", kind: kindList, optional: true, help: "sha256:<hex> hashes of the bearer tokens the admin API accepts (gateway passwd --token prints a token and its hash): a YAML list in the file, comma-separated in env/flags; set, every admin path but admin.open needs Authorization: Bearer <token>"},
	{name: "admin.open", def: "/healthz,/readyz", kind: kindList, optional: true, help: "admin paths served without a token (exact paths; \"*\" opens every path, and lets admin.listen go beyond loopback without admin.tokens)"},
	{name: "data.dir", def: "./data", kind: kindString, help: "directory for the embedded retained store, the embedded queue store (queues.db) and the bridge buffer"},
	{name: "retain.backend", def: "embedded", kind: kindEnum, enum: []string{"embedded", "memory", "redis"}, help: "retained store: embedded (file, survives restart), memory, or redis (shared by many gateways)"},
	{name: "retain.redis.url", def: "redis://127.0.0.1:6379/0", kind: kindString, help: "Redis URL for retain.backend=redis"},
	{name: "retain.redis.prefix", def: "gateway:retained:", kind: kindString, help: "Redis key prefix; gateways sharing retained state use the same prefix"},
	{name: "retain.maxPayload", def: "0", kind: kindBytes, help: "largest retained payload stored, bytes; 0 = no limit (over it: MQTT 5 PUBACK 0x97, live delivery still happens)"},
	{name: "retain.maxMessages", def: "0", kind: kindInt, help: "most retained topics held; 0 = no limit (over it: MQTT 5 PUBACK 0x97)"},
	{name: "bridge.nats.url", def: "", kind: kindString, optional: true, help: "NATS server URL(s), comma-separated (nats://, tls://); empty = no NATS bridge"},
	{name: "bridge.nats.name", def: "", kind: kindString, optional: true, help: "connection name NATS shows; default tolsey-<node.id>"},
	{name: "bridge.nats.user", def: "", kind: kindString, optional: true, help: "NATS user (with bridge.nats.password)"},
	{name: "bridge.nats.password", def: "", kind: kindString, optional: true, help: "NATS password"},
	{name: "bridge.nats.token", def: "", kind: kindString, optional: true, help: "NATS token"},
	{name: "bridge.nats.nkey", def: "", kind: kindString, optional: true, help: "file holding an NKey seed (SU...) to authenticate with"},
	{name: "bridge.nats.creds", def: "", kind: kindString, optional: true, help: "NATS credentials file (JWT and seed)"},
	{name: "bridge.nats.tls.ca", def: "", kind: kindString, optional: true, help: "PEM file of CAs that sign the NATS server's certificate; setting any bridge.nats.tls key turns TLS on"},
	{name: "bridge.nats.tls.cert", def: "", kind: kindString, optional: true, help: "PEM client certificate for NATS (with bridge.nats.tls.key)"},
	{name: "bridge.nats.tls.key", def: "", kind: kindString, optional: true, help: "PEM private key of bridge.nats.tls.cert"},
	{name: "bridge.nats.rules", def: "", kind: kindJSON, optional: true, help: "bridge rules: a YAML list in the file, a JSON array in env/flags, of {direction: out|in|both, local: MQTT filter, remote: NATS subject, qos: 0|1, jetstream: true | {stream, durable}}"},
	{name: "bridge.nats.retainedRequests", def: "", kind: kindString, optional: true, help: "subject prefix (such as $GW.retained) on which a NATS request for <prefix>.<subject> is answered with the retained message of the mapped topic; empty = off"},
	{name: "bridge.nats.writerStall", def: "5ms", kind: kindDuration, help: "how long a publisher's QoS 0 message to an outbound core NATS rule may wait for room in the bridge's full writer queue before it is dropped and counted (reason queue_full); a NATS connection that is stuck holds each publisher once at most this long; 0 = drop at once"},
	{name: "bridge.amqp", def: "", kind: kindJSON, optional: true, help: "remote AMQP 1.0 brokers: a YAML list in the file, a JSON array in env/flags, of {name, url: amqp[s]://[user:password@]host:port, user, password, sasl: plain|anonymous, tls: {ca, cert, key}, writerStall: how long a QoS 0 publisher waits for room in a rule's full queue before its message is dropped (5ms; 0 = drop at once), rules: [{direction: out|in, local: MQTT filter, remote: address, qos: 0|1}]}"},
	{name: "bridge.identity", def: "", kind: kindString, optional: true, help: "a user of auth.file whose ACL rules every bridge rule acts under: inbound messages need publish on their topic, outbound ones subscribe; refused ones are dropped and counted (reason denied), an AMQP inbound one rejected; empty = the bridge is trusted (docs/security.md, \"The bridge\")"},
	{name: "bridge.buffer.maxBytes", def: "1GiB", kind: kindBytes, help: "on-disk store-and-forward buffer of outbound QoS 1 rules, in data.dir/bridge, bytes: one budget for every bridge's rules together"},
	{name: "bridge.buffer.policy", def: "rejectNew", kind: kindEnum, enum: []string{"rejectNew", "dropOldest"}, help: "when the buffer is full: rejectNew refuses the publish (MQTT 5 PUBACK 0x97, AMQP rejected resource-limit-exceeded), dropOldest drops the oldest buffered message and counts it"},
	{name: "bridge.buffer.drainRate", def: "0", kind: kindInt, help: "messages/s per rule when draining the buffer; 0 = as fast as the remote acknowledges"},
	{name: "queues.declare", def: "", kind: kindJSON, optional: true, help: "durable queues declared at start: a YAML list in the file, a JSON array in env/flags, of {name, subscriptions: [filter or !exception], access: exclusive|non-exclusive, maxMessages, maxBytes, ttl, deadLetter, maxDeliveries}; a stored queue the list names takes the file's configuration, and queues created through the admin API stay although the list does not name them"},
	{name: "queues.addresses", def: "", kind: kindJSON, optional: true, help: "alternate destinations: a YAML list in the file, a JSON array in env/flags, of {prefix: topic prefix of whole levels, alternate: a queue of queues.declare}; a message published under the prefix that reaches no live consumer (no subscriber of any protocol, no queue subscription) is stored in the alternate queue, and the publisher acknowledged once it is; the longest prefix covering a topic wins (docs/queues.md, \"Alternate destinations\")"},
	{name: "queues.backend", def: "embedded", kind: kindEnum, enum: []string{"memory", "embedded", "redis"}, help: "where durable queues and their messages are kept: embedded (data.dir/queues.db, survives restarts and kill -9), redis (shared by many gateways), memory (lost on restart)"},
	{name: "queues.autoCreate", def: "false", kind: kindBool, help: "a client attaching to an unknown queue creates it (with the queues.* defaults); false: AMQP amqp:not-found"},
	{name: "queues.v311Full", def: "disconnect", kind: kindEnum, enum: []string{"disconnect", "drop"}, help: "an MQTT 3.1.1 QoS 1/2 publish that a matching queue cannot take (it has no negative acknowledgement): disconnect the publisher without PUBACK, so that it retries later, or drop the message for that queue (counted) and acknowledge"},
	{name: "queues.maxQueues", def: "10000", kind: kindInt, max: 1 << 24, help: "most queues in all, durable and temporary; a create beyond it is refused"},
	{name: "queues.maxTemporary", def: "100", kind: kindInt, max: 1 << 20, help: "most temporary queues (AMQP dynamic nodes, JMS temporary queues) per client connection"},
	{name: "queues.maxMessages", def: "100000", kind: kindInt, help: "a queue's maxMessages when it sets none; a full queue refuses publishes (MQTT 5 PUBACK 0x97, AMQP rejected amqp:resource-limit-exceeded)"},
	{name: "queues.maxBytes", def: "64MiB", kind: kindBytes, help: "a queue's maxBytes (payloads and headers) when it sets none; refused as for queues.maxMessages"},
	{name: "queues.embedded.maxLog", def: "256MiB", kind: kindBytes, help: "with queues.backend=embedded, the most its write-ahead log (data.dir/queues.db.wal.*) may hold that no checkpoint applied to queues.db while checkpoints fail (a disk error: /readyz names it): past it, publishes to durable queues are refused as by a failed store (MQTT 5 PUBACK 0x80, AMQP rejected amqp:internal-error) until a checkpoint succeeds; bounds the memory and the disk appends take meanwhile (docs/queues.md, \"The write-ahead log\"); at least 1MiB"},
	{name: "queues.window", def: "1000", kind: kindInt, max: 1 << 20, help: "messages of each queue kept in memory, ready or in flight; the rest wait in the backend and are read as consumers take messages"},
	{name: "node.id", def: "", kind: kindString, optional: true, help: "this gateway's identity in a cluster (loop prevention); default: the host name"},
	{name: "cluster.enabled", def: "false", kind: kindBool, help: "make this gateway one of several that act as one (docs/cluster.md): messages cross between gateways over bridge.nats.url; needs retain.backend=redis and a node.id unique in the cluster, without . * > or spaces"},
	{name: "cluster.prefix", def: "gw", kind: kindString, help: "NATS subject prefix of the cluster's traffic (<prefix>.msg.<node.id>); gateways of one cluster use the same one"},
	{name: "cluster.heartbeat", def: "2s", kind: kindDuration, help: "how often a clustered gateway announces itself on <prefix>.node.<node.id>; one silent for three heartbeats is removed from GET /api/v1/cluster within four"},
	{name: "cluster.advertise", def: "", kind: kindString, optional: true, help: "host name or IP the other gateways and GET /api/v1/cluster show for this gateway's listeners (the bound host when empty)"},
	{name: "cluster.takeoverTimeout", def: "1s", kind: kindDuration, help: "longest an MQTT CONNECT waits for the other gateways to let go of its client id (takeover across gateways; docs/cluster.md); one that does not answer in time is passed over, except that with Redis sessions a resumed session is then refused as server busy"},
	{name: "log.format", def: "text", kind: kindEnum, enum: []string{"text", "json"}, help: "log format"},
	{name: "log.level", def: "info", kind: kindEnum, enum: []string{"debug", "info", "warn", "error"}, help: "log level"},
	{name: "tls.watch", def: "10s", kind: kindDuration, help: "how often the TLS certificate, key and client CA files in use are checked for a change (size, modification time); a changed section is reloaded as by SIGHUP, and a certificate and key that do not match yet (one written before the other) keep the old pair until a later check; 0 = only SIGHUP and POST /api/v1/reload (docs/tls.md)"},
	{name: "shutdown.timeout", def: "10s", kind: kindDuration, help: "how long SIGINT/SIGTERM waits for in-flight work to drain"},
}

// Config is the validated configuration.
type Config struct {
	MQTT struct {
		Listen              string
		WSListen            string
		TLSListen           string
		WSSListen           string
		TLS                 tlsconf.Options // for TLSListen and WSSListen
		MaxPendingWrites    int
		MaxInflight         int
		ReceiveMaximum      int
		MaxPacketSize       int64
		MaxUserProperties   int
		MaxMessageExpiry    time.Duration
		MaxSessionExpiry    time.Duration
		MaxKeepAlive        time.Duration
		WriteTimeout        time.Duration
		SlowSubscriberStall time.Duration
		ConnectTimeout      time.Duration
		MaxTopicLevels      int
		MaxTopicLength      int
		MaxSubscriptions    int
		SessionsBackend     string // mqtt.sessions.backend
	}
	AMQP struct {
		Listen         string
		TLSListen      string
		TLS            tlsconf.Options // for TLSListen
		MaxMessageSize int64
		MaxFrameSize   int64
		IdleTimeout    time.Duration
		AllowAnonymous bool
		Users          map[string]string
		LinkBuffer     int
		LinkBlock      bool          // amqp.linkOverflow = block
		LinkBlockWait  time.Duration // amqp.linkOverflowWait
		MaxSessions    int
		MaxLinks       int
		MaxSelector    int // amqp.maxSelectorLength
		MaxTxnMessages int // amqp.maxTransactionMessages
		WriteTimeout   time.Duration
		BareQueue      bool // amqp.bareAddress = queue
	}
	Limits            LimitsConfig
	Auth              AuthConfig
	AdminListen       string
	AdminTLS          tlsconf.Options // Cert empty: plain HTTP
	Admin             AdminAuthConfig
	DataDir           string
	RetainBackend     string
	RedisURL          string
	RedisPrefix       string
	RetainMaxPayload  int64
	RetainMaxMessages int
	NodeID            string
	Cluster           ClusterConfig
	Bridge            BridgeConfig
	Queues            QueuesConfig
	LogFormat         string
	LogLevel          string
	ShutdownTimeout   time.Duration
	TLSWatch          time.Duration // tls.watch; 0: no watching

	// LegacyEnv names the GATEWAY_* variables that set keys: still read,
	// for one release, under TOLSEY_* (the log warns).
	LegacyEnv []string
}

// LimitsConfig is limits.*: the connection limits every listener shares
// (core/limits).
type LimitsConfig struct {
	MaxConnections int
	MaxPerAddress  int
	ConnectRate    float64
	ConnectBurst   int
	SendBuffer     int // limits.sendBuffer, bytes; 0: the kernel's autotuning
}

// BridgeConfig is bridge.*.
type BridgeConfig struct {
	NATS struct {
		URLs             []string // empty: no NATS bridge
		Name             string
		User, Password   string
		Token            string
		NKey, Creds      string // files
		TLS              struct{ CA, Cert, Key string }
		Rules            []bridge.Rule
		RetainedRequests string
		WriterStall      time.Duration // bridge.nats.writerStall; 0: drop at once
	}
	AMQP []bridge.AMQPBridge // bridge.amqp
	// Identity is bridge.identity: the user the rules act as; "" trusted.
	Identity string
	Buffer   struct {
		MaxBytes   int64
		DropOldest bool
		DrainRate  int
	}
}

// ConfigError is a configuration mistake; main exits 2 on it.
type ConfigError struct {
	Key string
	Msg string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return "config: " + e.Msg
	}
	return fmt.Sprintf("config: %s: %s", e.Key, e.Msg)
}

// ErrHelp is returned by LoadConfig when --help was asked for; the help has
// been written already.
var ErrHelp = errors.New("help requested")

// Environment variables set keys as envPrefix + the key upper-cased, '.'→'_'.
// legacyEnvPrefix, the product's name before it had one, is still read for
// one release, below envPrefix: a deployment's GATEWAY_* variables keep
// working, and Config.LegacyEnv names them so the log can say so.
const (
	envPrefix       = "TOLSEY_"
	legacyEnvPrefix = "GATEWAY_"
)

// kubernetesServiceEnv matches the variables Kubernetes puts in every pod
// for each Service (TOLSEY_SERVICE_HOST, TOLSEY_PORT_1883_TCP_ADDR, ... for
// a Service named tolsey): under our prefixes they are not keys, and must
// not stop the gateway as an unknown key would.
var kubernetesServiceEnv = regexp.MustCompile(`_SERVICE_HOST$|_SERVICE_PORT(_[A-Z0-9_]+)?$|_PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?$`)

// envName is the environment variable for key: TOLSEY_ + upper-cased, '.'→'_'.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// DefaultConfig returns the configuration with every default.
func DefaultConfig() *Config {
	c, err := LoadConfig(nil, nil, io.Discard)
	if err != nil {
		panic(err) // the defaults table is wrong: a programming error
	}
	return c
}

// LoadConfig builds the configuration from defaults, the YAML file named by
// --config, TOLSEY_* environment variables (GATEWAY_* too, below them, for one
// release) and --key=value flags, in rising
// order of precedence. help receives --help output.
func LoadConfig(args, environ []string, help io.Writer) (*Config, error) {
	byName := make(map[string]*keyDef, len(keyDefs))
	byEnv := make(map[string]*keyDef, len(keyDefs))
	defaults := make(map[string]any, len(keyDefs))
	for i := range keyDefs {
		d := &keyDefs[i]
		byName[d.name] = d
		byEnv[envName(d.name)] = d
		defaults[d.name] = d.def
	}

	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configFile := fs.String("config", "", "YAML configuration file")
	showHelp := fs.BoolP("help", "h", false, "show this help")
	for _, d := range keyDefs {
		fs.String(d.name, d.def, d.help)
	}
	if err := fs.Parse(args); err != nil {
		return nil, &ConfigError{Msg: err.Error()}
	}
	if *showHelp {
		writeHelp(help)
		return nil, ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, &ConfigError{Msg: fmt.Sprintf("unexpected argument %q (keys are given as --key=value)", fs.Arg(0))}
	}

	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaults, "."), nil); err != nil {
		return nil, &ConfigError{Msg: err.Error()}
	}
	if *configFile != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(*configFile), yaml.Parser()); err != nil {
			return nil, &ConfigError{Key: "config", Msg: err.Error()}
		}
		flat := fk.All()
		for key, v := range flat {
			if v == nil && isSection(key) {
				delete(flat, key) // a section with every key commented out
				continue
			}
			if _, list := v.([]any); list && key == "queues" {
				// The first sketch had the list itself at queues:,
				// where it cannot sit beside queues.backend and the rest.
				return nil, &ConfigError{Key: key, Msg: fmt.Sprintf("in %s, queues: holds the settings (backend, autoCreate, ...) and the list of queues goes under queues: declare:", *configFile)}
			}
			if byName[key] == nil {
				return nil, &ConfigError{Key: key, Msg: fmt.Sprintf("unknown key in %s", *configFile)}
			}
			switch {
			case v == nil:
				flat[key] = ""
			case byName[key].kind == kindList:
				if l, ok := v.([]any); ok {
					parts := make([]string, len(l))
					for i, x := range l {
						parts[i] = fmt.Sprint(x)
					}
					v = strings.Join(parts, ",")
				}
				flat[key] = fmt.Sprint(v)
			case byName[key].kind == kindJSON:
				b, err := json.Marshal(v)
				if err != nil {
					return nil, &ConfigError{Key: key, Msg: err.Error()}
				}
				flat[key] = string(b)
			default:
				flat[key] = fmt.Sprint(v)
			}
		}
		if err := k.Load(confmap.Provider(flat, "."), nil); err != nil {
			return nil, &ConfigError{Key: "config", Msg: err.Error()}
		}
	}
	// The legacy prefix first, so that TOLSEY_* overrides GATEWAY_*.
	var envErr error
	var legacy []string
	for _, prefix := range []string{legacyEnvPrefix, envPrefix} {
		if err := k.Load(env.Provider(".", env.Opt{
			Prefix:      prefix,
			EnvironFunc: func() []string { return environ },
			TransformFunc: func(name, v string) (string, any) {
				d := byEnv[envPrefix+strings.TrimPrefix(strings.ToUpper(name), prefix)]
				if d == nil && kubernetesServiceEnv.MatchString(strings.ToUpper(name)) {
					return "", nil // a Service named tolsey (or gateway) defines these in every pod
				}
				if d == nil && strings.HasPrefix(strings.ToUpper(name), envPrefix+"CLI_") {
					return "", nil // the command-line tool's own (gateway retained ls ...: gateway/cli)
				}
				if d == nil {
					if envErr == nil {
						envErr = &ConfigError{Key: name, Msg: "unknown environment variable (see gateway --help for the keys)"}
					}
					return "", nil
				}
				if prefix == legacyEnvPrefix {
					legacy = append(legacy, name)
				}
				return d.name, v
			},
		}), nil); err != nil {
			return nil, &ConfigError{Msg: err.Error()}
		}
	}
	if envErr != nil {
		return nil, envErr
	}
	changed := map[string]any{}
	fs.Visit(func(f *pflag.Flag) {
		if byName[f.Name] != nil {
			changed[f.Name] = f.Value.String()
		}
	})
	if err := k.Load(confmap.Provider(changed, "."), nil); err != nil {
		return nil, &ConfigError{Msg: err.Error()}
	}
	c, err := buildConfig(k, byName)
	if c != nil {
		sort.Strings(legacy)
		c.LegacyEnv = legacy
	}
	return c, err
}

func buildConfig(k *koanf.Koanf, byName map[string]*keyDef) (*Config, error) {
	var firstErr error
	get := func(key string) string {
		d := byName[key]
		v := strings.TrimSpace(k.String(key))
		if firstErr != nil {
			return v
		}
		if err := checkValue(d, v); err != nil {
			firstErr = &ConfigError{Key: key, Msg: err.Error()}
		}
		return v
	}
	num := func(key string) int64 {
		v := get(key)
		n, _ := parseBytes(v)
		return n
	}
	dur := func(key string) time.Duration {
		d, _ := time.ParseDuration(normDuration(get(key)))
		return d
	}
	c := &Config{}
	c.MQTT.Listen = get("mqtt.listen")
	c.MQTT.WSListen = get("mqtt.ws.listen")
	c.MQTT.MaxPendingWrites = int(num("mqtt.maxPendingWrites"))
	c.MQTT.MaxInflight = int(num("mqtt.maxInflight"))
	c.MQTT.ReceiveMaximum = int(num("mqtt.receiveMaximum"))
	c.MQTT.MaxPacketSize = num("mqtt.maxPacketSize")
	c.MQTT.MaxUserProperties = int(num("mqtt.maxUserProperties"))
	c.MQTT.MaxMessageExpiry = dur("mqtt.maxMessageExpiry")
	c.MQTT.MaxSessionExpiry = dur("mqtt.maxSessionExpiry")
	c.MQTT.SessionsBackend = get("mqtt.sessions.backend")
	c.MQTT.MaxKeepAlive = dur("mqtt.maxKeepAlive")
	c.MQTT.WriteTimeout = dur("mqtt.writeTimeout")
	c.MQTT.SlowSubscriberStall = dur("mqtt.slowSubscriberStall")
	c.MQTT.ConnectTimeout = dur("mqtt.connectTimeout")
	c.MQTT.MaxTopicLevels = int(num("mqtt.maxTopicLevels"))
	c.MQTT.MaxTopicLength = int(num("mqtt.maxTopicLength"))
	c.MQTT.MaxSubscriptions = int(num("mqtt.maxSubscriptions"))
	c.Limits.MaxConnections = int(num("limits.maxConnections"))
	c.Limits.MaxPerAddress = int(num("limits.maxConnectionsPerAddress"))
	c.Limits.SendBuffer = int(num("limits.sendBuffer"))
	c.Limits.ConnectRate, _ = strconv.ParseFloat(get("limits.connectRate"), 64)
	c.Limits.ConnectBurst = int(num("limits.connectBurst"))
	c.AMQP.Listen = get("amqp.listen")
	c.AMQP.MaxMessageSize = num("amqp.maxMessageSize")
	c.AMQP.MaxFrameSize = num("amqp.maxFrameSize")
	c.AMQP.IdleTimeout = dur("amqp.idleTimeout")
	c.AMQP.AllowAnonymous = get("amqp.allowAnonymous") == "true"
	c.AMQP.LinkBuffer = int(num("amqp.linkBuffer"))
	c.AMQP.LinkBlock = get("amqp.linkOverflow") == "block"
	c.AMQP.LinkBlockWait = dur("amqp.linkOverflowWait")
	c.AMQP.WriteTimeout = dur("amqp.writeTimeout")
	c.AMQP.MaxSessions = int(num("amqp.maxSessions"))
	c.AMQP.MaxLinks = int(num("amqp.maxLinksPerConnection"))
	c.AMQP.MaxSelector = int(num("amqp.maxSelectorLength"))
	c.AMQP.MaxTxnMessages = int(num("amqp.maxTransactionMessages"))
	c.AMQP.BareQueue = get("amqp.bareAddress") == "queue"
	c.AdminListen = get("admin.listen")
	c.DataDir = get("data.dir")
	c.RetainBackend = get("retain.backend")
	c.RedisURL = get("retain.redis.url")
	c.RedisPrefix = get("retain.redis.prefix")
	c.RetainMaxPayload = num("retain.maxPayload")
	c.RetainMaxMessages = int(num("retain.maxMessages"))
	c.NodeID = get("node.id")
	c.Bridge.NATS.WriterStall = dur("bridge.nats.writerStall")
	bridgeErr := buildBridgeConfig(c, get, num)
	queuesErr := buildQueuesConfig(c, get, num)
	tlsErr := buildTLSConfig(c, get)
	authErr := buildAuthConfig(c, get)
	c.LogFormat = get("log.format")
	c.LogLevel = get("log.level")
	c.ShutdownTimeout = dur("shutdown.timeout")
	c.TLSWatch = dur("tls.watch")
	users := get("amqp.users")
	if firstErr != nil {
		return nil, firstErr
	}
	if c.MQTT.MaxKeepAlive > 65535*time.Second || (c.MQTT.MaxKeepAlive > 0 && c.MQTT.MaxKeepAlive < time.Second) {
		return nil, &ConfigError{Key: "mqtt.maxKeepAlive", Msg: "must be 0 or between 1s and 65535s"}
	}
	if c.MQTT.ConnectTimeout <= 0 {
		return nil, &ConfigError{Key: "mqtt.connectTimeout", Msg: "must be more than 0"}
	}
	if c.MQTT.MaxTopicLevels < 1 {
		return nil, &ConfigError{Key: "mqtt.maxTopicLevels", Msg: "must be at least 1"}
	}
	if c.MQTT.MaxTopicLength < 1 {
		return nil, &ConfigError{Key: "mqtt.maxTopicLength", Msg: "must be at least 1"}
	}
	// The embedded store keys a retained message by its topic, and bbolt
	// refuses keys over MaxKeySize: a longer topic would be taken at the
	// door and then fail in the store.
	if c.RetainBackend == "embedded" && c.MQTT.MaxTopicLength > bolt.MaxKeySize {
		return nil, &ConfigError{Key: "mqtt.maxTopicLength", Msg: fmt.Sprintf("%d is over the embedded store's key limit of %d bytes (retain.backend=embedded)", c.MQTT.MaxTopicLength, bolt.MaxKeySize)}
	}
	if c.MQTT.MaxPendingWrites < 1 {
		return nil, &ConfigError{Key: "mqtt.maxPendingWrites", Msg: "must be at least 1"}
	}
	if c.AMQP.LinkBuffer < 1 {
		return nil, &ConfigError{Key: "amqp.linkBuffer", Msg: "must be at least 1"}
	}
	if c.AMQP.MaxSessions < 1 {
		return nil, &ConfigError{Key: "amqp.maxSessions", Msg: "must be at least 1"}
	}
	if c.AMQP.MaxLinks < 1 {
		return nil, &ConfigError{Key: "amqp.maxLinksPerConnection", Msg: "must be at least 1"}
	}
	if c.AMQP.MaxSelector < 1 {
		return nil, &ConfigError{Key: "amqp.maxSelectorLength", Msg: "must be at least 1"}
	}
	if c.Limits.ConnectBurst > 0 && c.Limits.ConnectRate == 0 {
		return nil, &ConfigError{Key: "limits.connectBurst", Msg: "is set but limits.connectRate is 0 (no rate limit): set both"}
	}
	if c.AMQP.MaxTxnMessages < 1 {
		return nil, &ConfigError{Key: "amqp.maxTransactionMessages", Msg: "must be at least 1"}
	}
	if c.AMQP.MaxFrameSize != 0 && c.AMQP.MaxFrameSize < 512 {
		return nil, &ConfigError{Key: "amqp.maxFrameSize", Msg: "must be at least 512 (AMQP 1.0 §2.7.1 MIN-MAX-FRAME-SIZE)"}
	}
	if users != "" {
		c.AMQP.Users = map[string]string{}
		for _, u := range strings.Split(users, ",") {
			name, pass, ok := strings.Cut(strings.TrimSpace(u), ":")
			if !ok || name == "" {
				return nil, &ConfigError{Key: "amqp.users", Msg: fmt.Sprintf("entry %q is not user:password", u)}
			}
			c.AMQP.Users[name] = pass
		}
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "gateway"
		}
		c.NodeID = h
	}
	if bridgeErr != nil {
		return nil, bridgeErr
	}
	if queuesErr != nil {
		return nil, queuesErr
	}
	if tlsErr != nil {
		return nil, tlsErr
	}
	if authErr != nil {
		return nil, authErr
	}
	if c.Bridge.NATS.Name == "" {
		c.Bridge.NATS.Name = "tolsey-" + c.NodeID
	}
	if err := buildClusterConfig(c, get); err != nil {
		return nil, err
	}
	return c, nil
}

// isSection reports whether key is the parent of keys (mqtt, queues).
func isSection(key string) bool {
	for _, d := range keyDefs {
		if strings.HasPrefix(d.name, key+".") {
			return true
		}
	}
	return false
}

func normDuration(v string) string {
	if v == "0" {
		return "0s"
	}
	return v
}

// parseBytes reads a byte count with an optional KiB/MiB/GiB (or K/M/G) suffix.
func parseBytes(v string) (int64, error) {
	mult := int64(1)
	for _, s := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(v, s.suffix) {
			v, mult = strings.TrimSuffix(v, s.suffix), s.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("not a non-negative number")
	}
	return n * mult, nil
}

func checkValue(d *keyDef, v string) error {
	if v == "" {
		if d.optional {
			return nil
		}
		return errors.New("must not be empty")
	}
	switch d.kind {
	case kindAddr:
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("%q is not host:port", v)
		}
		_ = host
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("port %q is not 0-65535", port)
		}
	case kindInt, kindBytes:
		if d.kind == kindInt {
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
		}
		n, err := parseBytes(v)
		if err != nil {
			return fmt.Errorf("%q is not a non-negative number", v)
		}
		if d.max > 0 && n > d.max {
			return fmt.Errorf("%d is over the maximum %d", n, d.max)
		}
	case kindFloat:
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("%q is not a non-negative number", v)
		}
	case kindDuration:
		x, err := time.ParseDuration(normDuration(v))
		if err != nil || x < 0 {
			return fmt.Errorf("%q is not a duration (like 30s, 5m, 24h)", v)
		}
	case kindEnum:
		for _, e := range d.enum {
			if v == e {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(d.enum, ", "))
	case kindBool:
		if v != "true" && v != "false" {
			return fmt.Errorf("%q is not true or false", v)
		}
	case kindJSON:
		if !json.Valid([]byte(v)) {
			return fmt.Errorf("%q is not JSON (a YAML list in the file; a JSON array in env and flags)", v)
		}
	}
	return nil
}

func writeHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: gateway [--config FILE] [--key=value ...]\n\n")
	fmt.Fprintf(w, "Tolsey, the MQTT/AMQP gateway with a retained-message store. Every key can be\n")
	fmt.Fprintf(w, "set in the YAML file, as an environment variable (TOLSEY_ + key upper-cased,\n")
	fmt.Fprintf(w, "'.' -> '_'; GATEWAY_ is still read, below TOLSEY_, for one release)\n")
	fmt.Fprintf(w, "or as a flag; flag beats env beats file beats default.\n\nKeys:\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	names := make([]string, 0, len(keyDefs))
	idx := map[string]keyDef{}
	for _, d := range keyDefs {
		names = append(names, d.name)
		idx[d.name] = d
	}
	sort.Strings(names)
	for _, n := range names {
		d := idx[n]
		def := d.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t(default %s)\t%s\n", d.name, def, d.help)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n  --config FILE\tYAML configuration file\n  --help\tthis help\n")
}
