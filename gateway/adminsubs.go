package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/tolsey/tolsey/amqp"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/mqtt"
)

// subJSON is one subscription of an open connection in the admin API
// (GET /api/v1/subscriptions): an MQTT subscription, or an AMQP link the
// client receives on, whose source address is its filter. ID is the
// connection's id and the filter as subscribed (AMQP: and the link's
// name), separated by a space, each with its spaces and percent signs
// escaped (idPart): a client id or a filter may hold spaces, and two
// subscriptions must not share an id (paging goes by id).
type subJSON struct {
	ID         string `json:"id"`
	Connection string `json:"connection"`
	Protocol   string `json:"protocol"`
	ClientID   string `json:"clientId"`
	Filter     string `json:"filter"`
	QoS        byte   `json:"qos"`
	ShareGroup string `json:"shareGroup"`
	Durable    bool   `json:"durable"`
	Link       string `json:"link,omitempty"` // AMQP: the link's name
}

// subscribed is the filter as the client gave it: with its $share/<group>/
// prefix when shared (MQTT).
func (s subJSON) subscribed() string {
	if s.Protocol == "mqtt" && s.ShareGroup != "" {
		return core.ShareFilter(s.ShareGroup, s.Filter)
	}
	return s.Filter
}

func mqttSubJSON(s mqtt.SubInfo) subJSON {
	j := subJSON{Connection: "mqtt:" + s.ClientID, Protocol: "mqtt", ClientID: s.ClientID,
		Filter: s.Filter, QoS: s.QoS, ShareGroup: s.ShareGroup}
	j.ID = idPart(j.Connection) + " " + idPart(j.subscribed())
	return j
}

func amqpSubJSON(s amqp.SubInfo) subJSON {
	j := subJSON{Connection: amqpConnID(s.Conn), Protocol: "amqp", ClientID: s.ContainerID,
		Filter: s.Link.Address, QoS: s.Link.QoS, Durable: s.Link.Durable, Link: s.Link.Name}
	if s.Link.Shared {
		j.ShareGroup = s.Link.Subscription
	}
	// Two links of a connection may receive from one address: the link
	// name keeps their ids apart.
	j.ID = idPart(j.Connection) + " " + idPart(j.Filter) + " " + idPart(s.Link.Name)
	return j
}

// idEscaper escapes what would make an id's parts ambiguous.
var idEscaper = strings.NewReplacer("%", "%25", " ", "%20")

// idPart is s as one part of a subscription's id: without a space.
func idPart(s string) string { return idEscaper.Replace(s) }

// listSubscriptions is GET /api/v1/subscriptions: the subscriptions of
// every open connection of both protocols in id order, filtered by
// ?filter= (the filter, exactly, without a $share/ prefix), ?clientId= (a
// prefix of the client or container id), ?protocol=mqtt|amqp, paged by
// ?after=ID&limit=N (default 1,000, at most 10,000). A persistent MQTT
// session that is offline is not listed: GET /api/v1/sessions shows it.
func (a *adminServer) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	limit, proto, ok := connListParams(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	m := a.mqttServer(w)
	if m == nil {
		return
	}
	var all []subJSON
	if proto != "amqp" {
		for _, s := range m.AllSubscriptions() {
			all = append(all, mqttSubJSON(s))
		}
	}
	if proto != "mqtt" && a.g.amqp != nil {
		for _, s := range a.g.amqp.Subscriptions() {
			all = append(all, amqpSubJSON(s))
		}
	}
	slices.SortFunc(all, func(x, y subJSON) int { return strings.Compare(x.ID, y.ID) })
	out := []subJSON{}
	for _, s := range all {
		switch {
		case s.ID <= q.Get("after"):
		case q.Has("filter") && s.Filter != q.Get("filter"):
		case !strings.HasPrefix(s.ClientID, q.Get("clientId")):
		default:
			out = append(out, s)
		}
		if len(out) == limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}
