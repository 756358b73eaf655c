package frames

import (
	"fmt"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// Descriptor codes (domain 0x00000000) of the composites in this package.
const (
	codeOpen        = 0x10
	codeBegin       = 0x11
	codeAttach      = 0x12
	codeFlow        = 0x13
	codeTransfer    = 0x14
	codeDisposition = 0x15
	codeDetach      = 0x16
	codeEnd         = 0x17
	codeClose       = 0x18
	codeError       = 0x1d
	codeReceived    = 0x23
	codeAccepted    = 0x24
	codeRejected    = 0x25
	codeReleased    = 0x26
	codeModified    = 0x27
	codeSource      = 0x28
	codeTarget      = 0x29
	codeCoordinator = 0x30 // amqp:coordinator:list (part 4 section 4.5.1)

	codeSASLMechanisms = 0x40
	codeSASLInit       = 0x41
	codeSASLChallenge  = 0x42
	codeSASLResponse   = 0x43
	codeSASLOutcome    = 0x44

	codeHeader                = 0x70
	codeDeliveryAnnotations   = 0x71
	codeMessageAnnotations    = 0x72
	codeProperties            = 0x73
	codeApplicationProperties = 0x74
	codeData                  = 0x75
	codeAMQPSequence          = 0x76
	codeAMQPValue             = 0x77
	codeFooter                = 0x78
)

/*
<type name="role" class="restricted" source="boolean">

	<choice name="sender" value="false"/>
	<choice name="receiver" value="true"/>

</type>
*/
type Role bool

const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

func (r Role) String() string {
	if r {
		return "receiver"
	}
	return "sender"
}

func (r Role) MarshalAMQP(w *buffer.Buffer) error { encoding.WriteBool(w, bool(r)); return nil }

func (r *Role) UnmarshalAMQP(b *buffer.Buffer) error {
	v, err := encoding.ReadBool(b)
	*r = Role(v)
	return err
}

/*
<type name="sender-settle-mode" class="restricted" source="ubyte">

	<choice name="unsettled" value="0"/>
	<choice name="settled" value="1"/>
	<choice name="mixed" value="2"/>

</type>
*/
type SenderSettleMode uint8

const (
	SenderSettleModeUnsettled SenderSettleMode = 0
	SenderSettleModeSettled   SenderSettleMode = 1
	SenderSettleModeMixed     SenderSettleMode = 2
)

func (m SenderSettleMode) String() string {
	switch m {
	case SenderSettleModeUnsettled:
		return "unsettled"
	case SenderSettleModeSettled:
		return "settled"
	case SenderSettleModeMixed:
		return "mixed"
	}
	return fmt.Sprintf("sender-settle-mode(%d)", uint8(m))
}

func (m SenderSettleMode) MarshalAMQP(w *buffer.Buffer) error {
	encoding.WriteUbyte(w, uint8(m))
	return nil
}

func (m *SenderSettleMode) UnmarshalAMQP(r *buffer.Buffer) error {
	v, err := encoding.ReadUbyte(r)
	if err == nil && v > 2 {
		return fmt.Errorf("invalid sender-settle-mode %d", v)
	}
	*m = SenderSettleMode(v)
	return err
}

/*
<type name="receiver-settle-mode" class="restricted" source="ubyte">

	<choice name="first" value="0"/>
	<choice name="second" value="1"/>

</type>
*/
type ReceiverSettleMode uint8

const (
	ReceiverSettleModeFirst  ReceiverSettleMode = 0
	ReceiverSettleModeSecond ReceiverSettleMode = 1
)

func (m ReceiverSettleMode) String() string {
	switch m {
	case ReceiverSettleModeFirst:
		return "first"
	case ReceiverSettleModeSecond:
		return "second"
	}
	return fmt.Sprintf("receiver-settle-mode(%d)", uint8(m))
}

func (m ReceiverSettleMode) MarshalAMQP(w *buffer.Buffer) error {
	encoding.WriteUbyte(w, uint8(m))
	return nil
}

func (m *ReceiverSettleMode) UnmarshalAMQP(r *buffer.Buffer) error {
	v, err := encoding.ReadUbyte(r)
	if err == nil && v > 1 {
		return fmt.Errorf("invalid receiver-settle-mode %d", v)
	}
	*m = ReceiverSettleMode(v)
	return err
}

// Standard error conditions (part 2 sections 2.8.15-2.8.18).
const (
	ErrCondInternalError         encoding.Symbol = "amqp:internal-error"
	ErrCondNotFound              encoding.Symbol = "amqp:not-found"
	ErrCondUnauthorizedAccess    encoding.Symbol = "amqp:unauthorized-access"
	ErrCondDecodeError           encoding.Symbol = "amqp:decode-error"
	ErrCondResourceLimitExceeded encoding.Symbol = "amqp:resource-limit-exceeded"
	ErrCondNotAllowed            encoding.Symbol = "amqp:not-allowed"
	ErrCondInvalidField          encoding.Symbol = "amqp:invalid-field"
	ErrCondNotImplemented        encoding.Symbol = "amqp:not-implemented"
	ErrCondResourceLocked        encoding.Symbol = "amqp:resource-locked"
	ErrCondPreconditionFailed    encoding.Symbol = "amqp:precondition-failed"
	ErrCondResourceDeleted       encoding.Symbol = "amqp:resource-deleted"
	ErrCondIllegalState          encoding.Symbol = "amqp:illegal-state"
	ErrCondFrameSizeTooSmall     encoding.Symbol = "amqp:frame-size-too-small"

	ErrCondConnectionForced   encoding.Symbol = "amqp:connection:forced"
	ErrCondFramingError       encoding.Symbol = "amqp:connection:framing-error"
	ErrCondConnectionRedirect encoding.Symbol = "amqp:connection:redirect"

	ErrCondWindowViolation  encoding.Symbol = "amqp:session:window-violation"
	ErrCondErrantLink       encoding.Symbol = "amqp:session:errant-link"
	ErrCondHandleInUse      encoding.Symbol = "amqp:session:handle-in-use"
	ErrCondUnattachedHandle encoding.Symbol = "amqp:session:unattached-handle"

	ErrCondDetachForced          encoding.Symbol = "amqp:link:detach-forced"
	ErrCondTransferLimitExceeded encoding.Symbol = "amqp:link:transfer-limit-exceeded"
	ErrCondMessageSizeExceeded   encoding.Symbol = "amqp:link:message-size-exceeded"
	ErrCondLinkRedirect          encoding.Symbol = "amqp:link:redirect"
	ErrCondStolen                encoding.Symbol = "amqp:link:stolen"
)

/*
<type name="error" class="composite" source="list">

	<descriptor name="amqp:error:list" code="0x00000000:0x0000001d"/>
	<field name="condition" type="symbol" requires="error-condition" mandatory="true"/>
	<field name="description" type="string"/>
	<field name="info" type="fields"/>

</type>
*/
type Error struct {
	Condition   encoding.Symbol
	Description string
	Info        encoding.Fields
}

func (e *Error) Error() string {
	if e.Description == "" {
		return string(e.Condition)
	}
	return string(e.Condition) + ": " + e.Description
}

func (e *Error) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeError, []encoding.EncField{
		{Value: &e.Condition},
		{Value: &e.Description, Omit: e.Description == ""},
		{Value: &e.Info, Omit: e.Info == nil},
	})
}

