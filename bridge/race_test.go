//go:build race

package bridge

// raceEnabled: the race detector allocates on its own account, so
// allocation budgets mean nothing under -race.
const raceEnabled = true
