//go:build race

package mqtt

// raceEnabled: the race detector enlarges every frame, so stack budgets mean
// nothing under -race.
const raceEnabled = true
