//go:build !unix

package mqtt

import "time"

// processCPU is not measured here: benchmarks report 0 CPU per message.
func processCPU() time.Duration { return 0 }
