package amqp

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// TestAsLinkError: a refusal keeps the condition of the link error it
// carries, however deeply wrapped (errors.As, not a type assertion on the
// outer error); an error that carries none is an internal-error, with its
// text as the description.
func TestAsLinkError(t *testing.T) {
	le := linkErr(frames.ErrCondNotFound, "no such subscription")
	for _, err := range []error{
		le,
		fmt.Errorf("open subscription: %w", le),
		fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", le)),
		errors.Join(errors.New("other"), le),
	} {
		if got := asLinkError(err); got != le {
			t.Errorf("asLinkError(%q) = %+v, want the wrapped %+v", err, got, le)
		}
	}
	got := asLinkError(errors.New("disk full"))
	if got.Cond != frames.ErrCondInternalError || got.Desc != "disk full" {
		t.Errorf("plain error: got %+v, want amqp:internal-error \"disk full\"", got)
	}
}
