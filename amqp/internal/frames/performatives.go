package frames

import (
	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// Performative is the body of an AMQP or SASL frame: one of *Open, *Begin,
// *Attach, *Flow, *Transfer, *Disposition, *Detach, *End, *Close, or
// *SASLMechanisms, *SASLInit, *SASLChallenge, *SASLResponse, *SASLOutcome.
type Performative interface {
	encoding.Marshaler
	encoding.Unmarshaler
	// FrameType is the frame type the performative travels in.
	FrameType() Type
}

/*
<type name="open" class="composite" source="list" provides="frame">

	<descriptor name="amqp:open:list" code="0x00000000:0x00000010"/>
	<field name="container-id" type="string" mandatory="true"/>
	<field name="hostname" type="string"/>
	<field name="max-frame-size" type="uint" default="4294967295"/>
	<field name="channel-max" type="ushort" default="65535"/>
	<field name="idle-time-out" type="milliseconds"/>
	<field name="outgoing-locales" type="ietf-language-tag" multiple="true"/>
	<field name="incoming-locales" type="ietf-language-tag" multiple="true"/>
	<field name="offered-capabilities" type="symbol" multiple="true"/>
	<field name="desired-capabilities" type="symbol" multiple="true"/>
	<field name="properties" type="fields"/>

</type>
*/
type Open struct {
	ContainerID         string
	Hostname            string
	MaxFrameSize        uint32  // 0: absent, meaning 4294967295
	ChannelMax          *uint16 // nil: absent, meaning 65535
	IdleTimeOut         uint32  // milliseconds; 0: absent, no idle time-out
	OutgoingLocales     []encoding.Symbol
	IncomingLocales     []encoding.Symbol
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Fields
}

func (o *Open) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeOpen, []encoding.EncField{
		{Value: &o.ContainerID},
		{Value: &o.Hostname, Omit: o.Hostname == ""},
		{Value: &o.MaxFrameSize, Omit: o.MaxFrameSize == 0},
		{Value: &o.ChannelMax, Omit: o.ChannelMax == nil},
		{Value: &o.IdleTimeOut, Omit: o.IdleTimeOut == 0},
		{Value: &o.OutgoingLocales, Omit: o.OutgoingLocales == nil},
		{Value: &o.IncomingLocales, Omit: o.IncomingLocales == nil},
		{Value: &o.OfferedCapabilities, Omit: o.OfferedCapabilities == nil},
		{Value: &o.DesiredCapabilities, Omit: o.DesiredCapabilities == nil},
		{Value: &o.Properties, Omit: o.Properties == nil},
	})
}

func (o *Open) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeOpen, []encoding.DecField{
		{Value: &o.ContainerID, Name: "container-id", Required: true},
		{Value: &o.Hostname, Name: "hostname"},
		{Value: &o.MaxFrameSize, Name: "max-frame-size"},
		{Value: &o.ChannelMax, Name: "channel-max"},
		{Value: &o.IdleTimeOut, Name: "idle-time-out"},
		{Value: &o.OutgoingLocales, Name: "outgoing-locales"},
		{Value: &o.IncomingLocales, Name: "incoming-locales"},
		{Value: &o.OfferedCapabilities, Name: "offered-capabilities"},
		{Value: &o.DesiredCapabilities, Name: "desired-capabilities"},
		{Value: &o.Properties, Name: "properties"},
	})
}

/*
<type name="begin" class="composite" source="list" provides="frame">

	<descriptor name="amqp:begin:list" code="0x00000000:0x00000011"/>
	<field name="remote-channel" type="ushort"/>
	<field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
	<field name="incoming-window" type="uint" mandatory="true"/>
	<field name="outgoing-window" type="uint" mandatory="true"/>
	<field name="handle-max" type="handle" default="4294967295"/>
	<field name="offered-capabilities" type="symbol" multiple="true"/>
	<field name="desired-capabilities" type="symbol" multiple="true"/>
	<field name="properties" type="fields"/>

</type>
*/
type Begin struct {
	RemoteChannel       *uint16 // nil: absent (a begin the peer initiated)
	NextOutgoingID      uint32
	IncomingWindow      uint32
	OutgoingWindow      uint32
	HandleMax           *uint32 // nil: absent, meaning 4294967295
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Fields
}

