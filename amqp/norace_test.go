//go:build !race

package amqp

const raceEnabled = false
