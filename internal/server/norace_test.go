//go:build !race

package server

// raceSlowdown scales the time limits of timing tests under the race detector (1 without it).
const raceSlowdown = 1

// raceShare divides the client counts of the load tests under the race detector (all of
// them run).
const raceShare = 1

// raceMemory scales the memory bounds under the race detector (1 without it).
const raceMemory = 1