func (b *Begin) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeBegin, []encoding.EncField{
		{Value: &b.RemoteChannel, Omit: b.RemoteChannel == nil},
		{Value: &b.NextOutgoingID},
		{Value: &b.IncomingWindow},
		{Value: &b.OutgoingWindow},
		{Value: &b.HandleMax, Omit: b.HandleMax == nil},
		{Value: &b.OfferedCapabilities, Omit: b.OfferedCapabilities == nil},
		{Value: &b.DesiredCapabilities, Omit: b.DesiredCapabilities == nil},
		{Value: &b.Properties, Omit: b.Properties == nil},
	})
}

func (b *Begin) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeBegin, []encoding.DecField{
		{Value: &b.RemoteChannel, Name: "remote-channel"},
		{Value: &b.NextOutgoingID, Name: "next-outgoing-id", Required: true},
		{Value: &b.IncomingWindow, Name: "incoming-window", Required: true},
		{Value: &b.OutgoingWindow, Name: "outgoing-window", Required: true},
		{Value: &b.HandleMax, Name: "handle-max"},
		{Value: &b.OfferedCapabilities, Name: "offered-capabilities"},
		{Value: &b.DesiredCapabilities, Name: "desired-capabilities"},
		{Value: &b.Properties, Name: "properties"},
	})
}

/*
<type name="attach" class="composite" source="list" provides="frame">

	<descriptor name="amqp:attach:list" code="0x00000000:0x00000012"/>
	<field name="name" type="string" mandatory="true"/>
	<field name="handle" type="handle" mandatory="true"/>
	<field name="role" type="role" mandatory="true"/>
	<field name="snd-settle-mode" type="sender-settle-mode" default="mixed"/>
	<field name="rcv-settle-mode" type="receiver-settle-mode" default="first"/>
	<field name="source" type="*" requires="source"/>
	<field name="target" type="*" requires="target"/>
	<field name="unsettled" type="map"/>
	<field name="incomplete-unsettled" type="boolean" default="false"/>
	<field name="initial-delivery-count" type="sequence-no"/>
	<field name="max-message-size" type="ulong"/>
	<field name="offered-capabilities" type="symbol" multiple="true"/>
	<field name="desired-capabilities" type="symbol" multiple="true"/>
	<field name="properties" type="fields"/>

</type>
*/
type Attach struct {
	Name                 string
	Handle               uint32
	Role                 Role
	SndSettleMode        *SenderSettleMode   // nil: absent, meaning mixed
	RcvSettleMode        *ReceiverSettleMode // nil: absent, meaning first
	Source               *Source
	Target               *Target
	Unsettled            encoding.Map // delivery-tag → delivery-state, kept generic
	IncompleteUnsettled  bool
	InitialDeliveryCount *uint32 // set by the sender only
	MaxMessageSize       uint64  // 0: absent or zero, both meaning no limit
	OfferedCapabilities  []encoding.Symbol
	DesiredCapabilities  []encoding.Symbol
	Properties           encoding.Fields
}