func (e *Error) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeError, []encoding.DecField{
		{Value: &e.Condition, Name: "condition", Required: true},
		{Value: &e.Description, Name: "description"},
		{Value: &e.Info, Name: "info"},
	})
}

// Terminus durability (part 3 section 3.5.5) and expiry policy (3.5.6).
const (
	DurabilityNone           uint32 = 0
	DurabilityConfiguration  uint32 = 1
	DurabilityUnsettledState uint32 = 2

	ExpiryLinkDetach      encoding.Symbol = "link-detach"
	ExpirySessionEnd      encoding.Symbol = "session-end"
	ExpiryConnectionClose encoding.Symbol = "connection-close"
	ExpiryNever           encoding.Symbol = "never"
)

/*
<type name="source" class="composite" source="list" provides="source">

	<descriptor name="amqp:source:list" code="0x00000000:0x00000028"/>
	<field name="address" type="*" requires="address"/>
	<field name="durable" type="terminus-durability" default="none"/>
	<field name="expiry-policy" type="terminus-expiry-policy" default="session-end"/>
	<field name="timeout" type="seconds" default="0"/>
	<field name="dynamic" type="boolean" default="false"/>
	<field name="dynamic-node-properties" type="node-properties"/>
	<field name="distribution-mode" type="symbol" requires="distribution-mode"/>
	<field name="filter" type="filter-set"/>
	<field name="default-outcome" type="*" requires="outcome"/>
	<field name="outcomes" type="symbol" multiple="true"/>
	<field name="capabilities" type="symbol" multiple="true"/>

</type>
*/
type Source struct {
	Address               string          // "" when absent (a dynamic receiver's request)
	Durable               uint32          // terminus-durability; Durability* constants
	ExpiryPolicy          encoding.Symbol // "" when absent, meaning session-end
	Timeout               uint32          // seconds
	Dynamic               bool
	DynamicNodeProperties encoding.Fields
	DistributionMode      encoding.Symbol // "move" or "copy"
	Filter                encoding.Fields // filter-set: values are described filters
	DefaultOutcome        DeliveryState
	Outcomes              []encoding.Symbol
	Capabilities          []encoding.Symbol
}

