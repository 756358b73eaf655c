package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// command is one subcommand of the tool: `gateway <group> <verb>`.
type command struct {
	group, verb string
	usage       string
	help        string
	run         func(c *cli, args []string) error
}

// commands is every admin subcommand; main dispatches to them, and the
// help and the shell completions are written from this table.
var commands = []command{
	{"retained", "ls", "retained ls [FILTER] [--after TOPIC] [--limit N]", "list retained messages matching FILTER (default #) in topic order, a page after TOPIC", retainedLs},
	{"retained", "get", "retained get TOPIC", "print the retained payload of TOPIC (exit 3 when there is none)", retainedGet},
	{"retained", "rm", "retained rm FILTER [--yes]", "delete the retained messages matching FILTER (a wildcard needs --yes)", retainedRm},
	{"queues", "ls", "queues ls", "list queues with depth, consumers and rates", queuesLs},
	{"queues", "create", "queues create NAME [--subscribe FILTER]... [--config JSON]", "declare a queue (PUT /api/v1/queues/NAME)", queuesCreate},
	{"queues", "rm", "queues rm NAME", "delete a queue and its messages", queuesRm},
	{"queues", "browse", "queues browse NAME [--after ID] [--limit N]", "show a queue's messages without consuming them, oldest first, a page after message ID", queuesBrowse},
	{"queues", "purge", "queues purge NAME", "remove a queue's ready messages (those in flight to consumers stay)", queuesPurge},
	{"connections", "ls", "connections ls [--protocol mqtt|amqp] [--client PREFIX] [--user U] [--address PREFIX]", "list open client connections of both protocols", connectionsLs},
	{"connections", "kick", "connections kick ID", "close a connection (MQTT 5: DISCONNECT 0x98; AMQP: amqp:connection:forced); IDs as listed, mqtt:<client id> or amqp:<number>", connectionsKick},
	{"subscriptions", "ls", "subscriptions ls [--filter F] [--client PREFIX] [--protocol mqtt|amqp] [--limit N]", "list the subscriptions of open connections (AMQP: receiving links)", subscriptionsLs},
	{"topics", "ls", "topics ls [FILTER] [--limit N]", "list the topics published on recently, with counts and rates", topicsLs},
	{"sessions", "ls", "sessions ls", "list persistent MQTT sessions", sessionsLs},
	{"sessions", "rm", "sessions rm CLIENTID", "remove a persistent MQTT session", sessionsRm},
	{"bridges", "ls", "bridges ls", "list bridges and their rules, connection state and buffers", bridgesLs},
	{"cluster", "ls", "cluster ls", "show the cluster as this gateway sees it", clusterLs},
	{"publish", "", "publish TOPIC [-m TEXT | --file F] [--qos 0|1] [--retain] [--content-type T] [--property K=V]...", "publish one message through the admin API", publish},
}

func retainedLs(c *cli, args []string) error {
	fs := c.flags("retained ls")
	limit := fs.Int("limit", 1000, "at most this many")
	after := fs.String("after", "", "the page after this topic (the last one listed)")
	pos, err := c.parse(fs, args, 0, 1, "retained ls [FILTER] [--after TOPIC] [--limit N]")
	if err != nil {
		return err
	}
	filter := "#"
	if len(pos) == 1 {
		filter = pos[0]
	}
	q := url.Values{"filter": {filter}, "limit": {strconv.Itoa(*limit)}}
	if *after != "" {
		q.Set("after", *after)
	}
	raw, err := c.call("GET", "/api/v1/retained", q, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, []column{{"TOPIC", "topic", nil}, {"SIZE", "size", nil}, {"QOS", "qos", nil},
		{"ORIGIN", "origin", nil}, {"CREATED", "created", nil}, {"PAYLOAD", "payload", payloadCell}})
}

// payloadCell shows a binary payload (only payloadBase64 set) as such.
func payloadCell(v any) string {
	if v == nil {
		return "(binary)"
	}
	return cell(v)
}

