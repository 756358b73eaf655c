// Package auth owns identities and authorisation for every front-end: the
// users file (users with bcrypt or argon2id password hashes and optional
// SCRAM-SHA-256 credentials, groups, ACL rules, a default policy), password
// checks, the ACL decisions for publish, delivery and SUBSCRIBE, and the
// server side of a SCRAM-SHA-256 exchange (RFC 5802, RFC 7677).
//
// It is protocol-neutral: it answers "who is this" and "may they", and the
// front-ends (MQTT, AMQP, the bridge, the admin API) put the answer on their
// own wire (reason codes, SASL outcomes, HTTP statuses). It imports only the
// standard library, golang.org/x/crypto, a YAML parser and nothing of ours,
// and it must not know sockets, wire formats or configuration keys.
//
// The semantics, with examples, are in docs/security.md.
package auth