func (a *Attach) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeAttach, []encoding.EncField{
		{Value: &a.Name},
		{Value: &a.Handle},
		{Value: &a.Role},
		{Value: a.SndSettleMode, Omit: a.SndSettleMode == nil},
		{Value: a.RcvSettleMode, Omit: a.RcvSettleMode == nil},
		{Value: a.Source, Omit: a.Source == nil},
		{Value: a.Target, Omit: a.Target == nil},
		{Value: &a.Unsettled, Omit: a.Unsettled == nil},
		{Value: &a.IncompleteUnsettled, Default: !a.IncompleteUnsettled},
		{Value: &a.InitialDeliveryCount, Omit: a.InitialDeliveryCount == nil},
		{Value: &a.MaxMessageSize, Omit: a.MaxMessageSize == 0},
		{Value: &a.OfferedCapabilities, Omit: a.OfferedCapabilities == nil},
		{Value: &a.DesiredCapabilities, Omit: a.DesiredCapabilities == nil},
		{Value: &a.Properties, Omit: a.Properties == nil},
	})
}

func (a *Attach) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeAttach, []encoding.DecField{
		{Value: &a.Name, Name: "name", Required: true},
		{Value: &a.Handle, Name: "handle", Required: true},
		{Value: &a.Role, Name: "role", Required: true},
		{Value: encoding.Optional(&a.SndSettleMode), Name: "snd-settle-mode"},
		{Value: encoding.Optional(&a.RcvSettleMode), Name: "rcv-settle-mode"},
		{Value: encoding.Optional(&a.Source), Name: "source"},
		{Value: encoding.Optional(&a.Target), Name: "target"},
		{Value: &a.Unsettled, Name: "unsettled"},
		{Value: &a.IncompleteUnsettled, Name: "incomplete-unsettled"},
		{Value: &a.InitialDeliveryCount, Name: "initial-delivery-count"},
		{Value: &a.MaxMessageSize, Name: "max-message-size"},
		{Value: &a.OfferedCapabilities, Name: "offered-capabilities"},
		{Value: &a.DesiredCapabilities, Name: "desired-capabilities"},
		{Value: &a.Properties, Name: "properties"},
	})
}

/*
<type name="flow" class="composite" source="list" provides="frame">

	<descriptor name="amqp:flow:list" code="0x00000000:0x00000013"/>
	<field name="next-incoming-id" type="transfer-number"/>
	<field name="incoming-window" type="uint" mandatory="true"/>
	<field name="next-outgoing-id" type="transfer-number" mandatory="true"/>
	<field name="outgoing-window" type="uint" mandatory="true"/>
	<field name="handle" type="handle"/>
	<field name="delivery-count" type="sequence-no"/>
	<field name="link-credit" type="uint"/>
	<field name="available" type="uint"/>
	<field name="drain" type="boolean" default="false"/>
	<field name="echo" type="boolean" default="false"/>
	<field name="properties" type="fields"/>

</type>
*/
type Flow struct {
	NextIncomingID *uint32
	IncomingWindow uint32
	NextOutgoingID uint32
	OutgoingWindow uint32
	Handle         *uint32 // nil: a session-level flow
	DeliveryCount  *uint32
	LinkCredit     *uint32
	Available      *uint32
	Drain          bool
	Echo           bool
	Properties     encoding.Fields
}

func (f *Flow) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeFlow, []encoding.EncField{
		{Value: &f.NextIncomingID, Omit: f.NextIncomingID == nil},
		{Value: &f.IncomingWindow},
		{Value: &f.NextOutgoingID},
		{Value: &f.OutgoingWindow},
		{Value: &f.Handle, Omit: f.Handle == nil},
		{Value: &f.DeliveryCount, Omit: f.DeliveryCount == nil},
		{Value: &f.LinkCredit, Omit: f.LinkCredit == nil},
		{Value: &f.Available, Omit: f.Available == nil},
		{Value: &f.Drain, Default: !f.Drain},
		{Value: &f.Echo, Default: !f.Echo},
		{Value: &f.Properties, Omit: f.Properties == nil},
	})
}