func retainedGet(c *cli, args []string) error {
	fs := c.flags("retained get")
	pos, err := c.parse(fs, args, 1, 1, "retained get TOPIC")
	if err != nil {
		return err
	}
	if strings.ContainsAny(pos[0], "+#") {
		return usagef("retained get takes a topic, not a filter (use retained ls %s)", pos[0])
	}
	var msgs []struct {
		Payload       *string `json:"payload"`
		PayloadBase64 string  `json:"payloadBase64"`
	}
	raw, err := c.call("GET", "/api/v1/retained", url.Values{"filter": {pos[0]}, "limit": {"1"}}, nil, &msgs)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return &apiError{404, fmt.Sprintf("no retained message on %s", pos[0])}
	}
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	if msgs[0].Payload != nil {
		_, err = io.WriteString(c.out, *msgs[0].Payload)
		return err
	}
	b, err := base64.StdEncoding.DecodeString(msgs[0].PayloadBase64)
	if err != nil {
		return err
	}
	_, err = c.out.Write(b)
	return err
}

func retainedRm(c *cli, args []string) error {
	fs := c.flags("retained rm")
	yes := fs.Bool("yes", false, "confirm a filter with wildcards")
	pos, err := c.parse(fs, args, 1, 1, "retained rm FILTER [--yes]")
	if err != nil {
		return err
	}
	if strings.ContainsAny(pos[0], "+#") && !*yes {
		return usagef("%s is a wildcard filter: add --yes to delete every retained message it matches (retained ls %s shows them)", pos[0], pos[0])
	}
	var res struct {
		Deleted int `json:"deleted"`
	}
	raw, err := c.call("DELETE", "/api/v1/retained", url.Values{"filter": {pos[0]}}, nil, &res)
	if err != nil {
		return err
	}
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintf(c.out, "deleted %d\n", res.Deleted)
	return nil
}

// listing runs a GET whose answer is a list, then prints it as JSON or
// as a table.
func listing(c *cli, args []string, usage, path string, cols []column) error {
	fs := c.flags(usage)
	if _, err := c.parse(fs, args, 0, 0, usage); err != nil {
		return err
	}
	raw, err := c.call("GET", path, nil, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, cols)
}

func queuesLs(c *cli, args []string) error {
	return listing(c, args, "queues ls", "/api/v1/queues", []column{{"NAME", "name", nil}, {"MESSAGES", "messages", nil},
		{"BYTES", "bytes", nil}, {"IN FLIGHT", "inFlight", nil}, {"CONSUMERS", "consumers", nil},
		{"IN/S", "rates.in", nil}, {"OUT/S", "rates.out", nil}, {"SUBSCRIPTIONS", "config.subscriptions", nil}})
}

func queuesCreate(c *cli, args []string) error {
	fs := c.flags("queues create")
	subs := fs.StringArray("subscribe", nil, "a topic filter the queue subscribes to (repeatable)")
	conf := fs.String("config", "", `the queue's configuration as JSON, as in queues.declare (e.g. '{"maxMessages":10000}')`)
	pos, err := c.parse(fs, args, 1, 1, "queues create NAME [--subscribe FILTER]... [--config JSON]")
	if err != nil {
		return err
	}
	body := map[string]any{}
	if *conf != "" {
		if err := json.Unmarshal([]byte(*conf), &body); err != nil {
			return usagef("--config: not a JSON object: %v", err)
		}
	}
	if len(*subs) > 0 {
		body["subscriptions"] = *subs
	}
	raw, err := c.call("PUT", "/api/v1/queues/"+url.PathEscape(pos[0]), nil, body, nil)
	if err != nil {
		return err
	}
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintf(c.out, "queue %s declared\n", pos[0])
	return nil
}

func queuesRm(c *cli, args []string) error {
	return deleteOne(c, args, "queues rm NAME", "/api/v1/queues/", "queue %s deleted")
}

func queuesBrowse(c *cli, args []string) error {
	fs := c.flags("queues browse")
	limit := fs.Int("limit", 100, "at most this many")
	after := fs.String("after", "", "the page after this message id (the last one listed)")
	pos, err := c.parse(fs, args, 1, 1, "queues browse NAME [--after ID] [--limit N]")
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *after != "" {
		q.Set("after", *after)
	}
	raw, err := c.call("GET", "/api/v1/queues/"+url.PathEscape(pos[0])+"/messages", q, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, []column{{"ID", "id", nil}, {"TOPIC", "topic", nil}, {"SIZE", "size", nil},
		{"DELIVERIES", "deliveryCount", nil}, {"CREATED", "created", nil}, {"PAYLOAD", "payload", nil}})
}

