// The peer in the benchmarks: upstream mochi-mqtt exactly as released. It is a
// module of its own so that the gateway's patched copy (third_party/mochi-mqtt,
// through the replace in the root go.mod) does not reach it.
module github.com/tolsey/tolsey/test/bench/baremochi

go 1.26.0

require github.com/mochi-mqtt/server/v2 v2.7.9

require (
	github.com/gorilla/websocket v1.5.0 // indirect
	github.com/rs/xid v1.4.0 // indirect
)