func (f *Flow) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeFlow, []encoding.DecField{
		{Value: &f.NextIncomingID, Name: "next-incoming-id"},
		{Value: &f.IncomingWindow, Name: "incoming-window", Required: true},
		{Value: &f.NextOutgoingID, Name: "next-outgoing-id", Required: true},
		{Value: &f.OutgoingWindow, Name: "outgoing-window", Required: true},
		{Value: &f.Handle, Name: "handle"},
		{Value: &f.DeliveryCount, Name: "delivery-count"},
		{Value: &f.LinkCredit, Name: "link-credit"},
		{Value: &f.Available, Name: "available"},
		{Value: &f.Drain, Name: "drain"},
		{Value: &f.Echo, Name: "echo"},
		{Value: &f.Properties, Name: "properties"},
	})
}

/*
<type name="transfer" class="composite" source="list" provides="frame">

	<descriptor name="amqp:transfer:list" code="0x00000000:0x00000014"/>
	<field name="handle" type="handle" mandatory="true"/>
	<field name="delivery-id" type="delivery-number"/>
	<field name="delivery-tag" type="delivery-tag"/>
	<field name="message-format" type="message-format"/>
	<field name="settled" type="boolean"/>
	<field name="more" type="boolean" default="false"/>
	<field name="rcv-settle-mode" type="receiver-settle-mode"/>
	<field name="state" type="*" requires="delivery-state"/>
	<field name="resume" type="boolean" default="false"/>
	<field name="aborted" type="boolean" default="false"/>
	<field name="batchable" type="boolean" default="false"/>

</type>
*/
type Transfer struct {
	Handle        uint32
	DeliveryID    *uint32 // nil on continuation transfers
	DeliveryTag   []byte  // aliases the frame when decoded; nil when absent
	MessageFormat *uint32 // nil on continuation transfers
	Settled       bool
	More          bool
	RcvSettleMode *ReceiverSettleMode
	State         DeliveryState
	Resume        bool
	Aborted       bool
	Batchable     bool
}

func (t *Transfer) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeTransfer, []encoding.EncField{
		{Value: &t.Handle},
		{Value: &t.DeliveryID, Omit: t.DeliveryID == nil},
		{Value: &t.DeliveryTag, Omit: t.DeliveryTag == nil},
		{Value: &t.MessageFormat, Omit: t.MessageFormat == nil},
		{Value: &t.Settled, Default: !t.Settled},
		{Value: &t.More, Default: !t.More},
		{Value: t.RcvSettleMode, Omit: t.RcvSettleMode == nil},
		{Value: t.State, Omit: t.State == nil},
		{Value: &t.Resume, Default: !t.Resume},
		{Value: &t.Aborted, Default: !t.Aborted},
		{Value: &t.Batchable, Default: !t.Batchable},
	})
}

func (t *Transfer) UnmarshalAMQP(r *buffer.Buffer) error {
	return t.unmarshal(r, nil, nil)
}

// unmarshal decodes t, pointing DeliveryID and MessageFormat at the given
// storage (when non-nil) instead of allocating: DecodeBody allocates the
// Transfer and that storage together, one allocation per transfer frame.
func (t *Transfer) unmarshal(r *buffer.Buffer, deliveryID, messageFormat *uint32) error {
	return encoding.ReadComposite(r, codeTransfer, []encoding.DecField{
		{Value: &t.Handle, Name: "handle", Required: true},
		{Value: &t.DeliveryID, Name: "delivery-id", Scratch: deliveryID},
		{Value: &t.DeliveryTag, Name: "delivery-tag"},
		{Value: &t.MessageFormat, Name: "message-format", Scratch: messageFormat},
		{Value: &t.Settled, Name: "settled"},
		{Value: &t.More, Name: "more"},
		{Value: encoding.Optional(&t.RcvSettleMode), Name: "rcv-settle-mode"},
		{Value: stateField{&t.State}, Name: "state"},
		{Value: &t.Resume, Name: "resume"},
		{Value: &t.Aborted, Name: "aborted"},
		{Value: &t.Batchable, Name: "batchable"},
	})
}