func queuesPurge(c *cli, args []string) error {
	fs := c.flags("queues purge")
	pos, err := c.parse(fs, args, 1, 1, "queues purge NAME")
	if err != nil {
		return err
	}
	var res struct {
		Purged int `json:"purged"`
	}
	raw, err := c.call("POST", "/api/v1/queues/"+url.PathEscape(pos[0])+"/purge", nil, nil, &res)
	if err != nil {
		return err
	}
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintf(c.out, "queue %s: %d messages purged\n", pos[0], res.Purged)
	return nil
}

func subscriptionsLs(c *cli, args []string) error {
	fs := c.flags("subscriptions ls")
	filter := fs.String("filter", "", "only this filter (exactly, without $share/)")
	client := fs.String("client", "", "only client (or container) ids beginning with this")
	proto := fs.String("protocol", "", "mqtt or amqp")
	limit := fs.Int("limit", 1000, "at most this many (the API's most: 10,000)")
	if _, err := c.parse(fs, args, 0, 0, "subscriptions ls [--filter F] [--client PREFIX] [--protocol mqtt|amqp] [--limit N]"); err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	setGiven(q, map[string]string{"filter": *filter, "clientId": *client, "protocol": *proto})
	raw, err := c.call("GET", "/api/v1/subscriptions", q, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, []column{{"CONNECTION", "connection", nil}, {"FILTER", "filter", nil}, {"QOS", "qos", nil},
		{"SHARE GROUP", "shareGroup", nil}, {"DURABLE", "durable", nil}})
}

func topicsLs(c *cli, args []string) error {
	fs := c.flags("topics ls")
	limit := fs.Int("limit", 1000, "at most this many (the API's most: 10,000)")
	pos, err := c.parse(fs, args, 0, 1, "topics ls [FILTER] [--limit N]")
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if len(pos) == 1 {
		q.Set("filter", pos[0])
	}
	raw, err := c.call("GET", "/api/v1/topics", q, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, []column{{"TOPIC", "topic", nil}, {"MESSAGES", "messages", nil}, {"MSG/S", "ratePerSecond", nil},
		{"LAST SEEN", "lastSeen", nil}, {"RETAINED", "retained", nil}})
}

func sessionsLs(c *cli, args []string) error {
	return listing(c, args, "sessions ls", "/api/v1/sessions", []column{{"CLIENT ID", "clientId", nil},
		{"CONNECTED", "connected", nil}, {"SUBSCRIPTIONS", "subscriptions", nil}, {"QUEUED", "queued", nil}})
}

func sessionsRm(c *cli, args []string) error {
	return deleteOne(c, args, "sessions rm CLIENTID", "/api/v1/sessions/", "session %s removed")
}

func bridgesLs(c *cli, args []string) error {
	return listing(c, args, "bridges ls", "/api/v1/bridges", []column{{"NAME", "name", nil}, {"STATE", "state", nil},
		{"URLS", "urls", nil}, {"RULES", "rules", func(v any) string {
			l, _ := v.([]any)
			return strconv.Itoa(len(l))
		}}, {"LAST ERROR", "lastError", nil}})
}

func clusterLs(c *cli, args []string) error {
	fs := c.flags("cluster ls")
	if _, err := c.parse(fs, args, 0, 0, "cluster ls"); err != nil {
		return err
	}
	raw, err := c.call("GET", "/api/v1/cluster", nil, nil, nil)
	if err != nil {
		return err
	}
	// The cluster's shape grows with the cluster work; people get the
	// JSON, indented, until it settles.
	c.printJSON(raw)
	return nil
}

