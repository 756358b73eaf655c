//go:build !race

package amqplean

const raceEnabled = false
