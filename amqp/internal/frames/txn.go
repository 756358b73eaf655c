package frames

import (
	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// Transactions (AMQP 1.0 part 4): the coordinator target, the control
// messages a controller sends it, and the delivery states that carry a
// transaction.

const (
	codeCoordinator        = 0x30
	CodeDeclare            = 0x31 // the amqp-value body of a declare control message
	CodeDischarge          = 0x32 // the amqp-value body of a discharge control message
	codeDeclared           = 0x33
	codeTransactionalState = 0x34
)

// Transaction capabilities and error conditions [4.5.8, 4.5.9].
const (
	TxnCapLocal         encoding.Symbol = "amqp:local-transactions"
	ErrCondTxnUnknownID encoding.Symbol = "amqp:transaction:unknown-id"
	ErrCondTxnRollback  encoding.Symbol = "amqp:transaction:rollback"
	ErrCondTxnTimeout   encoding.Symbol = "amqp:transaction:timeout"
)

/*
<type name="coordinator" class="composite" source="list" provides="target">

	<descriptor name="amqp:coordinator:list" code="0x00000000:0x00000030"/>
	<field name="capabilities" type="symbol" requires="txn-capability" multiple="true"/>

</type>
*/
// A coordinator decodes as a Target with Coordinator set: it stands where
// a target does in an attach, and only its capabilities mean anything.

func (t *Target) marshalCoordinator(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeCoordinator, []encoding.EncField{
		{Value: &t.Capabilities, Omit: t.Capabilities == nil},
	})
}

func (t *Target) unmarshalCoordinator(r *buffer.Buffer) error {
	t.Coordinator = true
	return encoding.ReadComposite(r, codeCoordinator, []encoding.DecField{
		{Value: &t.Capabilities, Name: "capabilities"},
	})
}

/*
<type name="declared" class="composite" source="list" provides="delivery-state, outcome">

	<descriptor name="amqp:declared:list" code="0x00000000:0x00000033"/>
	<field name="txn-id" type="*" requires="txn-id" mandatory="true"/>

</type>
*/
type Declared struct {
	TxnID []byte
}

/*
<type name="transactional-state" class="composite" source="list" provides="delivery-state">

	<descriptor name="amqp:transactional-state:list" code="0x00000000:0x00000034"/>
	<field name="txn-id" type="*" mandatory="true" requires="txn-id"/>
	<field name="outcome" type="*" requires="outcome"/>

</type>
*/
type TransactionalState struct {
	TxnID   []byte
	Outcome DeliveryState // nil: none yet
}

func (*Declared) deliveryState()           {}
func (*TransactionalState) deliveryState() {}

func (s *Declared) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeDeclared, []encoding.EncField{
		{Value: &s.TxnID},
	})
}

func (s *Declared) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeDeclared, []encoding.DecField{
		{Value: &s.TxnID, Name: "txn-id", Required: true},
	})
}

func (s *TransactionalState) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeTransactionalState, []encoding.EncField{
		{Value: &s.TxnID},
		{Value: s.Outcome, Omit: s.Outcome == nil},
	})
}

func (s *TransactionalState) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeTransactionalState, []encoding.DecField{
		{Value: &s.TxnID, Name: "txn-id", Required: true},
		{Value: stateField{&s.Outcome}, Name: "outcome"},
	})
}
