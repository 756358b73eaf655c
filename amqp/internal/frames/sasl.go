package frames

import (
	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

/*
<type name="sasl-mechanisms" class="composite" source="list" provides="sasl-frame">

	<descriptor name="amqp:sasl-mechanisms:list" code="0x00000000:0x00000040"/>
	<field name="sasl-server-mechanisms" type="symbol" multiple="true" mandatory="true"/>

</type>
*/
type SASLMechanisms struct {
	SASLServerMechanisms []encoding.Symbol
}

func (m *SASLMechanisms) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSASLMechanisms, []encoding.EncField{
		{Value: &m.SASLServerMechanisms},
	})
}

func (m *SASLMechanisms) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSASLMechanisms, []encoding.DecField{
		{Value: &m.SASLServerMechanisms, Name: "sasl-server-mechanisms", Required: true},
	})
}

/*
<type name="sasl-init" class="composite" source="list" provides="sasl-frame">

	<descriptor name="amqp:sasl-init:list" code="0x00000000:0x00000041"/>
	<field name="mechanism" type="symbol" mandatory="true"/>
	<field name="initial-response" type="binary"/>
	<field name="hostname" type="string"/>

</type>
*/
type SASLInit struct {
	Mechanism       encoding.Symbol
	InitialResponse []byte // aliases the frame when decoded
	Hostname        string
}

func (i *SASLInit) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSASLInit, []encoding.EncField{
		{Value: &i.Mechanism},
		{Value: &i.InitialResponse, Omit: i.InitialResponse == nil},
		{Value: &i.Hostname, Omit: i.Hostname == ""},
	})
}

func (i *SASLInit) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSASLInit, []encoding.DecField{
		{Value: &i.Mechanism, Name: "mechanism", Required: true},
		{Value: &i.InitialResponse, Name: "initial-response"},
		{Value: &i.Hostname, Name: "hostname"},
	})
}

/*
<type name="sasl-challenge" class="composite" source="list" provides="sasl-frame">

	<descriptor name="amqp:sasl-challenge:list" code="0x00000000:0x00000042"/>
	<field name="challenge" type="binary" mandatory="true"/>

</type>
*/
type SASLChallenge struct {
	Challenge []byte
}

func (c *SASLChallenge) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSASLChallenge, []encoding.EncField{
		{Value: &c.Challenge},
	})
}

func (c *SASLChallenge) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSASLChallenge, []encoding.DecField{
		{Value: &c.Challenge, Name: "challenge", Required: true},
	})
}

/*
<type name="sasl-response" class="composite" source="list" provides="sasl-frame">

	<descriptor name="amqp:sasl-response:list" code="0x00000000:0x00000043"/>
	<field name="response" type="binary" mandatory="true"/>

</type>
*/
type SASLResponse struct {
	Response []byte
}

func (c *SASLResponse) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSASLResponse, []encoding.EncField{
		{Value: &c.Response},
	})
}

func (c *SASLResponse) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSASLResponse, []encoding.DecField{
		{Value: &c.Response, Name: "response", Required: true},
	})
}

/*
<type name="sasl-code" class="restricted" source="ubyte">

	<choice name="ok" value="0"/>
	<choice name="auth" value="1"/>
	<choice name="sys" value="2"/>
	<choice name="sys-perm" value="3"/>
	<choice name="sys-temp" value="4"/>

</type>
*/
type SASLCode uint8

const (
	SASLCodeOK      SASLCode = 0 // authentication succeeded
	SASLCodeAuth    SASLCode = 1 // failed: credentials rejected
	SASLCodeSys     SASLCode = 2 // failed: system error
	SASLCodeSysPerm SASLCode = 3 // failed: unrecoverable system error
	SASLCodeSysTemp SASLCode = 4 // failed: transient system error
)

/*
<type name="sasl-outcome" class="composite" source="list" provides="sasl-frame">

	<descriptor name="amqp:sasl-outcome:list" code="0x00000000:0x00000044"/>
	<field name="code" type="sasl-code" mandatory="true"/>
	<field name="additional-data" type="binary"/>

</type>
*/
type SASLOutcome struct {
	Code           SASLCode
	AdditionalData []byte
}

func (o *SASLOutcome) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeSASLOutcome, []encoding.EncField{
		{Value: (*uint8)(&o.Code)},
		{Value: &o.AdditionalData, Omit: o.AdditionalData == nil},
	})
}

func (o *SASLOutcome) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeSASLOutcome, []encoding.DecField{
		{Value: (*uint8)(&o.Code), Name: "code", Required: true},
		{Value: &o.AdditionalData, Name: "additional-data"},
	})
}

func (*SASLMechanisms) FrameType() Type { return TypeSASL }
func (*SASLInit) FrameType() Type       { return TypeSASL }
func (*SASLChallenge) FrameType() Type  { return TypeSASL }
func (*SASLResponse) FrameType() Type   { return TypeSASL }
func (*SASLOutcome) FrameType() Type    { return TypeSASL }
