package bridge

import (
	"github.com/tolsey/tolsey/core/auth"
)

// Identity is who a bridge's rules act as (bridge.identity,
// docs/security.md, "The bridge"): a user of the users file in force, whose
// rules decide what an inbound rule may publish into the topic space
// (publish on the topic) and what an outbound rule may take out of it
// (subscribe on the topic), message by message, so a reload applies at
// once. The zero Identity, or one whose Live holds no users file, allows
// everything: the bridge's rules are the operator's own configuration.
type Identity struct {
	Auth *auth.Live
	User string
}

// allowed reports whether the identity may do action on topic; client is
// what %c stands for (the bridge's Origin.Client). A user the
// users file no longer names may do nothing: removing the bridge's user
// stops the bridge's traffic, as it would a client's.
func (id Identity) allowed(action auth.Action, client, topic string) bool {
	if id.User == "" || id.Auth == nil {
		return true
	}
	st := id.Auth.Load()
	if st == nil {
		return true
	}
	who, ok := st.Lookup(id.User)
	if !ok {
		return false
	}
	return st.Allowed(who, client, action, topic)
}
