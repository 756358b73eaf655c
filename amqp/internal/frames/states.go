package frames

import (
	"github.com/tolsey/tolsey/amqp/internal/buffer"
	"github.com/tolsey/tolsey/amqp/internal/encoding"
)

// DeliveryState is the state of a delivery (part 3 section 3.4): Received,
// or one of the outcomes Accepted, Rejected, Released, Modified, or a
// transaction's Declared and TransactionalState (txn.go). States this
// package does not model decode as
// *OtherState so that they pass through intact.
type DeliveryState interface {
	encoding.Marshaler
	deliveryState()
}

/*
<type name="received" class="composite" source="list" provides="delivery-state">

	<descriptor name="amqp:received:list" code="0x00000000:0x00000023"/>
	<field name="section-number" type="uint" mandatory="true"/>
	<field name="section-offset" type="ulong" mandatory="true"/>

</type>
*/
type Received struct {
	SectionNumber uint32
	SectionOffset uint64
}

/*
<type name="accepted" class="composite" source="list" provides="delivery-state, outcome">

	<descriptor name="amqp:accepted:list" code="0x00000000:0x00000024"/>

</type>
*/
type Accepted struct{}

/*
<type name="rejected" class="composite" source="list" provides="delivery-state, outcome">

	<descriptor name="amqp:rejected:list" code="0x00000000:0x00000025"/>
	<field name="error" type="error"/>

</type>
*/
type Rejected struct {
	Error *Error
}

/*
<type name="released" class="composite" source="list" provides="delivery-state, outcome">

	<descriptor name="amqp:released:list" code="0x00000000:0x00000026"/>

</type>
*/
type Released struct{}

/*
<type name="modified" class="composite" source="list" provides="delivery-state, outcome">

	<descriptor name="amqp:modified:list" code="0x00000000:0x00000027"/>
	<field name="delivery-failed" type="boolean"/>
	<field name="undeliverable-here" type="boolean"/>
	<field name="message-annotations" type="fields"/>

</type>
*/
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations encoding.Fields
}

// OtherState is a delivery state with a descriptor this package does not
// model, kept as its generic decoding.
type OtherState struct {
	encoding.Described
}

func (*Received) deliveryState()   {}
func (*Accepted) deliveryState()   {}
func (*Rejected) deliveryState()   {}
func (*Released) deliveryState()   {}
func (*Modified) deliveryState()   {}
func (*OtherState) deliveryState() {}

func (s *Received) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeReceived, []encoding.EncField{
		{Value: &s.SectionNumber},
		{Value: &s.SectionOffset},
	})
}

func (s *Received) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeReceived, []encoding.DecField{
		{Value: &s.SectionNumber, Name: "section-number", Required: true},
		{Value: &s.SectionOffset, Name: "section-offset", Required: true},
	})
}

func (s *Accepted) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeAccepted, nil)
}

func (s *Accepted) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeAccepted, nil)
}

func (s *Rejected) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeRejected, []encoding.EncField{
		{Value: s.Error, Omit: s.Error == nil},
	})
}

func (s *Rejected) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeRejected, []encoding.DecField{
		{Value: encoding.Optional(&s.Error), Name: "error"},
	})
}

func (s *Released) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeReleased, nil)
}

func (s *Released) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeReleased, nil)
}

func (s *Modified) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteComposite(w, codeModified, []encoding.EncField{
		{Value: &s.DeliveryFailed, Default: !s.DeliveryFailed},
		{Value: &s.UndeliverableHere, Default: !s.UndeliverableHere},
		{Value: &s.MessageAnnotations, Omit: s.MessageAnnotations == nil},
	})
}

func (s *Modified) UnmarshalAMQP(r *buffer.Buffer) error {
	return encoding.ReadComposite(r, codeModified, []encoding.DecField{
		{Value: &s.DeliveryFailed, Name: "delivery-failed"},
		{Value: &s.UndeliverableHere, Name: "undeliverable-here"},
		{Value: &s.MessageAnnotations, Name: "message-annotations"},
	})
}

func (s *OtherState) MarshalAMQP(w *buffer.Buffer) error {
	return encoding.WriteDescribed(w, s.Described)
}

// readDeliveryState decodes whichever delivery state is at the cursor.
func readDeliveryState(r *buffer.Buffer) (DeliveryState, error) {
	code, err := encoding.PeekDescriptor(r)
	if err != nil {
		code = 0 // a symbolic descriptor we don't know: keep it generically
	}
	var s interface {
		DeliveryState
		encoding.Unmarshaler
	}
	switch code {
	case codeReceived:
		s = new(Received)
	case codeAccepted:
		s = new(Accepted)
	case codeRejected:
		s = new(Rejected)
	case codeReleased:
		s = new(Released)
	case codeModified:
		s = new(Modified)
	case codeDeclared:
		s = new(Declared)
	case codeTransactionalState:
		s = new(TransactionalState)
	default:
		v, err := encoding.ReadAny(r)
		if err != nil {
			return nil, err
		}
		d, ok := v.(encoding.Described)
		if !ok {
			return nil, encoding.ErrWrongType
		}
		return &OtherState{Described: d}, nil
	}
	if err := s.UnmarshalAMQP(r); err != nil {
		return nil, err
	}
	return s, nil
}

// stateField decodes a DeliveryState-typed field.
type stateField struct{ p *DeliveryState }

func (f stateField) UnmarshalAMQP(r *buffer.Buffer) (err error) {
	*f.p, err = readDeliveryState(r)
	return err
}

// OwnState returns st decoded again from a copy of its encoding, or st
// itself when it holds no bytes. A state decoded from a frame aliases the
// frame (a txn-id, binary values in a rejected's error info or a
// modified's message annotations): one kept after the reader has read on
// (a disposition the writer applies, and may send back) must own them.
func OwnState(st DeliveryState) (DeliveryState, error) {
	switch st.(type) {
	case nil, *Accepted, *Released, *Received:
		return st, nil
	}
	var w buffer.Buffer
	if err := st.MarshalAMQP(&w); err != nil {
		return nil, err
	}
	return readDeliveryState(buffer.New(w.Written()))
}
