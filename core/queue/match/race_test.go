//go:build race

package match

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are meaningless under -race.
const raceEnabled = true
