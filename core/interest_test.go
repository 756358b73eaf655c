package core

import (
	"slices"
	"testing"
)

// fanSource stands for the MQTT front-end: one broad subscription, its
// consumers' filters behind it.
type fanSource struct{ sink }

func (*fanSource) Filters(fn func(string)) { fn("m/1"); fn("m/2") }

// The interest summary holds consuming subscriptions only, a shared one
// as $share/g/f, a FilterSource's consumers instead of its "#", and
// the watcher hears of an addition before it takes effect and of removals.
func TestRouterFilters(t *testing.T) {
	r := NewRouter(RouterOptions{Node: "n"})
	var heard []string
	r.WatchFilters(func(f string) { heard = append(heard, f) })
	mustSubscribe(t, r, "a/+", &sink{}, SubOptions{})
	mustSubscribe(t, r, "$share/g/s/#", &sink{}, SubOptions{})
	mustSubscribe(t, r, "#", &sink{}, SubOptions{LocalOnly: true}) // the cluster
	mustSubscribe(t, r, "#", &fanSource{}, SubOptions{SkipOrigin: ProtocolMQTT})
	gone := mustSubscribe(t, r, "x", &sink{}, SubOptions{})
	r.Unsubscribe(gone)
	r.FilterAdded("$share/h/m/3")
	var got []string
	r.Filters(func(f string) { got = append(got, f) })
	slices.Sort(got)
	if want := []string{"$share/g/s/#", "a/+", "m/1", "m/2"}; !slices.Equal(got, want) {
		t.Fatalf("Filters = %q, want %q", got, want)
	}
	if want := []string{"a/+", "$share/g/s/#", "x", "", "$share/h/m/3"}; !slices.Equal(heard, want) {
		t.Fatalf("watcher heard %q, want %q", heard, want)
	}
}
