package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tolsey/tolsey/core"
)

// protocolAdmin is the origin of a message published through the admin
// API (POST /api/v1/publish): counted under it in tolsey_messages_in_total,
// and shown as such to whoever reads a message's origin (the retained
// browser).
const protocolAdmin core.Protocol = "admin"

// publishRequest is the body of POST /api/v1/publish (docs/admin-api.md).
type publishRequest struct {
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload"`       // UTF-8 text
	PayloadBase64  string            `json:"payloadBase64"` // or bytes
	QoS            byte              `json:"qos"`
	Retain         bool              `json:"retain"`
	ContentType    string            `json:"contentType"`
	ResponseTopic  string            `json:"responseTopic"`
	UserProperties map[string]string `json:"userProperties"`
	// ExpirySeconds is the MQTT 5 message expiry interval; 0 = none.
	ExpirySeconds uint32 `json:"expirySeconds"`
}

// maxAdminPublish bounds a published payload (and the request body): a
// test message, not a bulk load.
const maxAdminPublish = 1 << 20

// publish is POST /api/v1/publish: one message into the topic space, as
// any publisher's, with the admin API as its origin. It answers once the
// router has handed it on (QoS 1: once every holder, a queue for instance,
// has stored it): 200 with how many subscribers took it; 400 for a bad
// request; 503 when the retained store refused a retained message.
func (a *adminServer) publish(w http.ResponseWriter, r *http.Request) {
	var req publishRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2*maxAdminPublish))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	m, err := req.message(a.g.router.TopicLimits())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	a.g.metrics.In(string(protocolAdmin))
	res := a.g.router.Publish(ctx, m)
	out := map[string]any{"matched": res.Matched, "failed": res.Failed, "retained": res.Retained}
	if res.Err != nil {
		out["error"] = res.Err.Error()
	}
	code := http.StatusOK
	if res.RetainErr != nil {
		out["retainError"] = res.RetainErr.Error()
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}

func (req *publishRequest) message(limits core.TopicLimits) (*core.Message, error) {
	if err := limits.ValidateTopic(req.Topic); err != nil {
		return nil, fmt.Errorf("topic: %w", err)
	}
	if strings.HasPrefix(req.Topic, "$") {
		return nil, fmt.Errorf("topic %q: topics beginning with $ are not published through the admin API", req.Topic)
	}
	if req.QoS > 1 {
		return nil, fmt.Errorf("qos %d: 0 or 1", req.QoS)
	}
	if req.Payload != nil && req.PayloadBase64 != "" {
		return nil, fmt.Errorf("payload and payloadBase64: give one")
	}
	m := &core.Message{Topic: req.Topic, QoS: req.QoS, Retain: req.Retain, ContentType: req.ContentType,
		ResponseTopic: req.ResponseTopic, Origin: core.Origin{Protocol: protocolAdmin, Client: "admin-api"}}
	switch {
	case req.Payload != nil:
		m.Payload = []byte(*req.Payload)
		m.PayloadFormat = 1
	case req.PayloadBase64 != "":
		b, err := base64.StdEncoding.DecodeString(req.PayloadBase64)
		if err != nil {
			return nil, fmt.Errorf("payloadBase64: %w", err)
		}
		m.Payload = b
	}
	if len(m.Payload) > maxAdminPublish {
		return nil, fmt.Errorf("payload of %d bytes: at most %d through the admin API", len(m.Payload), maxAdminPublish)
	}
	for k, v := range req.UserProperties {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: k, Value: v})
	}
	if req.ExpirySeconds > 0 {
		m.Expiry = time.Now().Add(time.Duration(req.ExpirySeconds) * time.Second)
	}
	return m, nil
}