/*
<type name="disposition" class="composite" source="list" provides="frame">

	<descriptor name="amqp:disposition:list" code="0x00000000:0x00000015"/>
	<field name="role" type="role" mandatory="true"/>
	<field name="first" type="delivery-number" mandatory="true"/>
	<field name="last" type="delivery-number"/>
	<field name="settled" type="boolean" default="false"/>
	<field name="state" type="*" requires="delivery-state"/>
	<field name="batchable" type="boolean" default="false"/>

</type>
*/
type Disposition struct {
	Role      Role
	First     uint32
	Last      *uint32 // nil: same as First
	Settled   bool
	State     DeliveryState
	Batchable bool
}

func (d *Disposition) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeDisposition, []encoding.EncField{
		{Value: &d.Role},
		{Value: &d.First},
		{Value: &d.Last, Omit: d.Last == nil},
		{Value: &d.Settled, Default: !d.Settled},
		{Value: d.State, Omit: d.State == nil},
		{Value: &d.Batchable, Default: !d.Batchable},
	})
}

func (d *Disposition) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeDisposition, []encoding.DecField{
		{Value: &d.Role, Name: "role", Required: true},
		{Value: &d.First, Name: "first", Required: true},
		{Value: &d.Last, Name: "last"},
		{Value: &d.Settled, Name: "settled"},
		{Value: stateField{&d.State}, Name: "state"},
		{Value: &d.Batchable, Name: "batchable"},
	})
}

/*
<type name="detach" class="composite" source="list" provides="frame">

	<descriptor name="amqp:detach:list" code="0x00000000:0x00000016"/>
	<field name="handle" type="handle" mandatory="true"/>
	<field name="closed" type="boolean" default="false"/>
	<field name="error" type="error"/>

</type>
*/
type Detach struct {
	Handle uint32
	Closed bool
	Error  *Error
}

func (d *Detach) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeDetach, []encoding.EncField{
		{Value: &d.Handle},
		{Value: &d.Closed, Default: !d.Closed},
		{Value: d.Error, Omit: d.Error == nil},
	})
}

func (d *Detach) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeDetach, []encoding.DecField{
		{Value: &d.Handle, Name: "handle", Required: true},
		{Value: &d.Closed, Name: "closed"},
		{Value: encoding.Optional(&d.Error), Name: "error"},
	})
}

/*
<type name="end" class="composite" source="list" provides="frame">

	<descriptor name="amqp:end:list" code="0x00000000:0x00000017"/>
	<field name="error" type="error"/>

</type>
*/
type End struct {
	Error *Error
}

func (e *End) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeEnd, []encoding.EncField{
		{Value: e.Error, Omit: e.Error == nil},
	})
}

func (e *End) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeEnd, []encoding.DecField{
		{Value: encoding.Optional(&e.Error), Name: "error"},
	})
}

/*
<type name="close" class="composite" source="list" provides="frame">

	<descriptor name="amqp:close:list" code="0x00000000:0x00000018"/>
	<field name="error" type="error"/>

</type>
*/
type Close struct {
	Error *Error
}

func (c *Close) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeClose, []encoding.EncField{
		{Value: c.Error, Omit: c.Error == nil},
	})
}

func (c *Close) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeClose, []encoding.DecField{
		{Value: encoding.Optional(&c.Error), Name: "error"},
	})
}

func (*Open) FrameType() Type        { return TypeAMQP }
func (*Begin) FrameType() Type       { return TypeAMQP }
func (*Attach) FrameType() Type      { return TypeAMQP }
func (*Flow) FrameType() Type        { return TypeAMQP }
func (*Transfer) FrameType() Type    { return TypeAMQP }
func (*Disposition) FrameType() Type { return TypeAMQP }
func (*Detach) FrameType() Type      { return TypeAMQP }
func (*End) FrameType() Type         { return TypeAMQP }
func (*Close) FrameType() Type       { return TypeAMQP }
