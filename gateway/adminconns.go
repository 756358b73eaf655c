package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tolsey/tolsey/amqp"
)

// connJSON is one client connection of either protocol in the admin API.
// ID is "mqtt:<client id>" or "amqp:<connection number>". Fields a
// protocol does not have are left out.
type connJSON struct {
	ID             string     `json:"id"`
	Protocol       string     `json:"protocol"`
	Version        string     `json:"version,omitempty"`
	ClientID       string     `json:"clientId,omitempty"` // MQTT client id, AMQP container id
	User           string     `json:"user,omitempty"`
	Remote         string     `json:"remote"`
	Listener       string     `json:"listener,omitempty"`
	ConnectedSince *time.Time `json:"connectedSince,omitempty"`
	Subscriptions  *int       `json:"subscriptions,omitempty"`
	Queued         *int       `json:"queued,omitempty"`
	KeepAlive      *uint16    `json:"keepAlive,omitempty"`
	Links          *int       `json:"links,omitempty"` // AMQP: attached links
	// Since the connection was accepted: PUBLISH packets (MQTT) or
	// messages (AMQP) in and out, and the bytes of the whole protocol.
	MessagesIn  int64 `json:"messagesIn"`
	MessagesOut int64 `json:"messagesOut"`
	BytesIn     int64 `json:"bytesIn"`
	BytesOut    int64 `json:"bytesOut"`

	// GET of one connection only.
	Filters          []string        `json:"filters,omitempty"`          // MQTT: its subscriptions' filters, as subscribed
	SubscriptionList []subJSON       `json:"subscriptionList,omitempty"` // MQTT: its subscriptions
	LinkList         []amqp.LinkInfo `json:"linkList,omitempty"`         // AMQP: its links
}

func (a *adminServer) routeConnections(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/connections", a.listConnections)
	mux.HandleFunc("GET /api/v1/connections/{id}", a.getConnection)
	mux.HandleFunc("DELETE /api/v1/connections/{id}", a.deleteConnection)
}

// connections is every open client connection, sorted by ID; nil after
// writing 503 while the gateway starts.
func (a *adminServer) connections(w http.ResponseWriter) ([]connJSON, bool) {
	m := a.mqttServer(w)
	if m == nil {
		return nil, false
	}
	var out []connJSON
	for _, c := range m.Connections() {
		since := c.Since.UTC()
		out = append(out, connJSON{ID: "mqtt:" + c.ClientID, Protocol: "mqtt", Version: c.Version,
			ClientID: c.ClientID, User: c.User, Remote: c.Remote, Listener: c.Listener, ConnectedSince: &since,
			Subscriptions: &c.Subscriptions, Queued: &c.Queued, KeepAlive: &c.KeepAlive,
			MessagesIn: c.MessagesIn, MessagesOut: c.MessagesOut, BytesIn: c.BytesIn, BytesOut: c.BytesOut})
	}
	if a.g.amqp != nil {
		for _, c := range a.g.amqp.ConnectionList() {
			since := c.Since.UTC()
			cj := connJSON{ID: amqpConnID(c.ID), Protocol: "amqp", ClientID: c.ContainerID,
				User: c.User, Remote: c.Remote, ConnectedSince: &since, Links: &c.Links,
				MessagesIn: c.MessagesIn, MessagesOut: c.MessagesOut, BytesIn: c.BytesIn, BytesOut: c.BytesOut}
			if c.Open {
				cj.Version = "1.0"
			}
			out = append(out, cj)
		}
	}
	slices.SortFunc(out, func(x, y connJSON) int { return strings.Compare(x.ID, y.ID) })
	return out, true
}

// listConnections is GET /api/v1/connections: the open connections of
// both protocols in id order, filtered by ?protocol=mqtt|amqp, ?clientId=
// (a prefix of the client or container id), ?user= (exact), ?address= (a
// prefix of the remote address), paged by ?after=ID&limit=N (default
// 1,000, at most 10,000).
func (a *adminServer) listConnections(w http.ResponseWriter, r *http.Request) {
	limit, proto, ok := connListParams(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	all, ok := a.connections(w)
	if !ok {
		return
	}
	out := []connJSON{}
	for _, c := range all {
		switch {
		case c.ID <= q.Get("after"):
		case proto != "" && c.Protocol != proto:
		case !strings.HasPrefix(c.ClientID, q.Get("clientId")):
		case q.Has("user") && c.User != q.Get("user"):
		case !strings.HasPrefix(c.Remote, q.Get("address")):
		default:
			if len(out) < limit {
				out = append(out, c)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// connListParams reads the parameters the lists of connections and of
// subscriptions share: ?limit=N (default 1,000, at most 10,000) and
// ?protocol=mqtt|amqp ("" when absent); false after writing 400.
func connListParams(w http.ResponseWriter, r *http.Request) (limit int, proto string, ok bool) {
	if limit, ok = limitParam(w, r, 1000, 10_000); !ok {
		return 0, "", false
	}
	proto = r.URL.Query().Get("protocol")
	if proto != "" && proto != "mqtt" && proto != "amqp" {
		apiError(w, http.StatusBadRequest, "protocol must be mqtt or amqp")
		return 0, "", false
	}
	return limit, proto, true
}

// amqpConnID is the admin API's id of AMQP connection number n.
func amqpConnID(n uint64) string { return "amqp:" + strconv.FormatUint(n, 10) }

// getConnection is GET /api/v1/connections/{id}: one connection, with an
// MQTT connection's subscriptions or an AMQP connection's links; 404 when
// it is not open.
func (a *adminServer) getConnection(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	all, ok := a.connections(w)
	if !ok {
		return
	}
	i := slices.IndexFunc(all, func(c connJSON) bool { return c.ID == id })
	if i < 0 {
		apiError(w, http.StatusNotFound, "no open connection %q (ids: mqtt:<client id>, amqp:<number>)", id)
		return
	}
	c := all[i]
	switch c.Protocol {
	case "mqtt":
		subs, _ := a.g.mqtt.Subscriptions(c.ClientID)
		for _, s := range subs {
			j := mqttSubJSON(s)
			c.Filters = append(c.Filters, j.subscribed())
			c.SubscriptionList = append(c.SubscriptionList, j)
		}
	case "amqp":
		n, _ := strconv.ParseUint(strings.TrimPrefix(c.ID, "amqp:"), 10, 64)
		c.LinkList, _ = a.g.amqp.Links(n)
	}
	writeJSON(w, http.StatusOK, c)
}

// deleteConnection is DELETE /api/v1/connections/{id}: the connection is
// closed, MQTT 5 with DISCONNECT 0x98 (Administrative action), AMQP with
// amqp:connection:forced; an MQTT session is kept, as after any
// disconnect (DELETE /api/v1/sessions/{clientId} ends one). 204, or 404.
func (a *adminServer) deleteConnection(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m := a.mqttServer(w)
	if m == nil {
		return
	}
	done := false
	switch proto, rest, _ := strings.Cut(id, ":"); proto {
	case "mqtt":
		done = m.Disconnect(rest)
	case "amqp":
		if n, err := strconv.ParseUint(rest, 10, 64); err == nil && a.g.amqp != nil {
			done = a.g.amqp.Disconnect(n)
		}
	}
	if !done {
		apiError(w, http.StatusNotFound, "no open connection %q (ids: mqtt:<client id>, amqp:<number>)", id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
