//go:build race

package server

// raceSlowdown scales the time limits of timing tests under the race detector, which
// slows everything several times.
const raceSlowdown = 10

// raceShare divides the client counts of the load tests under the race detector (a third of
// them run).
const raceShare = 3

// raceMemory scales the memory bounds under the race detector, whose instrumented
// code allocates more.
const raceMemory = 1.5
