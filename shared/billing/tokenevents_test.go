package billing

import "testing"

// TestMaxTokenEventsFollowsTheCapWritten: the relay cuts at the cap
// written into the request, whichever limit wrote it: a spend limit's
// cap (980 for 0.01 left) below the token grant (4,096) is the bound,
// not the grant.
func TestMaxTokenEventsFollowsTheCapWritten(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Reservation
		want int64
	}{
		{"the money's cap below the grant", Reservation{Held: true, Granted: 4116, Bound: 20, Cap: 980, Choices: 1}, 1*(980+2) + 2},
		{"two choices at the money's cap", Reservation{Held: true, Granted: 8212, Bound: 20, Cap: 490, Choices: 2}, 2*(490+2) + 2},
		{"the client's cap", Reservation{Held: true, Granted: 1020, Bound: 20, Cap: 50, Choices: 1}, 1*(50+2) + 2},
		{"a cap above the grant: the grant", Reservation{Held: true, Granted: 1020, Bound: 20, Cap: 5000, Choices: 1}, 1*(1000+2) + 2},
		{"no cap written: the grant", Reservation{Held: true, Granted: 1020, Bound: 20, Choices: 1}, 1*(1000+2) + 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.MaxTokenEvents(); got != c.want {
				t.Fatalf("%d, want %d", got, c.want)
			}
		})
	}
}