func publish(c *cli, args []string) error {
	fs := c.flags("publish")
	text := fs.StringP("message", "m", "", "the payload, as text")
	file := fs.String("file", "", "read the payload from this file (- for stdin)")
	qos := fs.Uint8("qos", 0, "0 or 1")
	retain := fs.Bool("retain", false, "retain it")
	ct := fs.String("content-type", "", "content type")
	props := fs.StringArray("property", nil, "a user property K=V (repeatable)")
	expiry := fs.Uint32("expiry", 0, "message expiry in seconds (0: none)")
	pos, err := c.parse(fs, args, 1, 1, "publish TOPIC [-m TEXT | --file F] [--qos 0|1] [--retain] [--content-type T] [--property K=V]...")
	if err != nil {
		return err
	}
	req := map[string]any{"topic": pos[0], "qos": *qos, "retain": *retain, "contentType": *ct, "expirySeconds": *expiry}
	switch {
	case *file != "" && fs.Changed("message"):
		return usagef("give -m or --file, not both")
	case *file != "":
		var b []byte
		if *file == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(*file)
		}
		if err != nil {
			return usagef("--file: %v", err)
		}
		if utf8.Valid(b) {
			req["payload"] = string(b)
		} else {
			req["payloadBase64"] = base64.StdEncoding.EncodeToString(b)
		}
	default:
		req["payload"] = *text
	}
	if len(*props) > 0 {
		m := map[string]string{}
		for _, p := range *props {
			k, v, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return usagef("--property %q: K=V", p)
			}
			m[k] = v
		}
		req["userProperties"] = m
	}
	var res struct {
		Matched  int  `json:"matched"`
		Failed   int  `json:"failed"`
		Retained bool `json:"retained"`
	}
	raw, err := c.call("POST", "/api/v1/publish", nil, req, &res)
	if err != nil {
		return err
	}
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintf(c.out, "published to %s: %d subscribers", pos[0], res.Matched)
	if res.Failed > 0 {
		fmt.Fprintf(c.out, ", %d refused", res.Failed)
	}
	if res.Retained {
		fmt.Fprint(c.out, ", retained")
	}
	fmt.Fprintln(c.out)
	return nil
}

func connectionsLs(c *cli, args []string) error {
	fs := c.flags("connections ls")
	proto := fs.String("protocol", "", "mqtt or amqp")
	client := fs.String("client", "", "client or container id prefix")
	user := fs.String("user", "", "user")
	addr := fs.String("address", "", "remote address prefix")
	limit := fs.Int("limit", 1000, "at most this many")
	if _, err := c.parse(fs, args, 0, 0, "connections ls [--protocol mqtt|amqp] [--client PREFIX] [--user U] [--address PREFIX]"); err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	setGiven(q, map[string]string{"protocol": *proto, "clientId": *client, "address": *addr})
	if fs.Changed("user") {
		q.Set("user", *user)
	}
	raw, err := c.call("GET", "/api/v1/connections", q, nil, nil)
	if err != nil {
		return err
	}
	return c.show(raw, []column{{"ID", "id", nil}, {"PROTOCOL", "protocol", nil}, {"VERSION", "version", nil},
		{"CLIENT", "clientId", nil}, {"USER", "user", nil}, {"REMOTE", "remote", nil},
		{"SUBSCRIPTIONS", "subscriptions", nil}, {"QUEUED", "queued", nil}, {"MSGS IN", "messagesIn", nil},
		{"MSGS OUT", "messagesOut", nil}, {"SINCE", "connectedSince", nil}})
}

// setGiven sets the query parameters of params that have a value.
func setGiven(q url.Values, params map[string]string) {
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
}

func connectionsKick(c *cli, args []string) error {
	return deleteOne(c, args, "connections kick ID", "/api/v1/connections/", "connection %s closed")
}

// deleteOne runs a DELETE of one named thing (usage's one argument) at
// pathPrefix + name, and says done with msg (a format taking the name).
func deleteOne(c *cli, args []string, usage, pathPrefix, msg string) error {
	fs := c.flags(usage)
	pos, err := c.parse(fs, args, 1, 1, usage)
	if err != nil {
		return err
	}
	if _, err := c.call("DELETE", pathPrefix+url.PathEscape(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.asJSON {
		fmt.Fprintf(c.out, msg+"\n", pos[0])
	}
	return nil
}

// show prints a list the API answered: its JSON with --json, else a table
// of cols.
func (c *cli) show(raw []byte, cols []column) error {
	if c.asJSON {
		c.printJSON(raw)
		return nil
	}
	rows, err := objects(raw)
	if err != nil {
		return err
	}
	c.table(rows, cols)
	return nil
}