func (s *Source) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSource, []encoding.EncField{
		{Value: &s.Address, Omit: s.Address == ""},
		{Value: &s.Durable, Default: s.Durable == DurabilityNone},
		{Value: &s.ExpiryPolicy, Omit: s.ExpiryPolicy == ""},
		{Value: &s.Timeout, Default: s.Timeout == 0},
		{Value: &s.Dynamic, Default: !s.Dynamic},
		{Value: &s.DynamicNodeProperties, Omit: s.DynamicNodeProperties == nil},
		{Value: &s.DistributionMode, Omit: s.DistributionMode == ""},
		{Value: &s.Filter, Omit: s.Filter == nil},
		{Value: s.DefaultOutcome, Omit: s.DefaultOutcome == nil},
		{Value: &s.Outcomes, Omit: s.Outcomes == nil},
		{Value: &s.Capabilities, Omit: s.Capabilities == nil},
	})
}

func (s *Source) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSource, []encoding.DecField{
		{Value: &s.Address, Name: "address"},
		{Value: &s.Durable, Name: "durable"},
		{Value: &s.ExpiryPolicy, Name: "expiry-policy"},
		{Value: &s.Timeout, Name: "timeout"},
		{Value: &s.Dynamic, Name: "dynamic"},
		{Value: &s.DynamicNodeProperties, Name: "dynamic-node-properties"},
		{Value: &s.DistributionMode, Name: "distribution-mode"},
		{Value: &s.Filter, Name: "filter"},
		{Value: stateField{&s.DefaultOutcome}, Name: "default-outcome"},
		{Value: &s.Outcomes, Name: "outcomes"},
		{Value: &s.Capabilities, Name: "capabilities"},
	})
}

/*
<type name="target" class="composite" source="list" provides="target">

	<descriptor name="amqp:target:list" code="0x00000000:0x00000029"/>
	<field name="address" type="*" requires="address"/>
	<field name="durable" type="terminus-durability" default="none"/>
	<field name="expiry-policy" type="terminus-expiry-policy" default="session-end"/>
	<field name="timeout" type="seconds" default="0"/>
	<field name="dynamic" type="boolean" default="false"/>
	<field name="dynamic-node-properties" type="node-properties"/>
	<field name="capabilities" type="symbol" multiple="true"/>

</type>
*/
type Target struct {
	// Coordinator marks a transaction coordinator (part 4 section 4.5.1:
	// <type name="coordinator" class="composite" source="list"
	// provides="target"> with the one field capabilities), which a sender
	// attaches to for local transactions (Qpid JMS transacted sessions).
	// Only Capabilities is meaningful then. Decoding it, rather than
	// failing the whole attach, lets the link be refused alone.
	Coordinator           bool
	Address               string
	Durable               uint32
	ExpiryPolicy          encoding.Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties encoding.Fields
	Capabilities          []encoding.Symbol
}

func (t *Target) MarshalAMQP(w *buffer.Buffer) error {
	if t.Coordinator {
		return encoding.WriteComposite(w, codeCoordinator, []encoding.EncField{
			{Value: &t.Capabilities, Omit: t.Capabilities == nil},
		})
	}
	return encoding.WriteComposite(w, codeTarget, []encoding.EncField{
		{Value: &t.Address, Omit: t.Address == ""},
		{Value: &t.Durable, Default: t.Durable == DurabilityNone},
		{Value: &t.ExpiryPolicy, Omit: t.ExpiryPolicy == ""},
		{Value: &t.Timeout, Default: t.Timeout == 0},
		{Value: &t.Dynamic, Default: !t.Dynamic},
		{Value: &t.DynamicNodeProperties, Omit: t.DynamicNodeProperties == nil},
		{Value: &t.Capabilities, Omit: t.Capabilities == nil},
	})
}

func (t *Target) UnmarshalAMQP(r *buffer.Buffer) error {
	if code, err := encoding.PeekDescriptor(r); err == nil && code == codeCoordinator {
		t.Coordinator = true
		return encoding.ReadComposite(r, codeCoordinator, []encoding.DecField{
			{Value: &t.Capabilities, Name: "capabilities"},
		})
	}
	return encoding.ReadComposite(r, codeTarget, []encoding.DecField{
		{Value: &t.Address, Name: "address"},
		{Value: &t.Durable, Name: "durable"},
		{Value: &t.ExpiryPolicy, Name: "expiry-policy"},
		{Value: &t.Timeout, Name: "timeout"},
		{Value: &t.Dynamic, Name: "dynamic"},
		{Value: &t.DynamicNodeProperties, Name: "dynamic-node-properties"},
		{Value: &t.Capabilities, Name: "capabilities"},
	})
}
